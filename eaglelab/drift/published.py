"""Published plug-in cases: a drafter measured on the target it was trained for and on a changed one.

``data/fixtures/plugin_published/cases.json`` collects what teams published about reusing a drafter as is
on a changed target (a quantized release, a fine-tune, a new version), each number with its source and
the sentence it was read from. None of them publishes both targets' logprobs, so the engine-file
predictor (:func:`eaglelab.drift.file_prediction.predict_from_files`) cannot be run on them; what they test
is the prior a user has before any measurement, from the change alone:

- **same weights, quantized** (FP8, FP4, INT8 of the very model): the old drafter keeps its τ
  (:func:`quantized_release_tau`); :func:`hold_quantized_release` reports that rule's error on every
  two-number case;
- **rotated** (QuaRot and kin): the target's hidden states are a rotation of the old ones, and the drafter
  collapses unless its input layers are rotated to match;
- **another fine-tune or version**: no prior; measure (``eaglelab probe``, or ``eaglelab predict`` on the
  two targets' logprobs).

Numbers and JSON only: no torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.errors import ConfigError
from eaglelab.inputs import loads_json, read_bytes

#: The fixture shipped with the repository.
PUBLISHED_CASES = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "plugin_published" / "cases.json"
#: What changed between the two targets.
CHANGE_KINDS = ("quantization", "rotation", "fine-tune", "version")
#: What was measured: τ (bonus included), a per-draft acceptance rate in %, accepted drafts per block, or nothing.
METRIC_KINDS = ("accept_len", "accept_rate_pct", "accepted_per_block", "none")
#: How much a case can be trusted, as its collector judged it from its source (highest first).
RELIABILITY = ("high", "medium-high", "medium", "low-medium", "low")
MAX_CASES_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class PublishedCase:
    """One published case: the drafter, the two targets, the numbers, and where they were read."""

    id: str
    change_kind: str
    metric_kind: str
    reliability: str
    drafter: str
    trained_for: str
    new_target: str
    change: str
    k: str | None
    tau_old: float | None
    tau_new: float | None
    metric: str
    source_url: str
    quote: str

    @property
    def both(self) -> bool:
        """The source gives the number on both targets."""
        return self.tau_old is not None and self.tau_new is not None

    @property
    def ratio(self) -> float | None:
        """New over old, in the source's own metric (None: one side not published)."""
        return self.tau_new / self.tau_old if self.both and self.tau_old else None

    def trusted(self, at_least: str = "medium") -> bool:
        """Its reliability is ``at_least`` or better."""
        return RELIABILITY.index(self.reliability) <= RELIABILITY.index(at_least)


def _number(value: Any, where: str, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(where, f"{name} must be a positive number or null, got {value!r:.40}")
    return float(value)


def _text(value: Any, where: str, name: str, choices: tuple[str, ...] | None = None, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, f"{name} must be a non-empty string, got {value!r:.40}")
    if choices is not None and value not in choices:
        raise ConfigError(where, f"{name} must be one of {', '.join(choices)}, got {value!r:.40}")
    return value


def read_published_cases(path: str | Path = PUBLISHED_CASES) -> list[PublishedCase]:
    """The cases in a fixture file (a JSON list of objects), each field checked.

    Raises:
        ConfigError: naming the file and the case: not a list, a missing or mistyped field, a number that is
            not positive, a source that is not an http(s) address, an id given twice.
    """
    where = str(path)
    data = loads_json(read_bytes(path, ConfigError, MAX_CASES_BYTES, "published cases"), where, ConfigError)
    if not isinstance(data, list):
        raise ConfigError(where, "expected a JSON list of published cases")
    cases, seen = [], set()
    for i, rec in enumerate(data):
        at = f"{where}: case {i}"
        if not isinstance(rec, dict):
            raise ConfigError(at, "expected a JSON object")
        case = PublishedCase(
            id=_text(rec.get("id"), at, "id"),
            change_kind=_text(rec.get("change_kind"), at, "change_kind", CHANGE_KINDS),
            metric_kind=_text(rec.get("metric_kind"), at, "metric_kind", METRIC_KINDS),
            reliability=_text(rec.get("reliability"), at, "reliability", RELIABILITY),
            drafter=_text(rec.get("drafter"), at, "drafter"), trained_for=_text(rec.get("trained_for"), at, "trained_for"),
            new_target=_text(rec.get("new_target"), at, "new_target"), change=_text(rec.get("change"), at, "change"),
            k=_text(rec.get("k"), at, "k", optional=True), tau_old=_number(rec.get("tau_old"), at, "tau_old"),
            tau_new=_number(rec.get("tau_new"), at, "tau_new"), metric=_text(rec.get("metric"), at, "metric"),
            source_url=_text(rec.get("source_url"), at, "source_url"), quote=_text(rec.get("quote"), at, "quote"))
        if not case.source_url.startswith(("https://", "http://")):
            raise ConfigError(at, f"source_url must be an http(s) address, got {case.source_url!r:.60}")
        if case.id in seen:
            raise ConfigError(at, f"id {case.id!r:.60} is given twice")
        seen.add(case.id)
        cases.append(case)
    return cases


def quantized_release_tau(tau_old: float) -> float:
    """The prior for a quantized release of the very weights the drafter was trained on: τ unchanged."""
    return tau_old


@dataclass(frozen=True)
class RuleCheck:
    """The quantized-release rule against the cases that publish both numbers: each case's error, and the summary."""

    errors: dict[str, float]  # case id -> predicted / published - 1
    median: float
    worst: float

    def to_json(self) -> dict[str, Any]:
        return {"errors": self.errors, "median_abs_error": self.median, "worst_abs_error": self.worst,
                "cases": len(self.errors)}


def hold_quantized_release(cases: list[PublishedCase], at_least: str = "medium") -> RuleCheck:
    """:func:`quantized_release_tau` against every same-weights quantization case with both numbers, of
    reliability ``at_least`` or better, in the source's own metric (τ, or the acceptance rate).

    Raises:
        ConfigError: no such case to hold the rule against.
    """
    held = [c for c in cases if c.change_kind == "quantization" and c.both and c.trusted(at_least)]
    if not held:
        raise ConfigError("published cases", f"no quantization case of reliability {at_least} or better has both numbers")
    errors = {c.id: quantized_release_tau(c.tau_old) / c.tau_new - 1 for c in held}
    sizes = [abs(e) for e in errors.values()]
    return RuleCheck(errors, statistics.median(sizes), max(sizes))
