"""The serving engine's measurement beside the workbook's, as one job (notebooks 03 and 04, ``eaglelab engine``).

Each drafter folder is exported as vLLM reads it and run by vLLM itself on the same prompt token ids
the workbook decoded (:func:`eaglelab.engines.vllm.measure_in_engine`); the target's own run is made
once and shared by every drafter. Where vLLM's environment is absent the result says why and holds
no rows, so a notebook section skips with the reason instead of failing; a run vLLM's CPU build cannot
make as the workbook computes it (:func:`eaglelab.engines.vllm.engine_refusal`: an MLA width its kernel
lacks, a flag its MLA class does not compute) is skipped with its reason, the others run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglelab.progress import progress as progress_bar


@dataclass
class EngineComparison:
    """vLLM's τ beside the workbook's, per drafter (or target), or why the engine did not run.

    Attributes:
        rows: name -> :func:`eaglelab.engines.vllm.compare_with_workbook`'s dict.
        status: one line: the engine and its version, or why it was skipped.
        ran: whether the engine ran.
    """

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    status: str = ""
    ran: bool = False

    def findings(self) -> str:
        """One sentence for a notebook's findings."""
        from eaglelab.engines.vllm import engine_findings

        return engine_findings(self.rows, self.status)

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "status": self.status, "ran": self.ran}


def engine_beside_workbook(runs: dict[str, tuple[str, str]], prompts: list[list[int]], max_new_tokens: int, k: int,
                           workbook: dict[str, dict], engine: str | None = "vllm", stop_token_ids: list[int] | None = None,
                           progress: bool = True) -> EngineComparison:
    """Measure each ``(target, drafter folder)`` of ``runs`` in the serving engine and set it beside the workbook's.

    Args:
        runs: name -> (target folder, drafter folder); runs on one target share its engine run alone.
        prompts: the token ids the workbook decoded.
        max_new_tokens, k: as the workbook decoded them.
        workbook: name -> the workbook's own measurement of that run (:func:`eaglelab.model.decoding.benchmark_speculation`).
        engine: ``vllm``, or None to skip (the notebooks' ``SERVING_ENGINE = None``).
    """
    from eaglelab.engines.vllm import compare_with_workbook, engine_refusal, engine_status, measure_in_engine

    if engine is None:
        return EngineComparison(status="SERVING_ENGINE = None")
    ok, line = engine_status()
    if not ok:
        return EngineComparison(status=line)
    # what vLLM's CPU build cannot run as the workbook computes it (an MLA width its kernel lacks, ...) is skipped
    refused = {name: why for name, (target, folder) in runs.items() if (why := engine_refusal(target, folder))}
    runs = {name: run for name, run in runs.items() if name not in refused}
    for name, why in refused.items():
        line += f"; not run for {name}: {why}"
    if not runs:
        return EngineComparison(status=line)
    out = EngineComparison(status=line, ran=True)
    alone: dict[str, Any] = {}  # target -> its run without a drafter, made once
    for name, (target, folder) in progress_bar(list(runs.items()), desc="vLLM runs", disable=not progress):
        measured = measure_in_engine(target, folder, prompts, max_new_tokens, k=k, engine=engine,
                                     stop_token_ids=stop_token_ids, target_alone=alone.get(str(target)))
        alone[str(target)] = measured.target_alone
        out.rows[name] = compare_with_workbook(workbook[name], measured)
    return out
