"""The Kimi family at full size, from headers alone: notebook 02's sample of public configs as one job.

:func:`kimi_family` writes the Kimi-shaped sparse checkpoints (:func:`eaglelab.worlds.kimi_shapes.build_kimi_sample`:
real safetensors headers, weights as holes), inspects each drafter, compares the drafters pair by pair on the K2.5
target, the two targets (K2 -> K2.5), and two K2.5 tokenizer folders that differ in the chat template only; the
:class:`KimiFamily` it returns owns the tables and the findings sentence. Metadata only: no torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from eaglelab.checkpoints.drafters.inspection import Comparison, Inspection, compare_checkpoints, inspect_checkpoint
from eaglelab.jobs.targets import TargetCompareSettings, TargetComparisonReport, compare_targets
from eaglelab.views import Column, View
from eaglelab.worlds.kimi_shapes import KIMI_SAMPLE, KimiSample, build_kimi_sample

#: The drafters of the sample, and the pairs compared on the K2.5 target.
KIMI_DRAFTERS = ("k2_drafter", "k25_llama_drafter", "k25_mla_drafter", "k26_mla_drafter")
KIMI_PAIRS = {"K2 -> K2.5 Llama": ("k2_drafter", "k25_llama_drafter"), "K2 -> K2.5 MLA": ("k2_drafter", "k25_mla_drafter"),
              "K2.5 MLA -> K2.6 MLA": ("k25_mla_drafter", "k26_mla_drafter")}
#: The target config fields the findings name (the rest are counted).
NAMED_CATEGORIES = ("rope and context", "quantization")


@dataclass(frozen=True)
class KimiFamily:
    """The sample's drafters inspected, the pairs compared, the two targets and the template-only pair.

    Attributes:
        sample: where each checkpoint was written.
        drafters: name -> its inspection; pairs: label -> the comparison on the K2.5 target.
        targets: Kimi-K2 -> Kimi-K2.5; template_only: two K2.5 tokenizer folders differing in the template.
        seconds: how long reading it all took (no tensor loaded).
    """

    sample: KimiSample
    drafters: dict[str, Inspection]
    pairs: dict[str, Comparison]
    targets: TargetComparisonReport
    template_only: TargetComparisonReport
    seconds: float

    def drafters_view(self) -> View:
        columns = [Column("drafter"), Column("what"), Column("attention"), Column("draft vocabulary"),
                   Column("params (B)", "{:.2f}"), Column("problems"), Column("status"), Column("cautions")]
        return View.of(columns, [[name, KIMI_SAMPLE[name], i.spec.attention, i.spec.draft_vocab_size,
                                  i.checkpoint.total_parameters / 1e9, len(i.problems), i.status_line, len(i.cautions)]
                                 for name, i in self.drafters.items()], index="drafter")

    def drafters_table(self):
        return self.drafters_view().frame()

    def pairs_view(self) -> View:
        columns = [Column("pair"), Column("verdict"), Column("first reason"), Column("config keys differing"),
                   Column("unclassified"), Column("tensors differing")]
        return View.of(columns, [[label, c.verdict.level, c.verdict.reasons[0], len(c.config_diff),
                                  sum(d.category == "unknown" for d in c.config_diff),
                                  sum(t.status != "same" for t in c.tensor_diff)] for label, c in self.pairs.items()],
                       index="pair")

    def pairs_table(self):
        return self.pairs_view().frame()

    def markdown(self) -> str:
        """The K2.6 drafter on K2.5, the two targets and the template-only pair, as a Markdown block."""
        k26 = self.pairs["K2.5 MLA -> K2.6 MLA"].target_verdicts["b"].reasons
        t = self.targets
        k2 = f"`{t.a.prefix}`" if t.a.prefix else "(none)"
        return "\n".join([*(f"- K2.6 on K2.5: {r}" for r in k26), f"- **{t.headline()}**",
                          f"- weight prefixes: K2 {k2}, K2.5 `{t.b.prefix}`; tokenizers: {t.tokenizers.line}",
                          f"- two tokenizer folders that differ only in the template: {self.template_only.headline()}",
                          *(f"    - {line}" for line in self.template_only.templates.diff),
                          f"- read in {self.seconds * 1e3:.0f} ms without loading a tensor"])

    def findings(self) -> dict[str, str]:
        """``kimi``: each pair's verdict, that every config key is classified, the problems found, the K2.6 head, the
        targets' named differences and the template-only verdict."""
        verdicts = "; ".join(f"{label}: **{c.verdict.level}** ({c.verdict.reasons[0]})" for label, c in self.pairs.items())
        unknown = sum(d.category == "unknown" for c in self.pairs.values() for d in c.config_diff)
        problems = sum(len(i.problems) for i in self.drafters.values())
        head = ("SGLang would serve a random head" if self.drafters["k26_mla_drafter"].sglang_random_head
                else "no caution")
        t = self.targets
        named = ", ".join(f"`{d.key}` {d.a} -> {d.b}" for d in t.config_diff
                          if d.category in NAMED_CATEGORIES and d.key != "quantization.kept")
        return {"kimi": f"**The Kimi family [sample]** (public configs, sparse weights): {verdicts}. Every config key of "
                        f"the three pairs is classified ({unknown} unknown); the full-vocabulary and MLA drafters are "
                        f"computed with {problems} problems; the K2.6 drafter ships no `lm_head` with `draft_vocab_size` "
                        f"written ({head}). K2 -> K2.5 targets: **{t.verdict.level}**, {named}; K2.5 keeps its language "
                        f"model under `{t.b.prefix}`; two K2.5 tokenizer folders that differ in the template only: "
                        f"**{self.template_only.verdict.level}**."}

    def to_json(self) -> dict:
        return {"pairs": {label: c.to_json()["verdict"] for label, c in self.pairs.items()},
                "targets": self.targets.to_json()["verdict"], "template_only": self.template_only.to_json()["verdict"]}


def kimi_family(out_dir: str | Path, fixtures: str | Path) -> KimiFamily:
    """Write the Kimi sample under ``out_dir`` (replacing one eaglelab wrote there) and read it, headers only."""
    start = time.perf_counter()
    kimi = build_kimi_sample(Path(out_dir), fixtures, force=True)
    drafters = {name: inspect_checkpoint(str(getattr(kimi, name))) for name in KIMI_DRAFTERS}
    pairs = {label: compare_checkpoints(str(getattr(kimi, a)), str(getattr(kimi, b)), str(kimi.k25_target))
             for label, (a, b) in KIMI_PAIRS.items()}
    targets = compare_targets(TargetCompareSettings(str(kimi.k2_target), str(kimi.k25_target), str(kimi.k2_drafter)))
    template_only = compare_targets(TargetCompareSettings(str(kimi.k25_tokenizer_k2_template), str(kimi.k25_tokenizer)))
    return KimiFamily(kimi, drafters, pairs, targets, template_only, time.perf_counter() - start)
