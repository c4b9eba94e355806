"""Kimi-shaped checkpoints from the public configs: real safetensors headers, weights as holes in sparse files.

The Kimi family's drafters and targets at their real shapes, for the metadata questions (``inspect``,
``compare``, ``compare --target``, ``compare-targets``, ``recipe``) without a terabyte of disk:

- drafters: Kimi-K2's community Llama drafter (32,000 draft tokens), TorchSpec's K2.5 Llama drafter
  (full vocabulary, no ``draft_vocab_size``), TorchSpec's K2.5 MLA drafter, and a K2.6 MLA drafter as
  NVIDIA publishes one (warm-started from K2.5's, so the same shapes; no ``lm_head`` in the file);
- targets: Kimi-K2 (``DeepseekV3ForCausalLM``, FP8 blocks) and Kimi-K2.5 (``KimiK25ForConditionalGeneration``,
  the language model under ``language_model.``, INT4 experts in compressed-tensors, a vision tower), each
  a header-only sample: the embedding, final norm and head, the first dense layer and one MoE layer with
  two of its experts (the config still says 61 layers and 384 experts);
- tokenizers: the Kimi special tokens at their real ids over 256 byte ranks (the real ``tiktoken.model``
  has 163,584), with a chat template in K2's shape or K2.5's (which opens a ``<think>`` block).

The configs are read from ``data/fixtures/kimi`` (each file's source is in its README). No torch.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.files.sources import read_config
from eaglelab.outputs import open_output_folder
from eaglelab.worlds.synthetic_checkpoints import KIMI_K2_DRAFTER_CONFIG, synthetic_drafter_entries, write_sparse_safetensors

Entry = tuple[str, tuple[int, ...], str]

#: The Kimi tokenizers' special tokens (id -> content, special), as their ``tokenizer_config.json`` lists them.
KIMI_SPECIAL_TOKENS: dict[int, tuple[str, bool]] = {
    163584: ("[BOS]", True), 163585: ("[EOS]", True), 163586: ("<|im_end|>", True), 163587: ("<|im_user|>", True),
    163588: ("<|im_assistant|>", True), 163590: ("<|start_header_id|>", True), 163591: ("<|end_header_id|>", True),
    163593: ("[EOT]", True), 163594: ("<|im_system|>", True), 163595: ("<|tool_calls_section_begin|>", False),
    163596: ("<|tool_calls_section_end|>", False), 163597: ("<|tool_call_begin|>", False),
    163598: ("<|tool_call_argument_begin|>", False), 163599: ("<|tool_call_end|>", False),
    163601: ("<|im_middle|>", True), 163605: ("<|media_pad|>", True), 163606: ("<think>", True),
    163607: ("</think>", True), 163838: ("[UNK]", True), 163839: ("[PAD]", True),
}

#: A chat template in the shape of Kimi-K2's: a default system turn, roles between <|im_*|> markers.
K2_TEMPLATE = """\
{%- if messages|length == 0 or messages[0]['role'] != 'system' -%}
<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>
{%- endif -%}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}<|im_user|>user<|im_middle|>
{%- elif message['role'] == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>
{%- else -%}<|im_system|>{{ message['role'] }}<|im_middle|>
{%- endif -%}
{{ message['content'] }}<|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}
"""

#: A chat template in the shape of Kimi-K2.5's: no default system turn, earlier replies after an empty
#: thinking block, and the generation prompt opening one (closed at once with ``thinking=False``).
K25_TEMPLATE = """\
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}<|im_user|>user<|im_middle|>
{%- elif message['role'] == 'assistant' -%}<|im_assistant|>assistant<|im_middle|><think></think>
{%- else -%}<|im_system|>{{ message['role'] }}<|im_middle|>
{%- endif -%}
{{ message['content'] }}<|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>
{%- if thinking is defined and thinking is false -%}<think></think>{%- else -%}<think>{%- endif -%}
{%- endif -%}
"""


def read_fixture(fixtures: str | Path, name: str) -> dict[str, Any]:
    """One of the Kimi configs shipped in ``data/fixtures/kimi`` (strict JSON, typed)."""
    return read_config(Path(fixtures) / name)


# --------------------------------------------------------------------------- target headers

def _linear(name: str, rows: int, cols: int, kind: str) -> list[Entry]:
    """One linear layer's tensors as a quantization stores them."""
    if kind == "fp8":  # DeepSeek-V3 / Kimi-K2: E4M3 weights, an F32 inverse scale per 128 x 128 block
        return [(f"{name}.weight", (rows, cols), "F8_E4M3"),
                (f"{name}.weight_scale_inv", (math.ceil(rows / 128), math.ceil(cols / 128)), "F32")]
    if kind == "int4":  # compressed-tensors pack-quantized, groups of 32 (Kimi-K2.5's routed experts)
        return [(f"{name}.weight_packed", (rows, cols // 8), "I32"), (f"{name}.weight_scale", (rows, cols // 32), "BF16"),
                (f"{name}.weight_shape", (2,), "I32")]
    return [(f"{name}.weight", (rows, cols), "BF16")]


def deepseek_sample_entries(text: dict[str, Any], prefix: str, head: str, dense: str, experts: str,
                            routed_shown: int = 2) -> list[Entry]:
    """A DeepSeek-V3 language model's tensors: embedding, head, final norm, layer 0 (dense), layer 1 (MoE).

    Args:
        text: the language model's config.
        prefix: ``model.`` or ``language_model.model.``.
        head: the head's name (``lm_head.weight`` or ``language_model.lm_head.weight``).
        dense, experts: how attention / dense MLPs and routed experts are stored (``bf16``, ``fp8``, ``int4``).
        routed_shown: routed experts written per MoE layer (the config keeps the real count).
    """
    H, V, nh = text["hidden_size"], text["vocab_size"], text["num_attention_heads"]
    q, kv, nope, rope, v = (text[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                              "v_head_dim"))
    out: list[Entry] = [(f"{prefix}embed_tokens.weight", (V, H), "BF16")]
    for i in (0, 1):
        p = f"{prefix}layers.{i}."
        out += [(f"{p}input_layernorm.weight", (H,), "BF16"), (f"{p}post_attention_layernorm.weight", (H,), "BF16"),
                (f"{p}self_attn.q_a_layernorm.weight", (q,), "BF16"), (f"{p}self_attn.kv_a_layernorm.weight", (kv,), "BF16")]
        out += _linear(f"{p}self_attn.q_a_proj", q, H, dense) + _linear(f"{p}self_attn.q_b_proj", nh * (nope + rope), q, dense)
        out += _linear(f"{p}self_attn.kv_a_proj_with_mqa", kv + rope, H, dense)
        out += _linear(f"{p}self_attn.kv_b_proj", nh * (nope + v), kv, dense) + _linear(f"{p}self_attn.o_proj", H, nh * v, dense)
        if i == 0:  # first_k_dense_replace: a dense MLP
            I = text["intermediate_size"]
            out += _linear(f"{p}mlp.gate_proj", I, H, dense) + _linear(f"{p}mlp.up_proj", I, H, dense) + \
                _linear(f"{p}mlp.down_proj", H, I, dense)
            continue
        E, I = text["n_routed_experts"], text["moe_intermediate_size"]
        shared = I * text.get("n_shared_experts", 1)
        out += [(f"{p}mlp.gate.weight", (E, H), "BF16"), (f"{p}mlp.gate.e_score_correction_bias", (E,), "F32")]
        out += _linear(f"{p}mlp.shared_experts.gate_proj", shared, H, dense) + \
            _linear(f"{p}mlp.shared_experts.up_proj", shared, H, dense) + \
            _linear(f"{p}mlp.shared_experts.down_proj", H, shared, dense)
        for e in range(routed_shown):
            out += _linear(f"{p}mlp.experts.{e}.gate_proj", I, H, experts) + \
                _linear(f"{p}mlp.experts.{e}.up_proj", I, H, experts) + _linear(f"{p}mlp.experts.{e}.down_proj", H, I, experts)
    return out + [(f"{prefix}norm.weight", (H,), "BF16"), (head, (V, H), "BF16")]


def _shape_contents(entries: list[Entry]) -> dict[str, bytes]:
    """compressed-tensors' ``weight_shape``: the unpacked [rows, cols], as int32 (what a loader reads back)."""
    out = {}
    by_name = {n: s for n, s, _ in entries}
    for name, _, _ in entries:
        if name.endswith(".weight_shape"):
            rows, packed = by_name[name[: -len("weight_shape")] + "weight_packed"]
            out[name] = struct.pack("<2i", rows, packed * 8)
    return out


# --------------------------------------------------------------------------- tokenizer

def tokenizer_files(template: str) -> dict[str, str]:
    """A Kimi-shaped tokenizer's files: 256 byte ranks, the Kimi special tokens at their ids, ``template``."""
    ranks = "".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256))
    config = {"tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]",
              "pad_token": "[PAD]", "unk_token": "[UNK]", "model_max_length": 1048576,
              "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                                "single_word": False, "special": s}
                                       for i, (c, s) in KIMI_SPECIAL_TOKENS.items()}}
    return {"tiktoken.model": ranks, "tokenizer_config.json": json.dumps(config, indent=1) + "\n",
            "chat_template.jinja": template, "generation_config.json": json.dumps({"eos_token_id": 163586}) + "\n"}


# --------------------------------------------------------------------------- the sample

@dataclass(frozen=True)
class KimiSample:
    """Where each Kimi-shaped checkpoint of :func:`build_kimi_sample` is."""

    root: Path

    def __getattr__(self, name: str) -> Path:
        if name in KIMI_SAMPLE:
            return self.root / name.replace("_", "-")
        raise AttributeError(name)


#: The checkpoints of the sample, and what each is.
KIMI_SAMPLE = {
    "k2_drafter": "Kimi-K2's community drafter: Llama, 32,000 draft tokens, aux layers [1, 29, 57]",
    "k25_llama_drafter": "TorchSpec's Kimi-K2.5 Llama drafter: full vocabulary, no draft_vocab_size",
    "k25_mla_drafter": "TorchSpec's Kimi-K2.5 MLA drafter (Eagle3DeepseekV2ForCausalLM), full vocabulary",
    "k26_mla_drafter": "a Kimi-K2.6 MLA drafter as NVIDIA publishes one: K2.5's shapes, no lm_head, no embedding",
    "k2_target": "Kimi-K2 (DeepseekV3ForCausalLM, FP8 blocks), a header-only sample, K2-shaped template",
    "k25_target": "Kimi-K2.5 (KimiK25ForConditionalGeneration, INT4 experts, language_model.*), K2.5-shaped template",
    "k25_tokenizer": "Kimi-K2.5's config and tokenizer files, no weights",
    "k25_tokenizer_k2_template": "the same files with the K2-shaped chat template: they differ in the template only",
}


def build_kimi_sample(out_dir: str | Path, fixtures: str | Path, force: bool = False) -> KimiSample:
    """Write the Kimi-shaped sparse checkpoints of :data:`KIMI_SAMPLE` under ``out_dir`` (a few MB of disk).

    Args:
        out_dir: a new or empty folder, or one holding a sample eaglelab wrote.
        fixtures: the folder of the Kimi configs (``data/fixtures/kimi``).
        force: replace a sample eaglelab wrote there before.

    Raises:
        ConfigError: a fixture is missing or not a config; OverwriteError / OutputError: the folder.
    """
    k25_llama = read_fixture(fixtures, "torchspec-k25-llama-drafter-config.json")
    k25_mla = read_fixture(fixtures, "torchspec-k25-mla-drafter-config.json")
    k2_target = read_fixture(fixtures, "kimi-k2-target-config-fields.json")
    k25_target = read_fixture(fixtures, "kimi-k25-target-config-fields.json")
    k26_mla = {**k25_mla, "transformers_version": "4.57.1"}
    drafters = {"k2-drafter": (KIMI_K2_DRAFTER_CONFIG, {}),
                "k25-llama-drafter": (k25_llama, {}),
                "k25-mla-drafter": (k25_mla, {}),
                "k26-mla-drafter": (k26_mla, {"include_head": False, "include_embedding": False})}
    k25_text = k25_target["text_config"]
    targets = {"k2-target": (k2_target, deepseek_sample_entries(k2_target, "model.", "lm_head.weight", "fp8", "fp8"),
                             K2_TEMPLATE),
               "k25-target": (k25_target, deepseek_sample_entries(k25_text, "language_model.model.",
                                                                  "language_model.lm_head.weight", "bf16", "int4")
                              + [("vision_tower.patch_embed.proj.weight", (1152, 3, 14, 14), "BF16"),
                                 ("mm_projector.proj.0.weight", (k25_text["hidden_size"], 4608), "BF16")], K25_TEMPLATE)}
    with open_output_folder(out_dir, "kimi sample", force=force) as out:
        for name, (config, options) in drafters.items():
            entries, maps = synthetic_drafter_entries(config, **options)
            with out.writing(f"{name}/model.safetensors") as tmp:
                write_sparse_safetensors(tmp, entries, maps)
            out.write_json(f"{name}/config.json", config)
        for name, (config, entries, template) in targets.items():
            half = len(entries) // 2
            shards = {f"model-0000{i + 1}-of-00002.safetensors": part for i, part in enumerate((entries[:half], entries[half:]))}
            for fname, part in shards.items():
                with out.writing(f"{name}/{fname}") as tmp:
                    write_sparse_safetensors(tmp, part, _shape_contents(entries))
            out.write_json(f"{name}/model.safetensors.index.json",
                           {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n, _, _ in part}})
            out.write_json(f"{name}/config.json", config)
            for fname, text in tokenizer_files(template).items():
                out.write_text(f"{name}/{fname}", text)
        for name, template in (("k25-tokenizer", K25_TEMPLATE), ("k25-tokenizer-k2-template", K2_TEMPLATE)):
            out.write_json(f"{name}/config.json", k25_target)
            for fname, text in tokenizer_files(template).items():
                out.write_text(f"{name}/{fname}", text)
        return KimiSample(out.path)
