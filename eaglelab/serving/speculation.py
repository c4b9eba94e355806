"""Real speculative decoding measured against plain greedy decoding: the typed result and its views.

:func:`eaglelab.model.decoding.benchmark_drafters` returns a :class:`Speculations` (one plain-greedy baseline shared by
every drafter, interleaved) of :class:`Speculation` each; notebooks 01, 03 and 04, ``eaglelab speculate`` and the
engine comparison read them. Numbers only: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from eaglelab.views import Column, View


@dataclass(frozen=True)
class Speculation:
    """One drafter's speculative decoding beside plain greedy decoding of the same prompts.

    Attributes:
        k: drafts per cycle; prompts, runs, cycles: how much was decoded.
        accept_len: τ, tokens emitted per cycle (the bonus token included).
        prompt_counts: per prompt, tokens emitted and cycles (repeats summed), for a band over prompts.
        tokens_per_s, greedy_tokens_per_s: speculative and plain throughput (one stream).
        matches_greedy: every speculative output equals the plain one.
        draft_s, verify_s, overhead_s: the mean cycle's split.
        position_acceptance: the conditional acceptance at each draft position.
        cpu_kernels: the small-batch CPU kernels took the verify's few-row forwards.
        timing: :func:`eaglelab.model.decoding.timing_trust`'s verdict (``ok``, ``note``, ``noise``, ...).
        outputs: the plain outputs' token ids, when kept.
    """

    k: int
    prompts: int
    runs: int
    cycles: int
    accept_len: float
    prompt_counts: list[list[int]]
    tokens_per_s: float
    greedy_tokens_per_s: float
    matches_greedy: bool
    draft_s: float
    verify_s: float
    overhead_s: float
    position_acceptance: list[float]
    cpu_kernels: bool
    timing: dict[str, Any] = field(default_factory=dict)
    outputs: list[list[int]] | None = None

    @property
    def speedup(self) -> float:
        return self.tokens_per_s / self.greedy_tokens_per_s

    @property
    def cycle_s(self) -> float:
        return self.draft_s + self.verify_s + self.overhead_s

    @property
    def greedy_step_s(self) -> float:
        return 1.0 / self.greedy_tokens_per_s

    @property
    def predicted_tokens_per_s(self) -> float:
        """The performance model's tok/s from τ and the measured cycle split (τ / T_cycle)."""
        return self.accept_len / self.cycle_s if self.cycle_s > 0 else float("nan")

    @property
    def prediction_error(self) -> float:
        return self.predicted_tokens_per_s / self.tokens_per_s - 1.0

    @property
    def timing_ok(self) -> bool:
        return bool(self.timing.get("ok", True))

    @property
    def timing_note(self) -> str:
        return str(self.timing.get("note", "ok"))

    def to_json(self) -> dict[str, Any]:
        out = {"k": self.k, "prompts": self.prompts, "runs": self.runs, "cycles": self.cycles,
               "accept_len": self.accept_len, "prompt_counts": self.prompt_counts, "tokens_per_s": self.tokens_per_s,
               "greedy_tokens_per_s": self.greedy_tokens_per_s, "speedup": self.speedup,
               "matches_greedy": self.matches_greedy, "draft_s": self.draft_s, "verify_s": self.verify_s,
               "overhead_s": self.overhead_s, "cycle_s": self.cycle_s, "greedy_step_s": self.greedy_step_s,
               "position_acceptance": self.position_acceptance, "predicted_tokens_per_s": self.predicted_tokens_per_s,
               "prediction_error": self.prediction_error, "cpu_kernels": self.cpu_kernels, "timing": self.timing,
               "timing_ok": self.timing_ok, "timing_note": self.timing_note}
        if self.outputs is not None:
            out["outputs"] = self.outputs
        return out

    def findings(self, tolerance: float = 0.10, tag: str = "", what: str = "") -> dict[str, str]:
        """Named sentences for a closed loop: ``measured`` (τ, both tok/s, the outputs, the verify's cost in decode
        steps), ``model`` (the model's tok/s from τ and the cycle split, and whether it is within ``tolerance``),
        ``timing`` (how noisy plain decoding was, or that the timings are not to be trusted), and ``closed_loop``, the
        three as one bullet. ``tag``: the checkpoints' evidence tag; ``what``: what ran where, in words."""
        err = self.prediction_error
        within = (f"(within {tolerance:.0%})" if math.isfinite(err) and abs(err) <= tolerance else
                  f"(beyond {tolerance:.0%}: prefill and the cut last cycle are outside the model)")
        kernels = " with the small-batch CPU kernels" if self.cpu_kernels else ""
        timing = (f"Timing: plain decoding varied {self.timing.get('noise', 0.0):.0%} across {self.runs} interleaved runs."
                  if self.timing_ok else f"**These timings are not to be trusted:** {self.timing_note}.")
        said = {"measured": f"measured τ = {self.accept_len:.2f}, {self.tokens_per_s:.1f} tok/s vs "
                            f"{self.greedy_tokens_per_s:.1f} greedy ({self.speedup:.2f}×, outputs identical: "
                            f"{self.matches_greedy}; verify {self.verify_s / self.greedy_step_s:.2f}× a decode step"
                            f"{kernels})",
                "model": f"the model predicts {self.predicted_tokens_per_s:.0f} tok/s from τ and the cycle split, "
                         f"{100 * err:+.1f}% off {within}",
                "timing": timing}
        head = f"**Closed loop{' ' + tag if tag else ''}**" + (f" ({what})" if what else "")
        return {**said, "closed_loop": f"{head}: {said['measured']}; {said['model']}. {timing}"}


#: The columns a set of measurements shows, one row per drafter (or target).
COLUMNS = (Column("run"), Column("τ", "{:.2f}"), Column("tok/s", "{:.1f}"), Column("greedy tok/s", "{:.1f}"),
           Column("speedup", "{:.2f}x"), Column("outputs equal greedy"), Column("timing"))


class Speculations(Mapping[str, Speculation]):
    """Several measurements by name (drafters against one shared baseline, or one drafter on two targets), in order."""

    def __init__(self, runs: Mapping[str, Speculation]):
        self._runs = dict(runs)

    def __getitem__(self, name: str) -> Speculation:
        return self._runs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {name: m.to_json() for name, m in self.items()}

    def view(self) -> View:
        return View.of(COLUMNS, [[name, m.accept_len, m.tokens_per_s, m.greedy_tokens_per_s, m.speedup,
                                  m.matches_greedy, m.timing_note] for name, m in self.items()], index="run")

    def table(self):
        return self.view().frame()

    def timing_warning(self) -> str:
        """"" when every measurement's timing was trusted, else what was seen, once per note: drafters measured
        against one shared baseline share its noise, said once, not per drafter."""
        notes: dict[str, list[str]] = {}
        for name, m in self.items():
            if not m.timing_ok:
                for note in m.timing_note.split("; "):
                    notes.setdefault(note, []).append(name)
        if not notes:
            return ""
        said = [note if len(names) == len(self) else f"{', '.join(names)}: {note}" for note, names in notes.items()]
        return "; **these timings are not to be trusted**: " + "; ".join(said)

    def findings(self, tag: str = "", device: str = "cpu", shared: bool = True, on: str = "") -> dict[str, str]:
        """``measured``: each run's τ and speedup over plain decoding, whether every output equals greedy, and the
        timing's warning. ``shared``: the runs share one plain-decoding baseline (interleaved); ``on``: what they ran
        on, in words (``the new target``)."""
        t = f"{' on ' + on if on else ''}{' ' + tag if tag else ''}"
        taus = ", ".join(f"{m.accept_len:.2f} ({name})" for name, m in self.items())
        speedups = " / ".join(f"{m.speedup:.2f}×" for m in self.values())
        same = "; one plain-decoding baseline, interleaved" if shared and len(self) > 1 else ""
        return {"measured": f"**Measured{t} (real speculative decoding on {device}, k = {self.k}):** τ {taus}; "
                            f"{speedups} plain decoding{' in the same order' if len(self) > 1 else ''} (all outputs "
                            f"equal greedy: {all(m.matches_greedy for m in self.values())}{same})"
                            f"{self.timing_warning()}."}

    def projection_findings(self, cycle_ms: float, baseline_tps: float, yours: bool) -> dict[str, str]:
        """``projected``: each run's τ as tok/s at the user's cycle (τ / T_cycle); not projected (said so) where the τ
        were measured on the demo world (``yours`` False)."""
        if not yours:
            return {"projected": "**Your scenario:** not projected: these τ were measured on the demo world and "
                                 "illustrate the method; the game plan's decision table takes τ from your numbers only."}
        tps = ", ".join(f"{name} {m.accept_len / (cycle_ms / 1e3):.1f} tok/s" for name, m in self.items())
        return {"projected": f"**Projected in your scenario** ({cycle_ms:g} ms cycle, {baseline_tps:g} tok/s baseline) "
                             f"[derived]: {tps}."}

    @property
    def k(self) -> int | None:
        return next(iter(self.values())).k if self else None
