"""Target models: load a transformers causal LM and capture what the drafter reads.

Layer ids here are 0-based decoder-layer *outputs* (SGLang's convention); convert vLLM-style
ids (layer inputs) with :func:`eaglelab.checkpoints.drafters.spec.aux_ids_as_layer_outputs`. Capture uses
forward hooks on the three decoder layers, so memory holds three states, not all L + 1.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eaglelab.checkpoints.drafters.spec import aux_ids_as_layer_outputs
from eaglelab.checkpoints.files.hub import open_repo
from eaglelab.checkpoints.files.sources import is_hub_id, load_checkpoint
from eaglelab.errors import ConfigError, SourceError


@dataclass
class TargetOutput:
    """One forward of the target.

    Attributes:
        logits: [B, S, V].
        aux: [B, S, 3H] concat(low, mid, high) decoder-layer outputs, the drafter's fc input.
        last_hidden: [B, S, H] output of the final norm (what lm_head reads); None if not found.
        past_key_values: the updated KV cache (None without ``use_cache``).
    """

    logits: torch.Tensor
    aux: torch.Tensor
    last_hidden: torch.Tensor
    past_key_values: Any = None


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder-layer list of a transformers causal LM (``model.model.layers`` and kin)."""
    base = getattr(model, "model", model)
    for attr in ("layers", "h", "decoder.layers", "language_model.layers"):
        obj = base
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, nn.ModuleList):
            return obj
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for mod in model.modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == n:
            return mod
    raise ConfigError(type(model).__name__, "cannot find the decoder layers to hook")


class Target:
    """A transformers causal LM with aux-hidden-state capture for one drafter.

    Args:
        model: a loaded ``AutoModelForCausalLM``.
        aux_layer_outputs: three 0-based decoder-layer output ids (low, mid, high).
        tokenizer: optional tokenizer, kept alongside.
    """

    def __init__(self, model: nn.Module, aux_layer_outputs: tuple[int, ...], tokenizer=None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.layers = decoder_layers(model)
        L = len(self.layers)
        if len(aux_layer_outputs) != 3 or not all(0 <= i < L for i in aux_layer_outputs):
            raise ConfigError("aux layers", f"need three ids in [0, {L}), got {list(aux_layer_outputs)}")
        self.aux_layer_outputs = tuple(aux_layer_outputs)
        self._captured: dict[int | str, torch.Tensor] = {}
        # transformers renamed `past_key_values` to `cache` during 5.x
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._hooks = [self.layers[i].register_forward_hook(self._hook(i)) for i in set(self.aux_layer_outputs)]
        norm = getattr(getattr(model, "model", model), "norm", None)
        self._norm = norm if isinstance(norm, nn.Module) else None
        if self._norm is not None:  # final norm output = what lm_head reads
            self._hooks.append(self._norm.register_forward_hook(self._hook("last")))

    @classmethod
    def for_drafter(cls, model: nn.Module, drafter_spec, tokenizer=None) -> Target:
        """Capture the layers a drafter's config names, in its convention."""
        L = len(decoder_layers(model))
        outs = aux_ids_as_layer_outputs(drafter_spec.aux_layer_ids, drafter_spec.aux_convention, L)
        return cls(model, outs, tokenizer)

    def _hook(self, idx: int | str):
        def fn(_module, _inputs, output):
            self._captured[idx] = output[0] if isinstance(output, tuple) else output
        return fn

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    @contextlib.contextmanager
    def recording(self):
        """Keep (aux [B, s, 3H], last_hidden [B, s, H]) of every forward inside the block.

        For capturing states while ``model.generate`` runs (prefill, then one position per
        step), so a target's replies and the states the drafter trains on come from one pass.
        Yields the list the records are appended to.
        """
        records: list[tuple[torch.Tensor, torch.Tensor]] = []
        if self._norm is None:
            raise ConfigError(type(self.model).__name__, "cannot find the final norm to record states after")

        def after_forward(_module, _inputs, output):  # the final norm runs after every decoder layer
            last = output[0] if isinstance(output, tuple) else output
            aux = torch.cat([self._captured[i] for i in self.aux_layer_outputs], dim=-1)
            records.append((aux.detach(), last.detach()))

        hook = self._norm.register_forward_hook(after_forward)
        try:
            yield records
        finally:
            hook.remove()

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def input_embedding(self) -> torch.Tensor:
        """The target's input embedding weight [V, H] (the drafter's ``embed_tokens``)."""
        return self.model.get_input_embeddings().weight

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, past_key_values=None, use_cache: bool = False,
                attention_mask: torch.Tensor | None = None) -> TargetOutput:
        """Run the target and return logits, aux states and the last hidden state.

        Args:
            input_ids: [B, S].
            past_key_values: a transformers Cache to continue from (positions follow it).
            use_cache: return an updated cache.
            attention_mask: [B, S_total] padding mask.
        """
        self._captured.clear()
        out = self.model(input_ids=input_ids, use_cache=use_cache, attention_mask=attention_mask,
                         return_dict=True, **{self._cache_kw: past_key_values})
        aux = torch.cat([self._captured[i] for i in self.aux_layer_outputs], dim=-1)
        return TargetOutput(out.logits, aux, self._captured.get("last"),
                            past_key_values if use_cache else None)


def crop_cache(cache, keep: int) -> None:
    """Crop a transformers KV cache to its first ``keep`` positions, across 5.x API versions."""
    current = cache.get_seq_length()
    if keep >= current:
        return
    if "tokens_to_remove" in inspect.signature(cache.crop).parameters:
        cache.crop(-(current - keep))
    else:
        cache.crop(keep)


#: What a target's hub download takes: configs, safetensors weights, tokenizer files and chat templates (never a
#: pickle; its code only with ``trust_remote_code``).
TARGET_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "*.jinja")


def load_target(source: str | Path, dtype: str | torch.dtype = "float32", device: str | None = None,
                device_map: str | None = None, trust_remote_code: bool = False, need_tokenizer: bool = False):
    """Load a causal LM and its tokenizer from a folder or hub id.

    Args:
        source: local folder or hub id.
        dtype: ``float32`` / ``bfloat16`` / ``float16`` or a torch dtype.
        device: ``cpu`` / ``cuda`` / ``cuda:1``...; default CUDA when available.
        device_map: ``auto`` to spread a large target over the GPUs (accelerate).
        trust_remote_code: off unless the user turns it on.
        need_tokenizer: refuse a target without one (:class:`SourceError`), instead of returning None for it.

    Weights are read from safetensors only (``use_safetensors=True``): a target that has only
    ``pytorch_model.bin`` is refused with the conversion to run, never unpickled.

    Returns:
        (model, tokenizer or None).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    src = str(source)
    if not Path(src).exists():  # a hub id: its files at one commit, through the one hub transport
        if not is_hub_id(src):
            raise SourceError(src, "no such folder, and not a hub id (owner/name)")
        src = open_repo(src).snapshot(TARGET_PATTERNS + (("*.py",) if trust_remote_code else ()))
    load_checkpoint(src)  # safetensors only: a pickle-only target is refused here, as the command line refuses it
    if isinstance(dtype, str):
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    # never unpickle: transformers would fall back to pytorch_model.bin without this
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust_remote_code, "use_safetensors": True}
    if device_map:
        kwargs["device_map"] = device_map
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar would land mid-results; the caller shows progress
    try:
        model = AutoModelForCausalLM.from_pretrained(src, **kwargs)
    except OSError as exc:
        raise SourceError(src, f"cannot load target model: {str(exc).splitlines()[0]}") from None
    finally:
        if bars:
            with warnings.catch_warnings():  # huggingface_hub warns when its own variable keeps its bars off
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()
    if not device_map:
        model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        tok = AutoTokenizer.from_pretrained(src, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        tok = None
    if tok is None and need_tokenizer:
        raise SourceError(src, "no tokenizer found beside the target")
    return model.eval(), tok
