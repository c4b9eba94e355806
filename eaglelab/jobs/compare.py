"""Two drafters compared from configs and headers only, as one job with a headline that carries the worst finding.

``eaglelab compare``, notebook 02 and its picker call :func:`compare_drafters`. The checkpoint verdict alone
(:func:`eaglelab.checkpoints.verdicts.drafter_verdict`) judges shapes and settings; two drafters with the same
shapes but different vocabulary maps are "interchangeable" as whole files yet not as weights, so the
headline takes the worst of the verdict, the vocabulary maps and each drafter's fit to the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.inspection import compare_checkpoints
from eaglelab.inputs import renamed_fields
from eaglelab.settings import option

_LEVELS = ("interchangeable", "warm-start", "incompatible")


@renamed_fields({"drafter_a": "old_drafter", "drafter_b": "new_drafter", "target": "new_target"})
@dataclass(frozen=True)
class CompareSettings:
    """Which drafters to compare, and against which target.

    Attributes:
        old_drafter: the old drafter (folder, file, shard index or hub id).
        new_drafter: the other drafter (the new target's own, when there is one).
        new_target: the target both should serve (folder, config.json or hub id); None: drafters only.
    """

    old_drafter: str = option(positional=True, help="the old drafter, A (folder, file, index or hub id)")
    new_drafter: str = option(positional=True, help="the other drafter, B (the new target's own, when it has one)")
    new_target: str | None = option(None, old=("--target",),
                                    help="the new target (folder, config.json or hub id) to check both against")


@dataclass
class ComparisonReport:
    """A comparison (:class:`eaglelab.checkpoints.inspection.Comparison`) and its headline."""

    settings: CompareSettings
    comparison: Any

    @property
    def level(self) -> str:
        """The worst of: the drafters' verdict, their vocabulary maps (moved: warm-start), their fit to the target."""
        c = self.comparison
        levels = [c.verdict.level] + [v.level for v in c.target_verdicts.values()]
        if c.vocab_maps is not None and c.vocab_maps.level != "same":
            levels.append("warm-start")
        return max(levels, key=_LEVELS.index)

    @property
    def worst(self) -> str:
        """What sets the headline's level, in words."""
        c = self.comparison
        if c.verdict.level == self.level:
            return c.verdict.reasons[0] if c.verdict.reasons else "configs and tensor shapes agree"
        for label, v in c.target_verdicts.items():
            if v.level == self.level and v.reasons:
                return f"{label.upper()} on the target: {v.reasons[0]}"
        return c.vocab_maps.message

    def headline(self, tag: str = "") -> str:
        s = self.settings
        on = f" on {s.new_target}" if s.new_target else ""
        return (f"{self.level.upper()}{' ' + tag if tag else ''}: {s.old_drafter} (A) vs {s.new_drafter} (B){on}; "
                f"worst finding: {self.worst}")

    def to_json(self) -> dict[str, Any]:
        return {**self.comparison.to_json(), "headline": {"level": self.level, "worst": self.worst}}


def compare_drafters(settings: CompareSettings) -> ComparisonReport:
    """Configs, tensor tables, vocabulary maps and (with a target) each drafter's fit, from metadata only."""

    return ComparisonReport(settings, compare_checkpoints(settings.old_drafter, settings.new_drafter, settings.new_target))
