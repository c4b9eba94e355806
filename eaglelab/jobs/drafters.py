"""New drafters and drafters in another engine's layout: ``eaglelab drafter init`` and ``drafter export`` as jobs.

:func:`init_drafter` writes a freshly initialised EAGLE-3 drafter sized for a target (SpecForge / SGLang layout);
:func:`export_for_engine` writes a drafter in the layout vLLM (speculators) or SGLang (SpecForge) loads. Each takes
its settings dataclass (the commands' flags are generated from them) and returns what it wrote, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglelab.checkpoints.drafters.export import export_drafter
from eaglelab.checkpoints.drafters.preflight import check_drafter, check_target
from eaglelab.errors import ParameterError, SourceError
from eaglelab.inputs import read_bytes
from eaglelab.jobs.probe import DTYPES
from eaglelab.settings import DEFAULT_K, option

EXPORT_LAYOUTS = ("speculators", "specforge")
ATTENTIONS = ("llama", "mla")


@dataclass(frozen=True)
class DrafterInitSettings:
    """A new drafter for a target.

    Attributes:
        target: the target folder, config.json or hub id.
        out: the folder to write.
        draft_vocab: the draft vocabulary size (default min(32000, V)).
        aux_layers: the three target layer outputs to read, low, middle, high (SGLang's convention; default
            [1, L//2-1, L-4]).
        text: a text file for the vocabulary map (token frequencies); default the first N ids.
        attention: the drafter layer's attention: llama (SpecForge, vLLM) or mla, the target's multi-head latent
            attention (SGLang's Eagle3DeepseekV2ForCausalLM, as TorchSpec's Kimi-K2.5 drafter).
        dtype: the weights' dtype on disk.
        seed: the initialisation's seed.
        force: overwrite an existing checkpoint in ``out``.
        trust_remote_code: allow the target's custom tokenizer code.
    """

    target: str
    out: str
    draft_vocab: int | None = option(None, min=1)
    aux_layers: tuple[int, ...] | None = option(None, min=0, count=3)
    text: str | None = None
    attention: str = option("llama", choices=ATTENTIONS)
    dtype: str = option("bfloat16", choices=DTYPES)
    seed: int = option(0, min=0)
    force: bool = False
    trust_remote_code: bool = False


@dataclass(frozen=True)
class ExportSettings:
    """A drafter in the other engine's layout.

    Attributes:
        source: the drafter folder (either layout).
        out: the folder to write.
        to: the layout to write: speculators (vLLM) or specforge (SGLang).
        target: the target folder or hub id (its config; recorded as the verifier); required for --to speculators.
        with_embedding: copy the target's embedding into the export.
        k: speculative tokens of the default proposal method.
        force: overwrite an existing export.
    """

    source: str = option(positional=True)
    out: str = option(positional=True)
    to: str = option("speculators", choices=EXPORT_LAYOUTS)
    target: str | None = None
    with_embedding: bool = False
    k: int = option(DEFAULT_K, min=1)
    force: bool = False


def init_drafter(settings: DrafterInitSettings) -> str:
    """Write a new drafter sized for the target; the vocabulary map from ``text`` when given. Returns what it wrote."""
    import torch
    from transformers import AutoTokenizer

    from eaglelab.model.drafter import Eagle3Drafter
    from eaglelab.model.drafter_files import save_drafter
    from eaglelab.model.vocab import build_vocab_map, count_tokens

    s = settings
    drafter = Eagle3Drafter.from_target_config(check_target(s.target), draft_vocab_size=s.draft_vocab,
                                               aux_layer_ids=list(s.aux_layers) if s.aux_layers else None, seed=s.seed,
                                               attention=s.attention)
    how = f"first {drafter.spec.draft_vocab_size} target ids"
    if s.text:
        text = read_bytes(s.text, SourceError, 1 << 31, "text source").decode("utf-8", errors="replace")
        tok = AutoTokenizer.from_pretrained(s.target, trust_remote_code=s.trust_remote_code)
        counts = count_tokens([torch.tensor(tok(text)["input_ids"])], drafter.spec.vocab_size)
        drafter.set_vocab_map(*build_vocab_map(counts, drafter.spec.draft_vocab_size))
        how = f"the {drafter.spec.draft_vocab_size} most frequent of {int((counts > 0).sum())} tokens in {s.text}"
    out = save_drafter(drafter, s.out, dtype=s.dtype, overwrite=s.force)
    return f"wrote {out} (aux layer outputs {list(drafter.spec.aux_layer_ids)}, draft vocabulary: {how})"


def export_for_engine(settings: ExportSettings) -> str:
    """Write the drafter in the layout asked for: the same model, or one line naming what the layout cannot hold."""
    s = settings
    if s.to == "speculators" and not s.target:
        raise ParameterError("--target", "a speculators (vLLM) export records its verifier: give --target")
    if s.with_embedding and not s.target:
        raise ParameterError("--with-embedding", "copies the target's embedding: give --target")
    _, config = check_drafter(s.source, s.target)  # from metadata, before anything loads
    embedding = None
    if s.with_embedding:
        from eaglelab.model.heads import read_target_embedding

        embedding = read_target_embedding(s.target)  # by name (language_model.* too): the target is not loaded
    out = export_drafter(s.source, s.out, s.to, config, verifier=s.target, target_embedding=embedding,
                         overwrite=s.force, k=s.k)
    return f"wrote {Path(out)} ({'speculators / vLLM' if s.to == 'speculators' else 'SpecForge / SGLang'} format)"
