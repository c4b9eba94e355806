"""One speculative cycle of the serving-cost model, term by term: why the verify costs what it costs.

:func:`cycle_cost` reads a calibrated :class:`~eaglelab.serving.load.LoadModel` at one concurrency: the verify of k + 1
tokens without and with CUDA graphs, a graph-captured decode step, and the cycle's parts largest first, each with the
lever that shrinks it (notebook 01's section 3). Numbers only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from eaglelab.serving.load import LoadModel
from eaglelab.views import Column, View


@dataclass(frozen=True)
class CyclePart:
    """One term of the cycle: its time, its share of the cycle, and what shrinks it."""

    part: str
    ms: float
    share: float
    lever: str


@dataclass(frozen=True)
class CycleCost:
    """A cycle at one concurrency, term by term, beside a decode step (and the verify as measured, when given).

    Attributes:
        what: the model in words (the target and machine), with its evidence tag.
        verify_ms, verify_graphs_ms: the verify of ``k + 1`` tokens without and with CUDA graphs.
        decode_ms: a graph-captured decode step.
        parts: the cycle's terms, largest first.
        measured_verify_ms: the verify as measured, when given.
    """

    what: str
    k: int
    concurrency: int
    verify_ms: float
    verify_graphs_ms: float
    decode_ms: float
    parts: tuple[CyclePart, ...]
    measured_verify_ms: float | None = None

    @property
    def lever(self) -> str:
        """What shrinks the largest part."""
        return self.parts[0].lever

    def view(self) -> View:
        columns = [Column("part"), Column("ms", "{:.2f}"), Column("share", "{:.0%}"), Column("lever")]
        return View.of(columns, [[p.part, p.ms, p.share, p.lever] for p in self.parts], index="part")

    def table(self):
        return self.view().frame()

    def findings(self, tag: str = "") -> dict[str, str]:
        """``cycle``: the verify with and without CUDA graphs, the decode step, the four largest parts and the lever.
        ``tag``: the evidence tag of the point the model is calibrated on."""
        t = f" {tag}" if tag else ""
        measured = (f"; the verify measured {self.measured_verify_ms:g} ms{t}" if self.measured_verify_ms is not None
                    else "")
        parts = "; ".join(f"{p.part} {p.ms:.1f} ms ({100 * p.share:.0f}%)" for p in self.parts[:4])
        return {"cycle": f"**Cycle cost** ({self.what}, calibrated at your point{t}): a {self.k + 1}-token verify at "
                         f"{self.verify_ms:.1f} ms without CUDA graphs ({self.verify_graphs_ms:.1f} ms with them"
                         f"{measured}) and a graph-captured decode step at {self.decode_ms:.1f} ms. Of the cycle, {parts}: "
                         f"the largest lever is {self.lever}."}


def cycle_cost(model: LoadModel, k: int, what: str, concurrency: int = 1,
               measured_verify_ms: float | None = None) -> CycleCost:
    """The cycle of ``model`` at ``concurrency`` with ``k`` drafts, term by term (:meth:`LoadModel.parts`)."""
    graphs = replace(model, machine=replace(model.machine, graphs=("decode", "verify", "draft")))
    parts = tuple(CyclePart(p["part"], p["ms"], p["share"], p["lever"]) for p in model.parts(concurrency, k))
    return CycleCost(what, k, concurrency, 1e3 * float(model.verify_s(concurrency, k)),
                     1e3 * float(graphs.verify_s(concurrency, k)), 1e3 * float(model.decode_s(concurrency)), parts,
                     measured_verify_ms)
