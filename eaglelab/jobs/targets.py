"""Two targets compared before any probe, from configs, headers and tokenizer files only: one job.

``eaglelab compare-targets``, notebook 02 and its findings call :func:`compare_targets`. Nothing is
loaded: the language models' configs (a multimodal wrapper's ``text_config`` read as the language
model), their safetensors headers when there are weights (quantization, the language model's prefix),
and their tokenizer, template and generation files, from local folders or hub ids alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from eaglelab.checkpoints.drafters.inspection import inspect_checkpoint
from eaglelab.checkpoints.drafters.tensor_table import strip_prefix
from eaglelab.checkpoints.files.sources import read_small_tensor
from eaglelab.checkpoints.targets.compare import (
    TargetVerdict,
    TemplateComparison,
    TokenizerComparison,
    compare_templates,
    compare_tokenizers,
    diff_target_configs,
    target_verdict,
)
from eaglelab.checkpoints.targets.config import Quantization, TargetWeights, quantization_of
from eaglelab.checkpoints.targets.reading import load_target_config, read_target_weights
from eaglelab.checkpoints.targets.tokenizer_files import Tokenizer, read_target_files, read_tokenizer
from eaglelab.errors import CheckpointMismatchError, ConfigError
from eaglelab.inputs import quoted
from eaglelab.outputs import table
from eaglelab.settings import option
from eaglelab.views import Column, View


@dataclass(frozen=True)
class TargetCompareSettings:
    """Which targets to compare, and (optionally) which drafter's ids to check.

    Attributes:
        old_target: the old target (folder, config.json, or hub id).
        new_target: the new target.
        old_drafter: the old target's drafter: the ids its draft vocabulary uses are checked in both tokenizers.
        revision: hub revision for hub ids.
    """

    old_target: str = option(positional=True)
    new_target: str = option(positional=True)
    old_drafter: str | None = None
    revision: str | None = None


@dataclass
class TargetSide:
    """One target as read: its config, how its weights are stored and named (None: no headers), its tokenizer."""

    source: str
    config: dict[str, Any]
    quantization: Quantization
    weights: TargetWeights | None
    tokenizer: Tokenizer

    @property
    def prefix(self) -> str | None:
        """Where the language model's weights are named (``""``, ``language_model.``; None: not read)."""
        return None if self.weights is None or self.weights.heads is None else self.weights.heads.prefix

    def to_json(self) -> dict[str, Any]:
        tok = self.tokenizer
        return {"source": self.source, "architectures": self.config.get("architectures"),
                "quantization": self.quantization.to_json(), "language_model_prefix": self.prefix,
                "heads": None if self.prefix is None else self.weights.heads.as_dict(),
                "tokenizer": {"kind": tok.kind, "ids": tok.size, "model_type": tok.model_type,
                              "digest": tok.vocabulary_digest, "templates": sorted(tok.templates),
                              "template_file": tok.template_file, "specials": tok.specials}}


@dataclass
class TargetComparisonReport:
    """The two targets side by side, and what it means for the old drafter."""

    settings: TargetCompareSettings
    a: TargetSide
    b: TargetSide
    config_diff: list
    tokenizers: TokenizerComparison
    templates: TemplateComparison
    verdict: TargetVerdict

    def headline(self) -> str:
        s = self.settings
        return f"{self.verdict.line} ({s.old_target} -> {s.new_target})"

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a.to_json(), "b": self.b.to_json(), "config_diff": [asdict(d) for d in self.config_diff],
                "tokenizers": self.tokenizers.to_json(), "templates": self.templates.to_json(),
                "verdict": {"level": self.verdict.level, "line": self.verdict.line, "reasons": list(self.verdict.reasons)},
                "headline": self.headline()}

    def config_view(self) -> View:
        """The language models' config fields that differ, each with what it means for the drafter."""
        columns = [Column("config key", lambda v: quoted(v, 60)), Column("old", lambda v: quoted(v, 40)),
                   Column("new", lambda v: quoted(v, 40)), Column("category"), Column("what it means", lambda v: v[:60])]
        return View.of(columns, [[d.key, d.a, d.b, d.category, d.why] for d in self.config_diff])

    def table(self):
        return self.config_view().frame()

    def markdown(self) -> str:
        """The two targets, their tokenizers and templates, and the verdict, as a Markdown block (notebook 02)."""
        sides = [f"- **{side}:** `{t.source}`: {t.quantization.line}; tokenizer {t.tokenizer.kind}, {t.tokenizer.size:,} "
                 f"ids; chat template {t.tokenizer.template_file or 'none'}" for side, t in (("old", self.a), ("new", self.b))]
        diff = [f"    - {line}" for line in self.templates.diff]
        return "\n".join([f"**{self.headline()}**", *sides, f"- **tokenizers:** {self.tokenizers.line}",
                          f"- **chat templates:** {self.templates.line}", *diff,
                          f"- **verdict: {self.verdict.level}**", *(f"    - {r}" for r in self.verdict.reasons)])

    def findings(self, tag: str = "") -> dict[str, str]:
        """``targets``: the verdict for the old drafter, how many language-model fields differ, tokenizers, templates."""
        s = self.settings
        return {"targets": f"**The two targets{' ' + tag if tag else ''}** (`{s.old_target}` -> `{s.new_target}`): "
                           f"**{self.verdict.level}**: {self.verdict.line}. {len(self.config_diff)} language-model fields "
                           f"differ; tokenizers: {self.tokenizers.line}; chat templates: {self.templates.line}."}

    def lines(self) -> list[str]:
        """What ``eaglelab compare-targets`` prints: the two targets, the config diff, tokenizers, templates, verdict.

        Text from the targets' files is quoted where a line is composed; print each line escaped (a file's text
        cannot add a line or move the cursor).
        """
        out = [self.headline(), ""]
        out += table([[side, t.source, quoted((t.config.get("architectures") or ["?"])[0], 60),
                       f"{t.quantization.method}: {t.quantization.scheme}" if t.quantization.method != "none" else "none",
                       "-" if t.prefix is None else quoted(t.prefix) if t.prefix else "(none)",
                       f"{t.tokenizer.kind}, {t.tokenizer.size:,} ids"] for side, t in (("old", self.a), ("new", self.b))],
                     ["", "target", "architecture", "quantization", "weights prefix", "tokenizer"]).splitlines()
        if self.config_diff:
            out += [""] + self.config_view().text().splitlines()
        else:
            out += ["", "configs: the language models' fields are identical"]
        out += ["", f"tokenizers: {self.tokenizers.line}"]
        out += [f"  - {line}" for line in self.tokenizers.special_changes[:10] + self.tokenizers.examples]
        out += [f"chat templates: {self.templates.line}", *(f"  {line}" for line in self.templates.diff)]
        return out + ["", f"verdict: {self.verdict.level.upper()}", *(f"  - {r}" for r in self.verdict.reasons)]


def read_target(source: str, revision: str | None = None) -> TargetSide:
    """A target's config, headers (when it has weights) and tokenizer files, metadata only.

    Raises:
        ConfigError, SourceError, HubError: naming the file and the problem.
    """
    config = load_target_config(source, revision)
    files = read_target_files(source, revision)
    modelopt = files.json("hf_quant_config.json")
    weights = read_target_weights(source, revision, modelopt)
    quant = weights.quantization if weights is not None else quantization_of(config, {}, modelopt)
    return TargetSide(source, config, quant, weights, read_tokenizer(files))


def drafter_target_ids(drafter: str) -> list[int]:
    """The target ids a drafter's ``lm_head`` rows stand for: ``arange(Vd) + d2t``, or every id of a full vocabulary.

    Raises:
        ConfigError, SourceError: the drafter cannot be read; CheckpointMismatchError: its maps are not readable.
    """
    insp = inspect_checkpoint(drafter)
    if insp.spec is None:
        raise ConfigError(drafter, f"is not an EAGLE-3 drafter ({insp.family.line})")
    d2t = {strip_prefix(n): t for n, t in insp.checkpoint.tensors.items()}.get("d2t")
    if d2t is None:
        if insp.spec.full_vocab:
            return list(range(insp.spec.vocab_size))
        raise CheckpointMismatchError(drafter, "has no d2t: its draft tokens are not known")
    if not insp.checkpoint.local:
        raise CheckpointMismatchError(drafter, "d2t of a hub drafter is not read (pass a local copy)")
    offsets = read_small_tensor(d2t)
    return [i + int(o) for i, o in enumerate(offsets)]


def compare_targets(settings: TargetCompareSettings) -> TargetComparisonReport:
    """Configs, quantization, tokenizers and chat templates of two targets, and the verdict for the old drafter."""
    a, b = read_target(settings.old_target, settings.revision), read_target(settings.new_target, settings.revision)
    ids = drafter_target_ids(settings.old_drafter) if settings.old_drafter else None
    diffs = diff_target_configs(a.config, b.config, a.quantization, b.quantization)
    tokenizers = compare_tokenizers(a.tokenizer, b.tokenizer, ids)
    templates = compare_templates(a.tokenizer, b.tokenizer)
    return TargetComparisonReport(settings, a, b, diffs, tokenizers, templates, target_verdict(diffs, tokenizers, templates))
