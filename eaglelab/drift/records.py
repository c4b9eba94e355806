"""A drift sweep's point record, typed: what was moved, how far the target moved, and what the drafter did on each.

:func:`eaglelab.drift.sweep.measure_point` writes a record as JSON (the sweep's cache and notebook 05's findings
keep that JSON); :meth:`SweepRecord.from_json` reads it back, and the analysis and the predictors read its
fields by name. A record built by hand (a test's, a partial one) may leave out what a reader does not need:
the per-sequence hits, the per-draft accuracies, the measured decoding. No torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PointId:
    """Which B' a record is of: its family (``none``, ``path``, ``quant``, ``train``, ``pair``), magnitude and label."""

    family: str
    label: str
    magnitude: float = 0.0
    group: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PointId:
        return cls(str(d["family"]), str(d.get("label") or d["family"]), float(d.get("magnitude", 0.0)),
                   int(d.get("group", 0)))


@dataclass(frozen=True)
class DrafterOn:
    """The old drafter teacher forced on one target.

    Attributes:
        chain: per draft, the share of cycles whose first i + 1 drafts are accepted.
        accept_len: τ (1 + the chain's sum).
        acc: per draft, its accuracy where the earlier drafts held.
        walk_accept_len: τ with the hits replayed cycle by cycle (:class:`eaglelab.drift.measures.CycleWalk`).
        seq_hits, seq_counted: per sequence and draft, the hits and the positions counted (the bootstrap's input).
    """

    chain: list[float]
    accept_len: float
    acc: list[float] | None = None
    walk_accept_len: float | None = None
    seq_hits: list[list[float]] | None = None
    seq_counted: list[list[float]] | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DrafterOn:
        return cls(list(d.get("chain") or []), float(d["accept_len"]), d.get("acc"), d.get("walk_accept_len"),
                   d.get("seq_hits"), d.get("seq_counted"))


@dataclass(frozen=True)
class MeasuredDecoding:
    """Real speculative decoding of the old drafter on B' (:func:`eaglelab.drift.sweep.measured_decoding`)."""

    accept_len: float
    position_acceptance: list[float] | None = None
    prompts: int | None = None
    cycles: int | None = None
    tf_own_text: float | None = None
    walk_own_text: float | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MeasuredDecoding:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class SweepRecord:
    """One point of a drift sweep.

    Attributes:
        point: which B'.
        measures: the scalar A-vs-B' measures the predictors read, by name (``agreement``, ``tv``, ``kl``,
            ``tv_topk``, ``cos_aux``, ``cos_last``, ``cka_aux``, ``rel_l2_last``).
        on_a, on_b: the old drafter teacher forced on A and on B'.
        conditional_tau: the per-token rule's prediction of τ on B' (the ``conditional`` predictor).
        weight_distance: B''s relative weight distance from A (None: another model pair).
        measured: real speculative decoding on B', at the points the sweep measured.
        raw: the record's JSON as written, kept for the cache and the findings (:meth:`to_json`).
    """

    point: PointId
    measures: dict[str, float]
    on_a: DrafterOn
    on_b: DrafterOn
    conditional_tau: float | None = None
    weight_distance: float | None = None
    measured: MeasuredDecoding | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SweepRecord:
        """A record from its JSON (a cached file, or :func:`~eaglelab.drift.sweep.measure_point`'s dict).

        Raises:
            KeyError / TypeError / ValueError: a dict that is not a record (the sweep's cache treats it as missing).
        """
        measured = d.get("measured")
        return cls(PointId.from_json(d["point"]), {k: float(v) for k, v in d["measures"].items()},
                   DrafterOn.from_json(d["on_a"]), DrafterOn.from_json(d["on_b"]),
                   (d.get("conditional") or {}).get("accept_len"), d.get("weight_distance"),
                   MeasuredDecoding.from_json(measured) if measured else None, dict(d))

    def to_json(self) -> dict[str, Any]:
        """The record's JSON as it was written (or, for a record built here, its fields)."""
        if self.raw:
            return dict(self.raw)
        out = {"point": asdict(self.point), "measures": self.measures, "on_a": asdict(self.on_a),
               "on_b": asdict(self.on_b), "weight_distance": self.weight_distance,
               "measured": None if self.measured is None else asdict(self.measured)}
        return out | ({"conditional": {"accept_len": self.conditional_tau}} if self.conditional_tau is not None else {})

    @property
    def key(self) -> tuple[str, str]:
        """(family, label): a point's name in a sweep."""
        return self.point.family, self.point.label

    @property
    def family(self) -> str:
        return self.point.family

    @property
    def data(self) -> str:
        """The held-out set this point was teacher forced on, in one line ("" for a record that does not say)."""
        return str(self.raw.get("data") or "")

    @property
    def label(self) -> str:
        return self.point.label
