"""The tensor table a drafter spec implies: names, shapes, dtypes, and the vocabulary maps' invariants.

What :mod:`eaglelab.checkpoints.drafters.inspection` checks a checkpoint's headers against, and what a state
dict must hold (:func:`check_tensors_against_spec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eaglelab.checkpoints.drafters.config_rules import diff_configs
from eaglelab.checkpoints.drafters.spec import FLOAT_DTYPES, DrafterSpec
from eaglelab.inputs import quoted


@dataclass(frozen=True)
class ExpectedTensor:
    """One entry of the expected tensor table.

    Attributes:
        name: state-dict key.
        shape: expected shape.
        dtype: ``float`` (any float dtype, consistent across weights), ``I64`` or ``BOOL``.
        required: False for tensors loaders accept either way (``embed_tokens``).
        meaning: one line saying what the tensor is.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    required: bool
    meaning: str


def attention_tensors(spec: DrafterSpec) -> list[ExpectedTensor]:
    """The attention's weights: Llama q/k/v/o over concat(embedding, hidden) (2H), or MLA's low-rank paths.

    MLA (SGLang's ``Eagle3DeepseekV2ForCausalLM``): ``q_a_proj`` and ``kv_a_proj_with_mqa`` read the 2H
    input (SGLang fuses them into one [q_lora + kv_lora + rope, 2H] matrix at load); ``q_b_proj``,
    ``kv_b_proj`` and ``o_proj`` keep the target layer's shapes.
    """
    H, nh, nkv, d, p = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim, \
        f"{spec.layer_prefix}.self_attn"
    m = spec.mla
    if m is None:
        return [
            ExpectedTensor(f"{p}.q_proj.weight", (nh * d, 2 * H), "float", True,
                           "query projection of concat(embedding, hidden), 2H wide"),
            ExpectedTensor(f"{p}.k_proj.weight", (nkv * d, 2 * H), "float", True, "key projection, 2H wide"),
            ExpectedTensor(f"{p}.v_proj.weight", (nkv * d, 2 * H), "float", True, "value projection, 2H wide"),
            ExpectedTensor(f"{p}.o_proj.weight", (H, nh * d), "float", True, "attention output projection"),
            *([ExpectedTensor(f"{p}.{n}_norm.weight", (d,), "float", True,
                              f"per-head RMSNorm of the {w} before RoPE (qwen3 layer)")
               for n, w in (("q", "queries"), ("k", "keys"))] if spec.qk_norm else []),
        ]
    if m.q_lora_rank is None:
        query = [ExpectedTensor(f"{p}.q_proj.weight", (nh * m.qk_head_dim, 2 * H), "float", True,
                                "MLA query of concat(embedding, hidden), 2H wide (no low-rank path)")]
    else:
        query = [
            ExpectedTensor(f"{p}.q_a_proj.weight", (m.q_lora_rank, 2 * H), "float", True,
                           "MLA query down-projection of concat(embedding, hidden), 2H wide"),
            ExpectedTensor(f"{p}.q_a_layernorm.weight", (m.q_lora_rank,), "float", True, "RMSNorm of the query latent"),
            ExpectedTensor(f"{p}.q_b_proj.weight", (nh * m.qk_head_dim, m.q_lora_rank), "float", True,
                           f"query up-projection: per head {m.qk_nope_head_dim} dims without RoPE, then "
                           f"{m.qk_rope_head_dim} with"),
        ]
    return query + [
        ExpectedTensor(f"{p}.kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, 2 * H), "float", True,
                       f"key-value latent ({m.kv_lora_rank}) and the shared RoPE key ({m.qk_rope_head_dim}), 2H wide"),
        ExpectedTensor(f"{p}.kv_a_layernorm.weight", (m.kv_lora_rank,), "float", True, "RMSNorm of the key-value latent"),
        ExpectedTensor(f"{p}.kv_b_proj.weight", (nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank), "float",
                       True, f"latent up-projection: per head {m.qk_nope_head_dim} key rows, then {m.v_head_dim} value rows"),
        ExpectedTensor(f"{p}.o_proj.weight", (H, nh * m.v_head_dim), "float", True, "attention output projection"),
    ]


def expected_eagle3_tensors(spec: DrafterSpec) -> dict[str, ExpectedTensor]:
    """The key -> shape table a drafter with ``spec`` must have.

    Returns:
        name -> ExpectedTensor, in the order of the data flow (fc, midlayer, norm, lm_head,
        vocabulary maps). ``embed_tokens.weight`` is optional; so are the vocabulary maps and
        ``lm_head`` of a full-vocabulary drafter (draft id = target id; the engines take the
        target's head when the file has none: vLLM always, SGLang when ``draft_vocab_size`` is absent).
    """
    H, Ht, I = spec.hidden_size, spec.target_hidden_size, spec.intermediate_size
    V, Vd, p = spec.vocab_size, spec.draft_vocab_size, spec.layer_prefix
    full = spec.full_vocab
    rows: list[ExpectedTensor] = [
        ExpectedTensor("embed_tokens.weight", (V, H), "float", False,
                       f"the target's input embedding, {V} rows = the target's vocabulary; frozen, "
                       "often not saved (SGLang injects the target's)"),
    ]
    if spec.norm_before_fc:
        rows.append(ExpectedTensor("input_norm.weight", (3 * Ht,), "float", True,
                                   "one RMSNorm over concat(low, mid, high) before fc (speculators norm_before_fc)"))
    elif spec.input_norm_kept:
        rows.append(ExpectedTensor("input_norm.weight", (3 * Ht,), "float", False,
                                   "norm_before_fc's RMSNorm in an MLA drafter: never applied (SGLang's MLA loader "
                                   "skips it), kept for the round trip"))
    if spec.fc_norm:
        rows += [ExpectedTensor(f"fc_norm.{i}.weight", (Ht,), "float", True,
                                f"RMSNorm of aux hidden state {i} ({['low', 'mid', 'high'][i]}) before fc")
                 for i in range(3)]
    rows += [
        ExpectedTensor("fc.weight", (H, 3 * Ht), "float", True,
                       "projects concat(low, mid, high) target hidden states to the drafter's width"),
        ExpectedTensor(f"{p}.hidden_norm.weight", (H,), "float", True, "RMSNorm of the incoming hidden state"),
        ExpectedTensor(f"{p}.input_layernorm.weight", (H,), "float", True, "RMSNorm of the token embedding"),
        *attention_tensors(spec),
        ExpectedTensor(f"{p}.post_attention_layernorm.weight", (H,), "float", True, "RMSNorm before the MLP"),
        ExpectedTensor(f"{p}.mlp.gate_proj.weight", (I, H), "float", True, "MLP gate"),
        ExpectedTensor(f"{p}.mlp.up_proj.weight", (I, H), "float", True, "MLP up projection"),
        ExpectedTensor(f"{p}.mlp.down_proj.weight", (H, I), "float", True, "MLP down projection"),
        ExpectedTensor("norm.weight", (H,), "float", True, "final RMSNorm before lm_head"),
        ExpectedTensor("lm_head.weight", (Vd, H), "float", not full,
                       f"the drafter's own head over the target's whole vocabulary ({V}); absent: the target's"
                       if full else f"the drafter's own head over its {Vd}-token draft vocabulary"),
        ExpectedTensor("d2t", (Vd,), "I64", not full,
                       "draft id -> target id offset: target = draft + d2t[draft]" + ("; all zeros (optional) for a "
                                                                                     "full vocabulary" if full else "")),
        ExpectedTensor("t2d", (V,), "BOOL", not full, "t2d[target id] is true when the token is in the draft vocabulary"),
    ]
    if spec.attention_bias and spec.mla is None:
        rows += [ExpectedTensor(f"{p}.self_attn.{n}_proj.bias", (o,), "float", True, f"{n}_proj bias")
                 for n, o in (("q", spec.num_attention_heads * spec.head_dim),
                              ("k", spec.num_key_value_heads * spec.head_dim),
                              ("v", spec.num_key_value_heads * spec.head_dim), ("o", H))]
    return {r.name: r for r in rows}


def table_problems(spec: DrafterSpec, cfg: dict[str, Any]) -> list[str]:
    """Why the expected-tensor table of ``cfg`` would not form one EAGLE-3 layer (empty: consistent).

    Checks the wiring the format fixes: ``fc`` maps three target states to the drafter's width, the
    attention reads concat(embedding, hidden) (2H) and returns to H (q/k/v/o, or MLA's paths chained
    through their ranks), the MLP returns to H, ``lm_head`` covers the draft vocabulary and the maps
    match it, ``fc_norm`` tensors exist exactly when the config asks for them, every dimension is
    positive, and the config differs from itself in nothing.
    """
    t = expected_eagle3_tensors(spec)
    H, Ht, p = spec.hidden_size, spec.target_hidden_size, spec.layer_prefix
    a = f"{p}.self_attn"
    want: dict[str, tuple[int, ...]] = {"fc.weight": (H, 3 * Ht), f"{p}.mlp.down_proj.weight": (H, spec.intermediate_size),
                                        "lm_head.weight": (spec.draft_vocab_size, H), "d2t": (spec.draft_vocab_size,),
                                        "t2d": (spec.vocab_size,)}
    m = spec.mla
    if m is None:
        q, kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
        want |= {f"{a}.q_proj.weight": (q, 2 * H), f"{a}.k_proj.weight": (kv, 2 * H), f"{a}.v_proj.weight": (kv, 2 * H),
                 f"{a}.o_proj.weight": (H, q)}
    else:
        nh = spec.num_attention_heads
        if m.q_lora_rank is None:
            want[f"{a}.q_proj.weight"] = (nh * m.qk_head_dim, 2 * H)
        else:
            want |= {f"{a}.q_a_proj.weight": (m.q_lora_rank, 2 * H),
                     f"{a}.q_b_proj.weight": (nh * m.qk_head_dim, m.q_lora_rank)}
        want |= {f"{a}.kv_a_proj_with_mqa.weight": (m.kv_lora_rank + m.qk_rope_head_dim, 2 * H),
                 f"{a}.kv_b_proj.weight": (nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                 f"{a}.o_proj.weight": (H, nh * m.v_head_dim)}
    problems = [f"{name} is {list(t[name].shape) if name in t else 'missing'}, the layer needs {list(shape)}"
                for name, shape in want.items() if name not in t or t[name].shape != shape]
    problems += [f"{name} has a non-positive dimension {list(e.shape)}" for name, e in t.items() if min(e.shape) <= 0]
    if spec.draft_vocab_size > spec.vocab_size:
        problems.append(f"draft vocabulary {spec.draft_vocab_size} exceeds the target vocabulary {spec.vocab_size}")
    if ("fc_norm.0.weight" in t) != bool(cfg.get("fc_norm") or (m is not None and cfg.get("use_aux_norm"))):
        problems.append("fc_norm tensors do not follow the config's fc_norm flag")
    if m is None and spec.num_attention_heads % spec.num_key_value_heads:
        problems.append(f"{spec.num_attention_heads} query heads do not group over {spec.num_key_value_heads} kv heads")
    if m is not None and m.qk_rope_head_dim % 2:
        problems.append(f"qk_rope_head_dim {m.qk_rope_head_dim} is odd: RoPE rotates pairs of dimensions")
    if diff_configs(cfg, cfg):
        problems.append("the config differs from itself (unstable keys)")
    return problems


def expected_parameters(spec: DrafterSpec, include_embedding: bool = False) -> int:
    """Parameter count implied by a config (vocabulary maps excluded)."""
    total = 0
    for name, t in expected_eagle3_tensors(spec).items():
        if t.dtype != "float" or (name == "embed_tokens.weight" and not include_embedding):
            continue
        n = 1
        for s in t.shape:
            n *= s
        total += n
    return total


def strip_prefix(name: str) -> str:
    """Key without a leading ``model.`` (SGLang tries both spellings)."""
    return name[len("model."):] if name.startswith("model.") else name


def canonical_tensor_name(name: str) -> str:
    """SpecForge spelling of a key from any layout (``model.`` dropped, ``layers.0.`` -> ``midlayer.``)."""
    name = strip_prefix(name)
    return "midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name


def layer_named(spec: DrafterSpec, name: str) -> str:
    """A key with the drafter layer spelled as ``spec`` spells it.

    SGLang's MLA drafter accepts ``layers.0.`` and ``midlayer.`` alike (TorchSpec's exports write
    ``layers.0.`` beside a flat config), so an MLA drafter's keys are read in either spelling; a
    Llama drafter's are read as written.
    """
    if spec.mla is None:
        return name
    for a, b in (("layers.0.", "midlayer."), ("midlayer.", "layers.0.")):
        if name.startswith(a) and spec.layer_prefix + "." == b:
            return b + name[len(a):]
    return name


def check_tensors_against_spec(
    spec: DrafterSpec, tensors: dict[str, tuple[tuple[int, ...], str]]
) -> list[str]:
    """Problems of a tensor table (name -> (shape, dtype)) against the expected table.

    Reports missing, unexpected, wrong-shaped and wrong-dtype tensors, and mixed float dtypes.
    Keys with a ``model.`` prefix are matched as SGLang's Llama drafter loader would (its MLA loader
    skips them: a problem of its own); an MLA drafter's layer may be spelled ``layers.0.``.
    """
    expected = expected_eagle3_tensors(spec)
    actual = {layer_named(spec, strip_prefix(k)): v for k, v in tensors.items()}
    problems: list[str] = []
    if spec.mla is not None:
        prefixed = sorted(k for k in tensors if k.startswith("model."))
        if prefixed:  # SGLang's MLA loader (kimi_k25_eagle3.py) logs and skips them: the weights never load
            problems.append(f"{len(prefixed)} tensor(s) named model.* ({quoted(prefixed[0])}, ...): SGLang's MLA drafter loader "
                            "skips them; write them without the prefix")
    for name, exp in expected.items():
        if name not in actual:
            if exp.required:
                problems.append(f"missing tensor {name} (expected {list(exp.shape)})")
            continue
        shape, dtype = actual[name]
        if tuple(shape) != exp.shape:
            problems.append(f"{name}: shape {list(shape)}, expected {list(exp.shape)}")
        if exp.dtype == "float" and dtype not in FLOAT_DTYPES:
            problems.append(f"{name}: dtype {dtype}, expected a float dtype")
        elif exp.dtype != "float" and dtype != exp.dtype:
            problems.append(f"{name}: dtype {dtype}, expected {exp.dtype}")
    for name in actual:
        if name not in expected:
            problems.append(f"unexpected tensor {quoted(name)} (SGLang drops it silently, vLLM raises)")
    float_dtypes = {actual[n][1] for n, e in expected.items() if n in actual and e.dtype == "float"}
    if len(float_dtypes) > 1:
        problems.append(f"weights mix float dtypes {sorted(float_dtypes)}")
    return problems


def sglang_leaves_head_random(spec: DrafterSpec, names) -> bool:
    """Whether SGLang would serve this drafter with a random head: a full-vocabulary file that ships no
    ``lm_head.weight`` with ``draft_vocab_size`` written (sglang issue #27829; ``names``: its tensor names)."""
    return spec.full_vocab and spec.draft_vocab_given and "lm_head.weight" not in {strip_prefix(n) for n in names}


def head_cautions(spec: DrafterSpec, names) -> list[str]:
    """What the engines make of a full-vocabulary file's head, when it ships none (``names``: its tensor names).

    vLLM shares the target's ``lm_head`` whenever the file has none. SGLang takes the target's only when
    ``draft_vocab_size`` is absent; with it written and no head in the file, SGLang's head stays at its
    random initialisation and accepts nothing (sglang issue #27829, a Kimi-K2.6 drafter).
    """
    if not spec.full_vocab or "lm_head.weight" in {strip_prefix(n) for n in names}:
        return []
    if sglang_leaves_head_random(spec, names):
        return ["no lm_head.weight with draft_vocab_size written: vLLM and eaglelab draft with the target's head; "
                "SGLang leaves its head at random and accepts nothing (sglang issue #27829): drop draft_vocab_size "
                "from the config (SGLang then loads the target's head) or ship the head"]
    return ["no lm_head.weight: every engine drafts with the target's head (SGLang because draft_vocab_size is absent)"]


def check_vocab_maps(d2t, t2d, draft_vocab_size: int) -> list[str]:
    """Invariants of the vocabulary maps: ``t2d.sum() == Vd`` and ``nonzero(t2d) == arange(Vd) + d2t``.

    Args:
        d2t: integer array [Vd].
        t2d: bool array [V].
        draft_vocab_size: Vd from the config.
    """
    import numpy as np

    d2t = np.asarray(d2t).astype(np.int64)
    t2d = np.asarray(t2d).astype(bool)
    problems = []
    if t2d.ndim != 1:
        return [f"t2d has shape {list(t2d.shape)}, expected one dimension [V]"]
    if d2t.shape != (draft_vocab_size,):
        problems.append(f"d2t has shape {list(d2t.shape)}, expected [{draft_vocab_size}]")
        return problems
    if int(t2d.sum()) != draft_vocab_size:
        problems.append(f"t2d marks {int(t2d.sum())} tokens, expected draft_vocab_size {draft_vocab_size}")
    targets = np.arange(draft_vocab_size) + d2t
    if (targets < 0).any() or (targets >= t2d.shape[0]).any():
        problems.append("d2t maps draft ids outside the target vocabulary")
    elif not np.array_equal(np.nonzero(t2d)[0], targets):
        if np.any(np.diff(targets) <= 0):
            problems.append("arange(Vd) + d2t is not strictly increasing (draft vocabulary must be sorted)")
        else:
            problems.append("nonzero(t2d) != arange(Vd) + d2t (the two maps disagree)")
    return problems
