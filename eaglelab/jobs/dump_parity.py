"""Do the engines' dumps give the live probe's numbers? Notebook 03's dump path checked end to end.

:func:`dump_parity` dumps both targets as the engines lay them out (A as SpecForge writes it, B as vLLM's hidden-state
connector does), probes from the dumps with the targets read for their heads only, and sets every number beside the
live probe's: the same states read twice agree to float rounding, or a probe from an engine's dumps would not give the
live answer.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from eaglelab.jobs.probe import DumpSettings, ProbeSettings, dump_states, probe_checkpoints
from eaglelab.views import Column, View

if TYPE_CHECKING:  # the types only
    from eaglelab.probe.plugin import ProbeResult

#: The same states read twice: what float rounding can account for, no more.
DUMP_TOLERANCE = 1e-4


@dataclass(frozen=True)
class DumpParity:
    """The live probe beside the probe from the engines' dumps (None: the probe was made from dumps already).

    Attributes:
        settings: the probe's settings (its dump folders when it was made from dumps).
        live: the live probe's result; dumped: the probe from dumps of the same sequences, or None.
        tolerance: the largest gap float rounding accounts for.
    """

    settings: ProbeSettings
    live: ProbeResult
    dumped: ProbeResult | None
    tolerance: float = DUMP_TOLERANCE

    @property
    def gaps(self) -> dict[str, float]:
        """The largest absolute difference, live against dumps, per kind of number."""
        if self.dumped is None:
            return {}
        live, dumped = self.live, self.dumped

        def numbers(result) -> list[float]:
            return [x for layer in result.layers for x in (layer.cosine_mean, layer.rel_l2, layer.cka)]

        return {"similarity": max(abs(x - y) for x, y in zip(numbers(live), numbers(dumped))),
                "agreement": abs(live.argmax_agreement - dumped.argmax_agreement), "tv": abs(live.tv - dumped.tv),
                "τ per position": max(abs(x - y) for ev, dv in ((live.eval_a, dumped.eval_a), (live.eval_b, dumped.eval_b))
                                      for x, y in zip(ev["chain"], dv["chain"]))}

    @property
    def worst(self) -> float | None:
        return max(self.gaps.values()) if self.gaps else None

    @property
    def holds(self) -> bool | None:
        """The dumps reproduce every live number within the tolerance (None: nothing to compare)."""
        return None if self.worst is None else self.worst <= self.tolerance

    def view(self) -> View:
        results = {"live": self.live, **({"from dumps": self.dumped} if self.dumped is not None else {})}
        columns = [Column("probe"), Column("τ on A", "{:.5f}"), Column("τ on B", "{:.5f}"), Column("agreement", "{:.5f}"),
                   Column("TV", "{:.5f}")]
        return View.of(columns, [[name, r.eval_a["accept_len"], r.eval_b["accept_len"], r.argmax_agreement, r.tv]
                                 for name, r in results.items()], index="probe")

    def table(self):
        return self.view().frame()

    def to_json(self) -> dict[str, Any]:
        return {"gaps": self.gaps, "worst": self.worst, "tolerance": self.tolerance, "holds": self.holds}

    def findings(self, tag: str = "") -> dict[str, str]:
        """``dumps``: that the dumps reproduce the live numbers (within what), or by how much they do not, or, for a
        probe made from dumps, which ones."""
        head = f"**The engines' dumps{' ' + tag if tag else ''}:** "
        s = self.settings
        if self.dumped is None:
            return {"dumps": head + f"probed from {s.old_states} (A) and {s.new_states} (B), the targets read for their "
                                    "heads only."}
        if self.holds:
            return {"dumps": head + "SpecForge-layout dumps of A and vLLM-layout dumps of B reproduce every live number "
                                    f"(similarity, agreement, TV, τ per position) within {self.worst:.1e}."}
        name = max(self.gaps, key=self.gaps.get)
        return {"dumps": head + "SpecForge-layout dumps of A and vLLM-layout dumps of B do **not** reproduce the live "
                                f"numbers: they differ by up to {self.worst:.1e} ({name}), beyond {self.tolerance:.0e}: a "
                                "probe from your engines' dumps would not give this notebook's answer; check the dumps' "
                                "layer ids and dtype before trusting one."}


def dump_parity(settings: ProbeSettings, live: ProbeResult, tolerance: float = DUMP_TOLERANCE) -> DumpParity:
    """Dump both targets of ``settings`` in the engines' layouts (in a temporary folder), probe from the dumps, and set
    the result beside ``live``; a probe made from dumps (``settings.from_dumps``) is returned as it is."""
    if settings.from_dumps:
        return DumpParity(settings, live, None, tolerance)
    with tempfile.TemporaryDirectory() as tmp:
        for name, target, layout in (("a", settings.old_target, "specforge"), ("b", settings.new_target, "vllm")):
            dump_states(DumpSettings(target, settings.old_drafter, f"{tmp}/{name}", layout=layout, data=settings.data,
                                     world_dir=settings.world_dir, sequences=settings.sequences, seq_len=settings.seq_len),
                        progress=False)
        dumped = probe_checkpoints(replace(settings, old_states=f"{tmp}/a", new_states=f"{tmp}/b"), progress=False).result
    return DumpParity(settings, live, dumped, tolerance)
