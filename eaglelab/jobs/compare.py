"""Two drafters compared from configs and headers only, as one job with a headline that carries the worst finding.

``eaglelab compare``, notebook 02 and its picker call :func:`compare_drafters`. The checkpoint verdict alone
(:func:`eaglelab.checkpoints.drafters.verdicts.drafter_verdict`) judges shapes and settings; two drafters with the same
shapes but different vocabulary maps are "interchangeable" as whole files yet not as weights, so the
headline takes the worst of the verdict, the vocabulary maps and each drafter's fit to the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.drafters.inspection import Comparison, Inspection, compare_checkpoints, inspect_checkpoint
from eaglelab.inputs import quoted
from eaglelab.outputs import table
from eaglelab.settings import option
from eaglelab.views import Column, View

_LEVELS = ("interchangeable", "warm-start", "incompatible")


@dataclass(frozen=True)
class CompareSettings:
    """Which drafters to compare, and against which target.

    Attributes:
        old_drafter: the old drafter, A (folder, file, shard index or hub id).
        new_drafter: the other drafter, B (the new target's own, when it has one).
        new_target: the new target (folder, config.json or hub id) to check both against (None: drafters only).
    """

    old_drafter: str = option(positional=True)
    new_drafter: str = option(positional=True)
    new_target: str | None = None


@dataclass
class ComparisonReport:
    """A comparison and its headline, rendered once for the command line, the panel and notebook 02."""

    settings: CompareSettings
    comparison: Comparison

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

    def verdict_lines(self, loud: bool = False) -> list[str]:
        """The verdict of A vs B with its reasons, the vocabulary maps', and each drafter's on the target.

        Args:
            loud: the levels in capitals (the command line's way of making them stand out in plain text).
        """
        c = self.comparison

        def level(word: str) -> str:
            return word.upper() if loud else word

        out = [f"verdict, A vs B: {level(c.verdict.level)} in configs and shapes (the headline: the worst of this, the "
               "vocabulary maps and each drafter on the new target)", *(f"  - {r}" for r in c.verdict.reasons)]
        out.append(f"vocabulary maps: {level(c.vocab_maps.level)}" if c.vocab_maps else "vocabulary maps: not readable")
        if c.vocab_maps:
            out.append(f"  - {c.vocab_maps.message}")
        for label, v in c.target_verdicts.items():
            out += [f"{label.upper()} on the new target: {level(v.level)}", *(f"  - {r}" for r in v.reasons)]
        return out

    def lines(self) -> list[str]:
        """What ``eaglelab compare`` prints, one line each: the headline, the config and tensor differences as
        tables, the verdicts."""
        c = self.comparison
        out = [self.headline(), ""]
        if c.config_diff:
            out += self.config_view().text().splitlines()
        else:
            out.append("configs: identical")
        changed = [t for t in c.tensor_diff if t.status != "same"]
        out += ["", f"tensors: {len(c.tensor_diff)} names, {len(changed)} differ"]
        if changed:
            out += table([[quoted(t.name), t.a_shape, t.b_shape, t.a_dtype, t.b_dtype, t.status] for t in changed],
                         ["tensor", "A shape", "B shape", "A dtype", "B dtype", "status"]).splitlines()
        return out + [""] + self.verdict_lines(loud=True)

    def config_view(self) -> View:
        """The config keys that differ, classified: what ``eaglelab compare`` prints and notebook 02 shows."""
        columns = [Column("config key", lambda v: quoted(v, 60)), Column("A", lambda v: quoted(v, 60)),
                   Column("B", lambda v: quoted(v, 60)), Column("category"), Column("why", lambda v: v[:60])]
        return View.of(columns, [[d.key, d.a, d.b, d.category, d.why] for d in self.comparison.config_diff])

    def table(self):
        return self.config_view().frame()

    def markdown(self, tag: str = "") -> str:
        """The panel's answer: the headline in bold, then one line per verdict."""
        c = self.comparison
        lines = [f"**{self.headline(tag)}**", f"- A vs B in configs and shapes: {c.verdict.level}; "
                 + "; ".join(c.verdict.reasons[:3]),
                 f"- vocabulary maps: **{c.vocab_maps.level}** ({c.vocab_maps.message})" if c.vocab_maps
                 else "- vocabulary maps: not readable",
                 *(f"- {label.upper()} on the new target: **{v.level}**" for label, v in c.target_verdicts.items())]
        return "\n".join(lines)

    def findings(self, tag: str = "") -> dict[str, str]:
        """Named sentences: ``headline`` (the worst finding, bold) and ``pair`` (the verdicts, how many config keys and
        tensors differ, the vocabulary maps)."""
        c, s = self.comparison, self.settings
        arch = sum(d.category == "architecture" for d in c.config_diff)
        moved = sum(t.status != "same" for t in c.tensor_diff)
        on = "".join(f" {label.upper()} is **{v.level}**" + ("," if label == "a" else ".")
                     for label, v in c.target_verdicts.items())
        maps = f"**{c.vocab_maps.level}** ({c.vocab_maps.message})" if c.vocab_maps else "**not readable**"
        pair = (f"**The pair {tag}** (`{s.old_drafter}` vs `{s.new_drafter}`"
                + (f", on `{s.new_target}`" if s.new_target else "") + f"): A vs B **{c.verdict.level}** in configs and shapes; "
                f"{len(c.config_diff)} config keys differ ({arch} of them architecture); {moved} of {len(c.tensor_diff)} "
                f"tensors differ in shape, dtype or presence."
                + (f" On the new target:{on}" if on else "") + f" Vocabulary maps: {maps}.")
        return {"headline": f"**{self.headline(tag)}.**", "pair": pair}


def compare_drafters(settings: CompareSettings) -> ComparisonReport:
    """Configs, tensor tables, vocabulary maps and (with a target) each drafter's fit, from metadata only."""
    return ComparisonReport(settings, compare_checkpoints(settings.old_drafter, settings.new_drafter, settings.new_target))


@dataclass(frozen=True)
class InspectSettings:
    """Which checkpoint ``eaglelab inspect`` reads (its config and safetensors headers, no tensor data).

    Attributes:
        source: folder, .safetensors file, shard index, or hub id.
        revision: hub revision (branch, tag or commit).
    """

    source: str = option(positional=True)
    revision: str | None = None


def inspect_drafter(settings: InspectSettings) -> Inspection:
    """One checkpoint's tensor table and problems, checked against its own config
    (:func:`~eaglelab.checkpoints.drafters.inspection.inspect_checkpoint`)."""
    return inspect_checkpoint(settings.source, settings.revision)
