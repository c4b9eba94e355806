"""A target read from a folder, a config file, a shard index or a hub id: its config, and its headers summarised.

What the drafters' checks, the recipes, the serving-cost model and the target comparison read of a target
before any model loads: :func:`load_target_config` (the config alone) and :func:`read_target_weights`
(the weight names, prefix and quantization from the safetensors headers, with NVIDIA Model-Optimizer's
``hf_quant_config.json`` where it lies beside them). Through :mod:`eaglelab.checkpoints.files`; no torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglelab.checkpoints.files.hub import open_repo
from eaglelab.checkpoints.files.sources import Checkpoint, is_hub_id, load_checkpoint, local_path, read_config
from eaglelab.checkpoints.targets.config import TargetWeights, target_weights, text_config
from eaglelab.errors import ConfigError, SourceError
from eaglelab.inputs import path_kind, read_json_object


def modelopt_config(ck: Checkpoint) -> dict[str, Any] | None:
    """NVIDIA Model-Optimizer's ``hf_quant_config.json`` beside a local checkpoint's weights (None when absent)."""
    if not ck.local or not ck.weight_files:
        return None
    path = Path(ck.weight_files[0]).parent / "hf_quant_config.json"
    return read_json_object(path, SourceError) if path_kind(path, SourceError) is not None else None


def load_target_config(target: str, revision: str | None = None) -> dict[str, Any]:
    """A target's config: a folder with config.json, a config.json path, or a hub id (its config.json only,
    at ``revision``).

    Raises:
        ConfigError: no such target, or a config that is not strict JSON with typed fields.
        HubError: the hub id cannot be read (offline, missing, no answer within the timeout).
    """

    p = local_path(target, ConfigError)
    kind = path_kind(p, ConfigError)
    if kind == "folder":
        return read_config(p / "config.json")
    if kind is not None:
        return read_config(p)
    if not is_hub_id(target):
        raise ConfigError(target, "no such target folder, config file or hub id")
    repo = open_repo(target, revision)
    with repo.reading("cannot read config.json"):
        config, _ = repo.read_config()
    if config is None:
        raise ConfigError(target, "the hub repository has no config.json")
    return config


def load_serving_config(target: str, revision: str | None = None) -> dict[str, Any]:
    """:func:`load_target_config`, with NVIDIA Model-Optimizer's ``hf_quant_config.json`` beside a local config
    folded in as its ``quantization_config`` where the config states none (ModelOpt's exports keep it there):
    how the served weights are stored, for the serving-cost model.

    Raises:
        ConfigError: the config or the hf_quant_config.json is not strict JSON.
    """
    config = load_target_config(target, revision)
    if config.get("quantization_config") or text_config(config).get("quantization_config"):
        return config
    p = local_path(target, ConfigError)
    kind = path_kind(p, ConfigError)
    if kind is None:
        return config
    beside = (p if kind == "folder" else p.parent) / "hf_quant_config.json"
    if path_kind(beside, ConfigError) is None:
        return config
    q = read_json_object(beside, ConfigError).get("quantization")
    return {**config, "quantization_config": {"quant_method": "modelopt", **q}} if isinstance(q, dict) else config


def read_target_weights(target: str, revision: str | None = None,
                        modelopt: dict[str, Any] | None = None) -> TargetWeights | None:
    """A target's headers summarised (:class:`~eaglelab.checkpoints.targets.config.TargetWeights`), or None for a
    bare ``config.json`` or a folder without weights.

    Args:
        target: a folder, shard index, weights file or hub id.
        revision: hub revision.
        modelopt: ``hf_quant_config.json`` when already read (a local one beside the weights is read here).

    Raises:
        SourceError, HeaderError, HubError: the headers cannot be read.
    """
    if not is_hub_id(target) and path_kind(local_path(target, ConfigError), ConfigError) == "file" and \
            Path(target).suffix == ".json" and not target.endswith(".safetensors.index.json"):
        return None  # a config.json: no headers to read
    ck = load_checkpoint(target, revision, weights_optional=True)
    if not ck.tensors:
        return None
    return target_weights(ck.tensors, ck.config, target, modelopt if modelopt is not None else modelopt_config(ck))
