"""Inspect one drafter checkpoint, or compare two, from metadata only.

Joins :mod:`eaglelab.checkpoints.files.sources` (files, headers) with what EAGLE-3 expects: the spec
(:mod:`~eaglelab.checkpoints.drafters.spec`), the tensor table (:mod:`~eaglelab.checkpoints.drafters.tensor_table`), the
config diff (:mod:`~eaglelab.checkpoints.drafters.config_rules`) and the verdicts
(:mod:`~eaglelab.checkpoints.drafters.verdicts`).
Used by notebook 02 and by ``eaglelab inspect`` / ``eaglelab compare``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.config_rules import diff_configs
from eaglelab.checkpoints.drafters.spec import DrafterSpec, drafter_spec_from_config
from eaglelab.checkpoints.drafters.tensor_table import (
    canonical_tensor_name,
    check_tensors_against_spec,
    check_vocab_maps,
    expected_eagle3_tensors,
    expected_parameters,
    head_cautions,
    layer_named,
    sglang_leaves_head_random,
    strip_prefix,
    table_problems,
)
from eaglelab.checkpoints.drafters.variants import Family, cautions, drafter_family, refusals
from eaglelab.checkpoints.drafters.verdicts import Verdict, drafter_verdict, drafter_vs_target, trainer_cautions
from eaglelab.checkpoints.files.config_diff import ConfigDiff
from eaglelab.checkpoints.files.sources import Checkpoint, load_checkpoint, read_config, read_small_tensor
from eaglelab.checkpoints.targets.config import TargetWeights, target_weights
from eaglelab.checkpoints.targets.reading import load_target_config, modelopt_config, read_target_weights
from eaglelab.errors import ConfigError, EaglelabError, SourceError
from eaglelab.inputs import printable, quoted
from eaglelab.outputs import table


@dataclass
class Inspection:
    """One checkpoint, read from its config and headers.

    Attributes:
        checkpoint: the resolved source.
        spec: the drafter spec (None when the config is not an EAGLE-3 drafter's).
        problems: everything wrong against the config, one line each.
        family: the drafter family the config describes.
        refusals: why eaglelab would not compute it exactly (empty: it does), one line each.
        cautions: flags that engines read differently, one line each.
        target: for a target model's checkpoint: where its language model's embedding and head are,
            and its quantization (None for a drafter).
    """

    checkpoint: Checkpoint
    spec: DrafterSpec | None
    problems: list[str] = field(default_factory=list)
    family: Family = field(default_factory=lambda: Family("EAGLE-3", True))
    refusals: list[str] = field(default_factory=list)
    cautions: list[str] = field(default_factory=list)
    target: TargetWeights | None = None

    @property
    def computed(self) -> bool:
        """Whether eaglelab's model-running commands compute this drafter (exactly as its engine does)."""
        return self.spec is not None and not self.refusals

    @property
    def status_line(self) -> str:
        """``computed by eaglelab ...`` or ``shapes and configs only: ...``."""
        if not self.family.computed:
            return self.family.line
        if self.refusals:
            return f"shapes and configs only: {self.refusals[0]}"
        if self.spec.mla is not None:
            return "computed by eaglelab as SGLang computes it (Eagle3DeepseekV2ForCausalLM: multi-head latent attention)"
        return "computed by eaglelab exactly as its engine does"

    @property
    def config(self) -> dict[str, Any]:
        return self.checkpoint.config or {}

    @property
    def sglang_random_head(self) -> bool:
        """Whether SGLang would serve this drafter with its head at random (one of :attr:`cautions` says why)."""
        return self.spec is not None and sglang_leaves_head_random(self.spec, self.checkpoint.tensors)

    def target_lines(self) -> list[str]:
        """For a target model: its language model's weights and its quantization, one line each."""
        if self.target is None:
            return []
        h = self.target.heads
        names = (self.target.problem or "no language-model embedding in the headers") if h is None else \
            (f"language model under {printable(repr(h.prefix))}: " if h.prefix else "language model: ") + \
            f"embedding {quoted(h.embed_tokens)} {list(self.target.embed_shape)}, head {quoted(h.lm_head)}" + \
            (" (tied)" if h.tied else "")
        return [names, f"weights: {self.target.quantization.line}"]

    def tensor_rows(self) -> list[dict[str, Any]]:
        """One row per tensor: name, shape, dtype, parameters, meaning."""
        expected = expected_eagle3_tensors(self.spec) if self.spec else {}
        rows = []
        for name, t in sorted(self.checkpoint.tensors.items()):
            exp = expected.get(layer_named(self.spec, strip_prefix(name))) if self.spec else None
            rows.append({"name": name, "shape": list(t.shape), "dtype": t.dtype, "parameters": t.numel,
                         "meaning": exp.meaning if exp else ""})
        return rows

    def parameters_by_module(self) -> dict[str, int]:
        """Parameter counts grouped as fc / attention / mlp / norms / lm_head / embedding / maps."""
        groups: dict[str, int] = {}
        for name, t in self.checkpoint.tensors.items():
            n = strip_prefix(name)
            if "self_attn" in n:
                g = "attention"
            elif ".mlp." in n:
                g = "mlp"
            elif n.startswith("embed_tokens"):
                g = "embed_tokens"
            elif n.startswith("lm_head"):
                g = "lm_head"
            elif n.startswith("fc."):
                g = "fc"
            elif n in ("d2t", "t2d"):
                g = "vocab maps"
            else:
                g = "norms"
            groups[g] = groups.get(g, 0) + t.numel
        return groups

    def lines(self) -> list[str]:
        """What ``eaglelab inspect`` prints: the source, the tensor table, the family's status, problems, cautions."""
        ck = self.checkpoint
        rows = [[quoted(r["name"]), r["shape"], quoted(r["dtype"]), f"{r['parameters']:,}", r["meaning"][:60]]
                for r in self.tensor_rows()]
        return [f"{ck.source} ({ck.kind}, {len(ck.weight_files)} file(s)): {len(ck.tensors)} tensors, "
                f"{ck.total_parameters:,} parameters, {ck.total_bytes / 1e9:.3f} GB",
                *table(rows, ["tensor", "shape", "dtype", "params", "meaning"]).splitlines(),
                self.status_line if not self.family.computed else f"{self.family.name}: {self.status_line}",
                *(f"target: {line}" for line in self.target_lines()),
                *(f"  - also: {line}" for line in self.refusals[1:]),
                "problems: " + ("none" if not self.problems else ""),
                *(f"  - {p}" for p in self.problems),
                *(f"caution: {c}" for c in self.cautions)]

    def to_json(self) -> dict[str, Any]:
        ck = self.checkpoint
        return {
            "source": ck.source,
            "kind": ck.kind,
            "config": ck.config,
            "tensors": [{"name": r["name"], "shape": r["shape"], "dtype": r["dtype"]} for r in self.tensor_rows()],
            "total_parameters": ck.total_parameters,
            "total_bytes": ck.total_bytes,
            "parameters_without_embedding": ck.total_parameters - sum(
                t.numel for n, t in ck.tensors.items() if strip_prefix(n).startswith("embed_tokens")),
            "parameters_by_module": self.parameters_by_module(),
            "spec": asdict(self.spec) if self.spec else None,
            "problems": self.problems,
            "family": self.family.name,
            "computed": self.computed,
            "status": self.status_line,
            "refusals": self.refusals,
            "cautions": self.cautions,
            "target": None if self.target is None else {
                "lines": self.target_lines(), "quantization": self.target.quantization.to_json(),
                "heads": None if self.target.heads is None else self.target.heads.as_dict(),
                "prefix": None if self.target.heads is None else self.target.heads.prefix},
        }


def inspect_checkpoint(source: str, revision: str | None = None) -> Inspection:
    """Read a checkpoint's config and headers and check it against its own config.

    Args:
        source: folder, ``.safetensors`` file, shard index, or hub id.
        revision: hub revision.

    Returns:
        Inspection; problems include missing / unexpected / wrong-shape / wrong-dtype tensors
        and d2t / t2d invariants (read lazily from local files only). Another drafter family
        (MLA, EAGLE-1/2, MTP, Medusa, unknown) gets its tensor table and family only: no spec, no
        problems judged against EAGLE-3's layout.

    Raises:
        SourceError, ConfigError: the source cannot be read, or has no config.
    """
    ck = load_checkpoint(source, revision)
    if ck.config is None:
        raise ConfigError(source, "no config.json beside the weights; an EAGLE-3 drafter needs one")
    where = ck.config_path or source
    family = drafter_family(ck.config)
    if family.name == "target model":
        return Inspection(ck, None, [], family, [family.line],
                          target=target_weights(ck.tensors, ck.config, source, modelopt_config(ck)))
    if not family.computed:
        return Inspection(ck, None, [], family, [family.line])
    spec = drafter_spec_from_config(ck.config, where, tensor_names=ck.tensors)
    tensors = {n: (t.shape, t.dtype) for n, t in ck.tensors.items()}
    problems = check_tensors_against_spec(spec, tensors)
    problems += vocab_map_problems(ck, spec)
    return Inspection(ck, spec, problems, family, refusals(ck.config, str(where)),
                      cautions(ck.config) + trainer_cautions(ck.config) + head_cautions(spec, ck.tensors))


def vocab_map_problems(ck: Checkpoint, spec: DrafterSpec) -> list[str]:
    """Check d2t / t2d invariants by reading just those two small tensors (local files only)."""
    by_name = {strip_prefix(n): t for n, t in ck.tensors.items()}
    d2t, t2d = by_name.get("d2t"), by_name.get("t2d")
    if d2t is None or t2d is None or not ck.local:
        return []
    if d2t.dtype != "I64" or t2d.dtype != "BOOL" or d2t.shape != (spec.draft_vocab_size,) \
            or t2d.shape != (spec.vocab_size,):
        return []  # already reported as dtype or shape problems
    try:
        return check_vocab_maps(read_small_tensor(d2t), read_small_tensor(t2d), spec.draft_vocab_size)
    except EaglelabError as exc:
        return [f"vocabulary maps unreadable: {exc.problem}"]


@dataclass
class TensorDiff:
    """One tensor name across two checkpoints (``status``: same, shape, dtype, only-a, only-b)."""

    name: str
    a_shape: list[int] | None
    b_shape: list[int] | None
    a_dtype: str | None
    b_dtype: str | None
    status: str


@dataclass
class Comparison:
    """Two drafters side by side, optionally against a target config.

    Attributes:
        a, b: the two inspections.
        config_diff: differing config keys, classified.
        tensor_diff: every tensor name in either, with its status.
        verdict: drafter vs drafter.
        target_verdicts: for ``--target``: label -> verdict of that drafter on the target.
        vocab_maps: the two draft vocabularies slot by slot, a verdict of its own (None: unreadable).
    """

    a: Inspection
    b: Inspection
    config_diff: list[ConfigDiff]
    tensor_diff: list[TensorDiff]
    verdict: Verdict
    target_verdicts: dict[str, Verdict] = field(default_factory=dict)
    vocab_maps: VocabMapComparison | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": {"source": self.a.checkpoint.source, "problems": self.a.problems,
                  "total_parameters": self.a.checkpoint.total_parameters},
            "b": {"source": self.b.checkpoint.source, "problems": self.b.problems,
                  "total_parameters": self.b.checkpoint.total_parameters},
            "config_diff": [asdict(d) for d in self.config_diff],
            "tensor_diff": [asdict(d) for d in self.tensor_diff],
            "verdict": asdict(self.verdict),
            "target": {k: asdict(v) for k, v in self.target_verdicts.items()},
            "vocab_maps": self.vocab_maps.to_json() if self.vocab_maps else None,
        }


def diff_tensors(a: Checkpoint, b: Checkpoint) -> list[TensorDiff]:
    """Tensor-by-tensor comparison under canonical names (SpecForge, speculators and SGLang spellings match)."""
    ta = {canonical_tensor_name(n): t for n, t in a.tensors.items()}
    tb = {canonical_tensor_name(n): t for n, t in b.tensors.items()}
    rows = []
    for name in sorted(set(ta) | set(tb)):
        x, y = ta.get(name), tb.get(name)
        if x is None:
            status = "only-b"
        elif y is None:
            status = "only-a"
        elif x.shape != y.shape:
            status = "shape"
        elif x.dtype != y.dtype:
            status = "dtype"
        else:
            status = "same"
        rows.append(TensorDiff(name, list(x.shape) if x else None, list(y.shape) if y else None,
                               x.dtype if x else None, y.dtype if y else None, status))
    return rows


@dataclass(frozen=True)
class VocabMapComparison:
    """Two drafters' draft vocabularies, slot by slot, from their ``d2t`` / ``t2d`` tensors.

    Draft slot ``i`` (row ``i`` of ``lm_head``) stands for target token ``i + d2t[i]``. Two drafters
    with identical tensor shapes but different maps are the silent failure of a warm start whose
    map was regenerated (SpecForge issue #300): every row kept its weights but now names another token.

    Attributes:
        slots: draft slots compared (Vd), or None when the draft vocabularies differ in size.
        moved: slots whose target token differs between A and B (None when not comparable).
        overlap: fraction of A's draft tokens that are also in B's draft vocabulary.
        same_shapes: whether every tensor has the same shape in both checkpoints.
    """

    slots: int | None
    moved: int | None
    overlap: float
    same_shapes: bool

    @property
    def identical(self) -> bool:
        return self.moved == 0 and self.overlap == 1.0

    @property
    def moved_fraction(self) -> float | None:
        return None if self.slots is None or self.moved is None else self.moved / max(self.slots, 1)

    @property
    def level(self) -> str:
        """``same``, ``moved`` (same shapes, other maps: the warm-start pitfall) or ``different``."""
        if self.identical:
            return "same"
        return "moved" if self.same_shapes and self.slots is not None else "different"

    @property
    def message(self) -> str:
        if self.level == "same":
            return f"same vocabulary maps: every one of the {self.slots} draft slots names the same token"
        share = f"{100 * self.overlap:.1f}% of A's draft tokens are in B's"
        if self.level == "moved":
            return (f"same shapes, different vocabulary maps: lm_head rows no longer match their tokens "
                    f"({100 * self.moved_fraction:.1f}% of the {self.slots} draft slots moved; {share}). "
                    "A warm start must keep the old drafter's d2t / t2d")
        return f"different draft vocabularies ({share}): each lm_head belongs with its own d2t / t2d"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "level": self.level, "moved_fraction": self.moved_fraction, "message": self.message}


def compare_vocab_maps(a: Inspection, b: Inspection, same_shapes: bool) -> VocabMapComparison | None:
    """Compare the two drafters' ``d2t`` / ``t2d`` (read from local files), or None when they cannot be read."""
    def maps(insp: Inspection):
        tensors = {strip_prefix(n): t for n, t in insp.checkpoint.tensors.items()}
        return tensors.get("d2t"), tensors.get("t2d")

    (da, ta), (db, tb) = maps(a), maps(b)
    if None in (da, ta, db, tb) or not (a.checkpoint.local and b.checkpoint.local) or ta.shape != tb.shape \
            or ta.dtype != "BOOL" or tb.dtype != "BOOL" or len(ta.shape) != 1:
        return None
    try:
        ma, mb = read_small_tensor(ta), read_small_tensor(tb)
        overlap = float((ma & mb).sum() / max(int(ma.sum()), 1))
        if da.shape != db.shape or len(da.shape) != 1:
            return VocabMapComparison(None, None, overlap, same_shapes)
        import numpy as np

        slots = np.arange(da.shape[0])
        tokens_a, tokens_b = slots + read_small_tensor(da), slots + read_small_tensor(db)
    except EaglelabError:
        return None
    return VocabMapComparison(int(da.shape[0]), int((tokens_a != tokens_b).sum()), overlap, same_shapes)


def config_table(paths) -> list[dict[str, Any]]:
    """One summary row per drafter config file: sizes, aux ids, tensor count, parameters without embedding,
    and whether its expected-tensor table is consistent (:func:`eaglelab.checkpoints.drafters.tensor_table.table_problems`).

    Raises:
        SourceError: no config file given (e.g. a fixtures folder that is missing or empty).
    """
    paths = list(paths)
    if not paths:
        raise SourceError("configs", "no drafter config files given")
    rows = []
    for path in paths:
        cfg = read_config(path)
        spec = drafter_spec_from_config(cfg, str(path))
        problems = table_problems(spec, cfg)
        refused = refusals(cfg, str(path))
        rows.append({"config": Path(path).stem, "H": spec.hidden_size, "V": spec.vocab_size,
                     "Vd": spec.draft_vocab_size, "aux ids": spec.aux_layer_ids, "fc_norm": spec.fc_norm,
                     "computed": not refused, "refused": refused[0] if refused else "",
                     "tensors": len(expected_eagle3_tensors(spec)),
                     "params (M, no embedding)": round(expected_parameters(spec) / 1e6, 1),
                     "consistent": not problems, "problems": "; ".join(problems)})
    return rows


def compare_checkpoints(a: str, b: str, target: str | None = None) -> Comparison:
    """Compare two drafters' configs and tensor tables and give a verdict.

    Args:
        a: first drafter source.
        b: second drafter source.
        target: optional target (folder, config.json or hub id) to check both drafters against.
    """
    ia, ib = inspect_checkpoint(a), inspect_checkpoint(b)
    cdiff = diff_configs(ia.config, ib.config)
    tdiff = diff_tensors(ia.checkpoint, ib.checkpoint)
    if ia.spec is None or ib.spec is None:
        # another family on one side: configs and tensors side by side, no EAGLE-3 verdict
        lines = [f"{label}: {insp.family.line}" for label, insp in (("A", ia), ("B", ib)) if insp.spec is None]
        same = ia.family == ib.family and all(t.status == "same" for t in tdiff)
        verdict = Verdict("interchangeable" if same else "incompatible",
                          lines + ["same family and identical tensor shapes" if same else
                                   "judged from shapes only: the families or tensor shapes differ"])
        return Comparison(ia, ib, cdiff, tdiff, verdict)
    verdict = drafter_verdict(ia.spec, ib.spec, cdiff)
    for insp, label in ((ia, "A"), (ib, "B")):
        verdict.reasons += [f"{label}: {line}" for line in insp.refusals[:1] + insp.cautions]
    for problems, label in ((ia.problems, "A"), (ib.problems, "B")):
        if problems:
            verdict.reasons.append(f"{label} has {len(problems)} problem(s) against its own config: {problems[0]}")
            if any(p.startswith("missing tensor") or "shape" in p for p in problems):
                verdict.level = "incompatible"
    vocab = compare_vocab_maps(ia, ib, same_shapes=all(d.status in ("same", "dtype") for d in tdiff))
    comparison = Comparison(ia, ib, cdiff, tdiff, verdict, vocab_maps=vocab)
    if target is not None:
        tcfg = load_target_config(target)
        weights = read_target_weights(target)
        comparison.target_verdicts = {
            "a": drafter_vs_target(ia.spec, ia.config, tcfg, weights, ia.checkpoint.tensors),
            "b": drafter_vs_target(ib.spec, ib.config, tcfg, weights, ib.checkpoint.tensors),
        }
    return comparison
