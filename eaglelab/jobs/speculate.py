"""Speculative decoding against plain greedy decoding on one prompt: ``eaglelab speculate`` as one job.

:func:`speculate` takes a :class:`SpeculateSettings` (the command's flags are generated from it) and returns a
:class:`SpeculationReport`. It times the way notebook 01's closed loop times
(:func:`eaglelab.model.decoding.benchmark_speculation`: a warm-up, then interleaved pairs of plain and speculative
runs, and on a CPU the small-batch kernels for the verify's few-row forwards), so the two never disagree on which
path pays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.drafters.preflight import check_drafter
from eaglelab.errors import ParameterError
from eaglelab.jobs.probe import DTYPES
from eaglelab.settings import DEFAULT_K, option


@dataclass(frozen=True)
class SpeculateSettings:
    """One prompt decoded both ways.

    Attributes:
        target: the target folder or hub id.
        drafter: the drafter folder.
        prompt: the prompt text.
        max_new_tokens: tokens generated per run.
        k: drafts per cycle.
        repeats: interleaved runs of plain and speculative decoding after a warm-up (3 or more judge the timing).
        dtype: the target's and the drafter's dtype.
        device: cpu, cuda, cuda:1 (default: cuda when available).
        trust_remote_code: allow the target's own code (off unless asked).
    """

    target: str
    drafter: str
    prompt: str
    max_new_tokens: int = option(64, min=1)
    k: int = option(DEFAULT_K, min=1)
    repeats: int = option(3, min=1)
    dtype: str = option("float32", choices=DTYPES)
    device: str | None = None
    trust_remote_code: bool = False


@dataclass
class SpeculationReport:
    """The text, τ, both throughputs, whether the outputs match, and whether the timing can be judged."""

    settings: SpeculateSettings
    numbers: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dict(self.numbers)

    def lines(self) -> list[str]:
        n, s = self.numbers, self.settings
        out = [n["text"], "",
               f"accept len {n['accept_len']:.2f} (k={s.k}), {n['tokens_per_s']:.1f} tok/s vs greedy "
               f"{n['greedy_tokens_per_s']:.1f} ({n['speedup']:.2f}x over {s.repeats} runs each), "
               f"matches greedy: {n['matches_greedy']}"
               + ("; the small-batch CPU kernels on, as in notebook 01" if n["cpu_kernels"] else "")]
        if not n["timing"]["ok"]:
            out.append(f"warning: {n['timing']['note']}")
        return out


def speculate(settings: SpeculateSettings) -> SpeculationReport:
    """Decode ``settings.prompt`` greedily with and without the drafter, timed as notebook 01 times it."""
    from eaglelab.model.decoding import benchmark_speculation
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import Target, load_target

    s = settings
    if not s.prompt.strip():
        raise ParameterError("--prompt", "is empty: give the text to decode")
    check_drafter(s.drafter, s.target)  # from metadata, before anything loads
    drafter = load_drafter(s.drafter)
    model, tok = load_target(s.target, dtype=s.dtype, device=s.device, trust_remote_code=s.trust_remote_code,
                             need_tokenizer=True)
    drafter = drafter.to(next(model.parameters()).device, model.dtype)
    target = Target.for_drafter(model, drafter.spec)
    ids = tok(s.prompt)["input_ids"]
    if not ids:
        raise ParameterError("--prompt", "gives no tokens with the target's tokenizer")
    run = benchmark_speculation(target, drafter, [ids], s.max_new_tokens, k=s.k, repeats=s.repeats,
                                keep_outputs=True, progress=False)
    numbers = {
        "text": tok.decode(run.outputs[0]),
        "accept_len": run.accept_len, "tokens_per_s": run.tokens_per_s, "greedy_tokens_per_s": run.greedy_tokens_per_s,
        "speedup": run.speedup, "matches_greedy": run.matches_greedy,
        "k": s.k,
        "repeats": s.repeats,
        "new_tokens": len(run.outputs[0]),
        "position_acceptance": run.position_acceptance,
        "cycle_split_s": {"draft_s": run.draft_s, "verify_s": run.verify_s, "overhead_s": run.overhead_s},
        "timing": run.timing,
        "cpu_kernels": run.cpu_kernels,
    }
    return SpeculationReport(settings, numbers)
