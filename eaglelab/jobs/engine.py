"""The serving engine's measurement beside the workbook's, as one job (notebooks 03 and 04, ``eaglelab engine``).

Each drafter folder is exported as vLLM reads it and run by vLLM itself on the same prompt token ids
the workbook decoded (:func:`eaglelab.engines.vllm.measure_in_engine`); the target's own run is made
once and shared by every drafter. Where vLLM's environment is absent the result says why and holds
no rows, so a notebook section skips with the reason instead of failing; a run vLLM's CPU build cannot
make as the workbook computes it (:func:`eaglelab.engines.vllm.engine_refusal`: an MLA width its kernel
lacks, a flag its MLA class does not compute) is skipped with its reason, the others run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eaglelab.checkpoints.drafters.preflight import check_drafter
from eaglelab.errors import EngineError
from eaglelab.progress import progress as progress_bar
from eaglelab.serving.speculation import Speculation
from eaglelab.settings import DEFAULT_K, option
from eaglelab.views import Column, View

if TYPE_CHECKING:
    from eaglelab.engines.vllm import EngineMeasurement


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

    def view(self) -> View:
        """One row per run: τ in vLLM beside the workbook's, their difference, and whether each side's outputs equal
        its own target alone."""
        columns = [Column("run"), Column("τ in vLLM", "{:.3f}"), Column("τ in the workbook", "{:.3f}"),
                   Column("difference", lambda d: f"{100 * d:+.1f}%"), Column("vLLM equals its target alone"),
                   Column("workbook equals greedy"), Column("engine")]
        return View.of(columns, [[name, r["tau_engine"], r["tau_workbook"], r["tau_difference"],
                                  r["engine_matches_target"], r["workbook_matches_greedy"], r["engine"]]
                                 for name, r in self.rows.items()], index="run")

    def table(self):
        return self.view().frame()


def engine_beside_workbook(runs: dict[str, tuple[str, str]], prompts: list[list[int]], max_new_tokens: int, k: int,
                           workbook: Mapping[str, Speculation], engine: str | None = "vllm",
                           stop_token_ids: list[int] | None = None, progress: bool = True) -> EngineComparison:
    """Measure each ``(target, drafter folder)`` of ``runs`` in the serving engine and set it beside the workbook's.

    Args:
        runs: name -> (target folder, drafter folder); runs on one target share its engine run alone.
        prompts: the token ids the workbook decoded.
        max_new_tokens, k: as the workbook decoded them.
        workbook: name -> the workbook's own measurement of that run (:func:`eaglelab.model.decoding.benchmark_speculation`).
        engine: ``vllm``, or None to skip (the notebooks' ``SERVING_ENGINE = None``).
    """
    from eaglelab.engines.vllm import compare_with_workbook, engine_refusal, engine_status, measure_drafters_in_engine

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
    by_target: dict[str, dict[str, str]] = {}  # one worker per target: its drafters, then the target alone once
    for name, (target, folder) in runs.items():
        by_target.setdefault(str(target), {})[name] = folder
    for target, drafters in progress_bar(list(by_target.items()), desc="vLLM (one process per target)",
                                         disable=not progress):
        measured = measure_drafters_in_engine(target, drafters, prompts, max_new_tokens, k=k, engine=engine,
                                              stop_token_ids=stop_token_ids)
        for name in drafters:
            out.rows[name] = compare_with_workbook(workbook[name], measured[name])
    out.rows = {name: out.rows[name] for name in runs}  # in the order asked
    return out


@dataclass(frozen=True)
class EngineMeasureSettings:
    """A drafter measured on a target in vLLM itself.

    Attributes:
        target: the target folder (local: vLLM loads it by path).
        drafter: the drafter folder, SpecForge or speculators layout.
        k: drafts per step.
        prompts: held-out prompts (the target's world, else built-in).
        tokens: new tokens per prompt.
        batch: one prompt at a time (as the workbook decodes) or all batched.
        compare: also run the workbook's decoder on the same prompts.
    """

    target: str
    drafter: str
    k: int = option(DEFAULT_K, min=1)
    prompts: int = option(8, min=1)
    tokens: int = option(64, min=1)
    batch: str = option("one", choices=("one", "all"))
    compare: bool = False


def _num(x, digits: int = 3) -> str:
    """A number for a line, or "-" where there is none (no drafts; a position no step reached)."""
    return "-" if x is None or x != x else f"{x:.{digits}f}"


def _nums(xs) -> str:
    return ", ".join(_num(x) for x in xs or []) or "-"


@dataclass
class EngineMeasureReport:
    """vLLM's run of the target alone and with the drafter, and (asked for) the workbook's decoder beside it."""

    settings: EngineMeasureSettings
    engine: EngineMeasurement
    prompts: int
    comparison: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine.to_json(), **({"comparison": self.comparison} if self.comparison else {})}

    def lines(self) -> list[str]:
        s, run, alone = self.settings, self.engine.with_drafter, self.engine.target_alone
        out = [f"{run.engine} {run.version}, k = {run.k}, {self.prompts} prompts x {s.tokens} tokens, batch {run.batch}: "
               f"τ {_num(run.tau)}, {_num(run.tokens_per_s, 1)} tok/s vs {_num(alone.tokens_per_s, 1)} alone "
               f"({_num(self.engine.speedup, 2)}x); outputs equal to the target alone: {self.engine.matches_target}",
               f"per-position acceptance, vLLM's (drafts 1..i all accepted): {_nums(run.position_rate)}",
               f"per-position acceptance, conditional (draft i given 1..i-1): {_nums(run.position_rate_conditional)}"]
        if self.comparison:
            c = self.comparison
            diff = "-" if c["tau_difference"] is None else f"{100 * c['tau_difference']:+.1f}%"
            out.append(f"the workbook's decoder on the same prompts: τ {_num(c['tau_workbook'])} ({diff} in vLLM), "
                       f"conditional per position {_nums(c['position_conditional_workbook'])}")
        out.append(f"engine warnings about the checkpoint (weights, keys, shapes): {len(run.load_warnings) or 'none'}")
        return out + [f"  {w}" for w in run.load_warnings]


def measure_drafter_in_vllm(settings: EngineMeasureSettings) -> EngineMeasureReport:
    """The drafter on the target in vLLM, on the prompt token ids the workbook decodes (its tokenizer's)."""
    from eaglelab.data.sets import measure_prompts, world_of
    from eaglelab.engines.vllm import compare_with_workbook, engine_status, measure_in_engine
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target
    from eaglelab.probe.plugin import measure_on_target

    s = settings
    check_drafter(s.drafter, s.target)  # from metadata, before anything loads
    ok, line = engine_status()
    if not ok:
        raise EngineError("vllm", line)
    model, tok = load_target(s.target, dtype="float32", device="cpu", need_tokenizer=True)  # the prompts' ids
    prompts = measure_prompts(tok, s.prompts, world_of(s.target))
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else None
    engine = measure_in_engine(s.target, s.drafter, prompts, s.tokens, k=s.k, batch=s.batch, stop_token_ids=eos)
    comparison = None
    if s.compare:
        workbook = measure_on_target(model, load_drafter(s.drafter), prompts, s.tokens, k=s.k)
        comparison = compare_with_workbook(workbook, engine)
    return EngineMeasureReport(settings, engine, len(prompts), comparison)
