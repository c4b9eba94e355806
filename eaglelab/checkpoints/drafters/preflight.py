"""Before a model-running command loads anything: its checkpoints checked from metadata, in one line.

``speculate``, ``probe``, ``finetune`` and ``drafter init / export`` load targets that can take
minutes. Everything that can be known from configs and safetensors headers is checked first: a
checkpoint of the wrong kind (a drafter given as a target, a target given as a drafter, named as
such), a target whose config or weight headers are corrupt, a drafter eaglelab does not compute, a
drafter whose hidden size, vocabulary or aux layers do not fit the target, or two targets a probe
cannot compare. Each is a typed error naming the checkpoint and the reason, never a shape error deep
inside torch minutes later. Only configs and headers are read: no torch here.
"""

from __future__ import annotations

from typing import Any

from eaglelab.checkpoints.drafters.spec import DrafterSpec, drafter_spec_from_config
from eaglelab.checkpoints.drafters.tensor_table import check_tensors_against_spec
from eaglelab.checkpoints.drafters.variants import Family, check_computed, drafter_family
from eaglelab.checkpoints.drafters.verdicts import drafter_vs_target
from eaglelab.checkpoints.files.sources import Checkpoint, is_hub_id, load_checkpoint
from eaglelab.checkpoints.targets.config import target_field, target_layer_count, text_config
from eaglelab.checkpoints.targets.reading import load_target_config, read_target_weights
from eaglelab.errors import CheckpointMismatchError, ConfigError, ParameterError, UnsupportedDrafterError
from eaglelab.inputs import printable

#: :func:`~eaglelab.checkpoints.drafters.variants.drafter_family`'s names for a config that is no drafter.
NOT_A_DRAFTER = ("target model", "unknown")


def architecture(cfg: dict[str, Any], family: Family) -> str:
    """The config's first architecture (printable), else the family's name: what a wrong-kind line calls it."""
    archs = cfg.get("architectures") if isinstance(cfg, dict) else None
    return printable(str(archs[0])) if isinstance(archs, list) and archs else family.name


def drafter_config_family(cfg: dict[str, Any]) -> Family | None:
    """The drafter family a config describes (EAGLE-3, EAGLE-1/2, Medusa, MTP, ...), or None for a target model.

    The one recogniser, :func:`~eaglelab.checkpoints.drafters.variants.drafter_family` (architectures with Eagle3,
    ``draft_vocab_size`` on one layer, speculators' ``speculators_model_type``, ...), read both ways: the
    target checks refuse what it names a drafter, the drafter checks what it names a target model.
    """
    family = drafter_family(cfg)
    return None if family.name in NOT_A_DRAFTER else family


def check_target(source: str) -> dict[str, Any]:
    """A target's config (typed) and, for a local folder, its weight headers (valid safetensors, not pickle).

    Returns:
        the target's config.

    Raises:
        ConfigError: a drafter's config (``"a drafter (LlamaForCausalLMEagle3), not a target"``), or one
            that does not read.
        SourceError, HeaderError, UnsafeFormatError: naming the file.
    """
    cfg = load_target_config(source)
    family = drafter_config_family(cfg)
    if family is not None:
        raise ConfigError(source, f"a drafter ({architecture(cfg, family)}), not a target: give the language model "
                                  "the drafter serves")
    if not is_hub_id(source):
        ck = load_checkpoint(source)
        if not ck.tensors:
            raise CheckpointMismatchError(source, "the target's safetensors files hold no tensors")
    return cfg


def check_drafter(source: str, target: str | None = None) -> tuple[DrafterSpec, dict[str, Any] | None]:
    """A drafter's config and tensor table, then (when given) the target and the drafter's fit to it
    (:func:`check_opened_drafter` on the checkpoint it opens)."""
    return check_opened_drafter(load_checkpoint(source), source, target)


def check_opened_drafter(ck: Checkpoint, source: str, target: str | None = None) \
        -> tuple[DrafterSpec, dict[str, Any] | None]:
    """A drafter's config and tensor table, then (when given) the target and the drafter's fit to it: the opened
    checkpoint ``ck`` of ``source`` is read, not opened again, so the loader can take it on (one parse per run).

    The drafter is checked first, so a drafter eaglelab does not compute is refused before any
    target is even looked up.

    Returns:
        ``(spec, target_cfg)``: the drafter's spec, and the target's config (None without a target).

    Raises:
        ConfigError / UnsupportedDrafterError: no config, a target model's config (``"a target model
            (LlamaForCausalLM), not a drafter"``), or a drafter eaglelab does not compute.
        CheckpointMismatchError: tensors that do not match the config, or a drafter that cannot
            run on the target (hidden size, vocabulary, aux layers outside it).
        SourceError, HeaderError: the target's files (see :func:`check_target`).
    """
    if ck.config is None:
        raise ConfigError(source, "no config.json beside the drafter's weights")
    where = str(ck.config_path or source)
    family = drafter_family(ck.config)
    if family.name == NOT_A_DRAFTER[0]:  # the plain words first, then inspect's family line
        raise UnsupportedDrafterError(where, f"a target model ({architecture(ck.config, family)}), not a drafter "
                                             f"(not computed by eaglelab: shapes and configs only: {family.name})")
    check_computed(ck.config, where)
    spec = drafter_spec_from_config(ck.config, where, tensor_names=ck.tensors)
    problems = [p for p in check_tensors_against_spec(spec, {n: (t.shape, t.dtype) for n, t in ck.tensors.items()})
                if not p.startswith("weights mix")]  # loads fine: the model casts to one dtype
    if problems:
        raise CheckpointMismatchError(source, "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)"
                                                                         if len(problems) > 3 else ""))
    if target is None:
        return spec, None
    target_cfg = check_target(target)
    # a local target's headers too: its embedding by name (a language_model. prefix followed) and shape
    weights = None if is_hub_id(target) else read_target_weights(target)
    verdict = drafter_vs_target(spec, ck.config, target_cfg, weights, ck.tensors)
    if verdict.level == "incompatible":
        raise CheckpointMismatchError(source, f"does not fit the target {target}: " + "; ".join(
            r for r in verdict.reasons if r.startswith(("target hidden_size", "target vocab_size", "aux layers",
                                                        "the target's "))))
    return spec, target_cfg


def check_target_pair(a: str, cfg_a: dict[str, Any], b: str, cfg_b: dict[str, Any]) -> None:
    """Two targets a probe compares layer by layer: same hidden size, vocabulary and depth.

    Raises:
        CheckpointMismatchError: naming both targets and the field that differs.
    """
    for key in ("hidden_size", "vocab_size"):
        va, vb = target_field(cfg_a, key), target_field(cfg_b, key)
        if va != vb:
            raise CheckpointMismatchError(f"{a} vs {b}", f"{key} {va} vs {vb}: the probe compares hidden states and "
                                                         "tokens position by position")
    if target_layer_count(cfg_a) != target_layer_count(cfg_b):
        raise CheckpointMismatchError(f"{a} vs {b}", f"{target_layer_count(cfg_a)} vs {target_layer_count(cfg_b)} "
                                                     "layers: the drafter's aux layers mean different depths")


def check_context(tokens: int, flag: str, *targets: tuple[str, dict]) -> None:
    """Refuse a sequence longer than a target's context: past it, positions extrapolate and the verdict drifts.

    Raises:
        ParameterError: naming ``flag``, the target and its ``max_position_embeddings``.
    """
    for name, cfg in targets:
        ctx = text_config(cfg).get("max_position_embeddings")
        if isinstance(ctx, int) and tokens > ctx:
            raise ParameterError(flag, f"{tokens} tokens exceed the context of {name} ({ctx}, max_position_embeddings)")
