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
from eaglelab.serving.speculation import Speculation
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
    """The text, τ, both throughputs, whether the outputs match, and whether the timing can be judged.

    Attributes:
        text: the speculative output, decoded; run: the measurement (:class:`~eaglelab.serving.speculation.Speculation`).
    """

    settings: SpeculateSettings
    text: str
    run: Speculation

    def to_json(self) -> dict[str, Any]:
        r = self.run
        return {"text": self.text, "accept_len": r.accept_len, "tokens_per_s": r.tokens_per_s,
                "greedy_tokens_per_s": r.greedy_tokens_per_s, "speedup": r.speedup, "matches_greedy": r.matches_greedy,
                "k": self.settings.k, "repeats": self.settings.repeats, "new_tokens": len(r.outputs[0]) if r.outputs else 0,
                "position_acceptance": r.position_acceptance,
                "cycle_split_s": {"draft_s": r.draft_s, "verify_s": r.verify_s, "overhead_s": r.overhead_s},
                "timing": r.timing, "cpu_kernels": r.cpu_kernels}

    def findings(self, tag: str = "") -> dict[str, str]:
        """``measured``: τ, both throughputs and whether the outputs match (:meth:`Speculation.findings`)."""
        return {"measured": f"**Measured{' ' + tag if tag else ''}:** {self.run.findings()['measured']}"}

    def lines(self) -> list[str]:
        r, s = self.run, self.settings
        out = [self.text, "",
               f"accept len {r.accept_len:.2f} (k={s.k}), {r.tokens_per_s:.1f} tok/s vs greedy "
               f"{r.greedy_tokens_per_s:.1f} ({r.speedup:.2f}x over {s.repeats} runs each), "
               f"matches greedy: {r.matches_greedy}"
               + ("; the small-batch CPU kernels on, as in notebook 01" if r.cpu_kernels else "")]
        if not r.timing_ok:
            out.append(f"warning: {r.timing_note}")
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
    return SpeculationReport(settings, tok.decode(run.outputs[0]), run)
