"""The reference drafter implementations, run on eaglelab's own checkpoint files.

SpecForge 0.2.0 (``LlamaForCausalLMEagle3`` and its online TTT model ``OnlineEagle3Model``) and
speculators 0.9.0 (``Eagle3DraftModel``) are installed by scripts/setup.sh with ``--no-deps``: their
model code and what it imports, none of their serving stacks. Two stand-ins, neither touching the maths:

- ``triton`` is not installed (a GPU kernel compiler). SpecForge imports it at module level for its
  fused loss kernel; a module object with no-op decorators stands in for the import, and SpecForge's
  ``LogSoftmaxLoss.apply`` (the Triton kernel) is replaced by ``_compute_loss``, the reference
  implementation in the same SpecForge file.
- ``torch.compile`` decorators in both packages run eagerly (``torch._dynamo.config.disable``):
  compilation changes speed, not results. speculators runs with its own eager attention backend and
  its own eager KL loss (its defaults, flex attention and a fused Triton loss, need a GPU compiler).

Each builder loads the folder eaglelab wrote, through the reference's own config class, and
returns logits captured from the reference's own forward (hooks, no re-implementation).
"""

from __future__ import annotations

import contextlib
import sys
import types

import pytest
import torch

SPECFORGE_LOSS_STUB = "SpecForge's Triton LogSoftmaxLoss replaced by its reference _compute_loss"


@contextlib.contextmanager
def eager():
    """torch.compile off for the block (the references decorate their kernels with it)."""
    import torch._dynamo

    before = torch._dynamo.config.disable
    torch._dynamo.config.disable = True
    try:
        yield
    finally:
        torch._dynamo.config.disable = before


@contextlib.contextmanager
def _triton_stand_in():
    """A ``triton`` module for SpecForge's import only, gone afterwards (torch's own probes must not see it)."""
    if "triton" in sys.modules:
        yield
        return
    torch.compile(lambda x: x)  # torch probes for triton while setting compile up: let it see none first

    triton = types.ModuleType("triton")
    language = types.ModuleType("triton.language")
    triton.jit = lambda fn=None, **_: fn if fn is not None else (lambda f: f)
    triton.autotune = lambda *_, **__: (lambda f: f)
    triton.Config = lambda *_, **__: None
    triton.next_power_of_2 = lambda n: 1 << (int(n) - 1).bit_length()
    triton.cdiv = lambda a, b: -(-a // b)
    language.constexpr = int
    triton.language = language
    sys.modules["triton"], sys.modules["triton.language"] = triton, language
    try:
        yield
    finally:
        del sys.modules["triton"], sys.modules["triton.language"]


def specforge():
    """SpecForge's draft model class and online TTT model, or skip with the reason."""
    pytest.importorskip("specforge", reason="specforge is installed by scripts/setup.sh (pip --no-deps)")
    import warnings

    with warnings.catch_warnings(), _triton_stand_in():
        warnings.simplefilter("ignore")
        from specforge.algorithms.eagle3 import model as online
        from specforge.core import loss as sf_loss
        from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    online.LogSoftmaxLoss = types.SimpleNamespace(apply=sf_loss._compute_loss)
    return LlamaForCausalLMEagle3, online.OnlineEagle3Model


def specforge_model(folder):
    """SpecForge's ``LlamaForCausalLMEagle3`` with the weights of a SpecForge-layout folder (fp32, eval)."""

    from safetensors.torch import load_file
    from transformers import LlamaConfig

    cls, _ = specforge()
    from specforge.training.model_loading import load_draft_config_source

    # SpecForge's own reading of a draft config (an absent draft_vocab_size becomes vocab_size)
    with _triton_stand_in():
        cfg = load_draft_config_source(str(folder))
    assert isinstance(cfg, LlamaConfig)
    with eager():
        model = cls(cfg).float().eval()
    sd = load_file(str(folder / "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    return model, missing, unexpected


def specforge_ttt(folder, input_ids, aux, target_logits, token_mask, steps):
    """SpecForge's own TTT on SpecForge-format inputs: per-step logits, losses and accuracies.

    Args:
        folder: SpecForge-layout drafter folder (embedding included).
        input_ids: [B, S] token ids x_0..x_{S-1}.
        aux: [B, S, 3 Ht] target aux states at each position.
        target_logits: [B, S, V] the target's logits at each position.
        token_mask: [B, S] bool, token t is a response token (SpecForge's loss_mask).
        steps: TTT length.
    """
    from specforge.utils import padding

    model, missing, unexpected = specforge_model(folder)
    assert not unexpected, f"SpecForge found unexpected keys {unexpected}"
    _, online_cls = specforge()
    captured = []
    original = model.compute_logits

    def record(h):
        out = original(h)
        captured.append(out.detach())
        return out

    model.compute_logits = record
    ttt = online_cls(model, length=steps)
    with eager():
        plosses, _, acces, *_ = ttt(input_ids=padding(input_ids, left=False),
                                    attention_mask=torch.ones_like(input_ids),
                                    target=padding(target_logits, left=False),
                                    loss_mask=token_mask[..., None].to(torch.float32),
                                    hidden_states=aux)
    return captured, [float(p.detach()) for p in plosses], [float(a) for a in acces]


def speculators_model(folder):
    """speculators' ``Eagle3DraftModel.from_pretrained`` on a speculators folder, with the keys it left out.

    Returns:
        (model, info): ``info["unexpected_keys"]``: tensors of the file the model has no place for
        (transformers drops them with a log line); ``info["missing_keys"]``: the model's own weights
        the file lacks (its ignore list aside: verifier head and norm, supplied by the verifier).
    """
    pytest.importorskip("speculators", reason="speculators is installed by scripts/setup.sh (pip --no-deps)")
    from safetensors import safe_open
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    config = Eagle3SpeculatorConfig.from_pretrained(str(folder))
    # its eager attention backend (dense float masks): its default, flex attention, compiles on CPU
    config.transformer_layer_config._attn_implementation = "eager"
    with eager():
        model = Eagle3DraftModel.from_pretrained(str(folder), config=config)
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    own = set(model.state_dict())
    ignored = {"verifier_lm_head.weight", "verifier_norm.weight"}
    return model.float().eval(), {"unexpected_keys": sorted(keys - own),
                                  "missing_keys": sorted(own - keys - ignored)}


def speculators_ttt(folder, input_ids, aux, last_hidden, token_mask, steps):
    """speculators' own TTT forward on its own input layout: per-step logits, loss and metrics.

    Its data pipeline drops the first position (``shift_batch``): row t pairs the state at t with
    token t + 1. Its targets come from the verifier the config names (final norm and lm_head rows of
    the draft vocabulary), loaded by speculators itself.
    """
    from speculators.losses import resolve_loss_config

    model, info = speculators_model(folder)
    assert not info["unexpected_keys"], f"speculators found unexpected keys {info['unexpected_keys']}"
    captured = []
    hook = model.lm_head.register_forward_hook(lambda _m, _i, out: captured.append(out.detach()))
    S = input_ids.shape[1]
    with eager(), torch.no_grad():  # its flex attention has no CPU backward; the forward is what is compared
        _, loss, metrics = model(hidden_states=aux[:, :-1], input_ids=input_ids[:, 1:],
                                 document_ids=torch.zeros(1, S - 1, dtype=torch.long),
                                 loss_mask=token_mask[:, 1:], position_ids=torch.arange(1, S)[None],
                                 verifier_last_hidden_states=last_hidden[:, 1:], ttt_length=steps,
                                 # its default KL loss, in its eager implementation (the fused one is Triton)
                                 loss_config=resolve_loss_config("kl_div", "eager"))
    hook.remove()
    return captured, float(loss), {k: float(v) for k, v in metrics.items()}


#: The two layouts of SGLang's ``python/sglang/srt/models/kimi_k25_eagle3.py`` the reference can wire.
SGLANG_MLA_LAYOUTS = {
    "pr24826": "commit 40449c10941dc84131efd240ba3d162177a811f7 (PR #24826: the MLA drafter as first added)",
    "eagle3.1": "commit 054a1cef6dc144c258a224c38a924f27834ffd1b (after PR #26506: fc_norm / use_aux_norm, norm_output)",
}


class SglangMlaDrafter:
    """SGLang's MLA drafter (``Eagle3DeepseekV2ForCausalLM``) composed from transformers' DeepSeek-V3 modules.

    SGLang cannot run here (it needs CUDA). Its forward is rebuilt from the same MLA arithmetic in
    transformers' ``DeepseekV3Attention`` (rope interleaved, DeepSeek's YaRN, the softmax scale with
    ``mscale_all_dim``), composed as SGLang's ``kimi_k25_eagle3.py`` composes it: ``q_a_proj`` and
    ``kv_a_proj_with_mqa`` widened to the 2H input of concat(input_layernorm(embedding),
    hidden_norm(hidden)), ``o_proj`` back to H, the residual the un-normed hidden state, a dense SiLU
    MLP, ``lm_head(norm(.))``. Two settings follow SGLang where transformers differs: the latents' RMSNorms
    use ``rms_norm_eps`` (transformers' module hard-codes 1e-6), and ``max_position_embeddings`` is
    ``original x factor`` so the YaRN factor is the config's.

    The flags are read as the class reads them at one of two layouts of that file (``layout``,
    :data:`SGLANG_MLA_LAYOUTS`), written from reading its source at those commits:

    - both layouts: ``Eagle3MLAModel.forward`` returns the final norm of (MLP output + residual) to the logits
      processor whatever ``norm_output`` says; the decoder layer takes the raw incoming state as residual (no
      ``norm_before_residual``); nothing reads ``norm_before_fc``, and ``load_weights`` finds no parameter for
      ``input_norm.weight`` and skips it with a warning. An absent ``q_lora_rank`` is the config class's default
      (transformers' ``DeepseekV3Config``, as SGLang's ``KimiK2Config``: 1536).
    - ``pr24826``: ``fc`` reads the aux states as they come, and the pre-norm sum is handed back as the next
      step's hidden state (the aux output); ``fc_norm.*`` tensors find no parameter and are skipped.
    - ``eagle3.1``: ``fc_norm`` (or, failing it, ``use_aux_norm``) builds one RMSNorm per aux chunk applied
      before ``fc``; ``norm_output`` true hands the normed state back instead of the pre-norm one.

    What this proves: eaglelab's MLA arithmetic and flags equal transformers' modules on the same weights,
    wired as SGLang wires the drafter at that layout. What it cannot: SGLang's own kernels (absorbed MLA,
    fused norms in bf16).
    """

    def __init__(self, folder, layout: str = "eagle3.1"):
        import json

        from safetensors.torch import load_file
        from torch import nn
        from transformers import DeepseekV3Config
        from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

        assert layout in SGLANG_MLA_LAYOUTS, layout
        cfg = json.loads((folder / "config.json").read_text())
        H, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["rms_norm_eps"]
        scaling = cfg.get("rope_scaling")
        context = int(scaling["original_max_position_embeddings"] * scaling["factor"]) if scaling else 4096
        q_lora = cfg["q_lora_rank"] if "q_lora_rank" in cfg else DeepseekV3Config().q_lora_rank
        common = dict(num_attention_heads=nh, num_key_value_heads=nh, q_lora_rank=q_lora,
                      kv_lora_rank=cfg["kv_lora_rank"], qk_nope_head_dim=cfg["qk_nope_head_dim"],
                      qk_rope_head_dim=cfg["qk_rope_head_dim"], v_head_dim=cfg["v_head_dim"],
                      rope_theta=cfg.get("rope_theta", 10000.0), rope_scaling=scaling, max_position_embeddings=context,
                      rms_norm_eps=eps, vocab_size=cfg["vocab_size"], intermediate_size=cfg["intermediate_size"],
                      rope_interleave=True, attention_bias=False, hidden_act=cfg.get("hidden_act", "silu"))
        wide = DeepseekV3Config(hidden_size=2 * H, **common)
        wide._attn_implementation = "eager"
        self.attn = ds.DeepseekV3Attention(wide, layer_idx=0)
        self.attn.o_proj = nn.Linear(nh * cfg["v_head_dim"], H, bias=False)
        for norm in (self.attn.q_a_layernorm, self.attn.kv_a_layernorm):
            if norm is not None:
                norm.variance_epsilon = eps
        self.rotary = ds.DeepseekV3RotaryEmbedding(wide)
        narrow = DeepseekV3Config(hidden_size=H, **common)
        self.mlp = ds.DeepseekV3MLP(narrow, intermediate_size=cfg["intermediate_size"])
        self.norms = {n: ds.DeepseekV3RMSNorm(H, eps) for n in ("hidden_norm", "input_layernorm",
                                                                 "post_attention_layernorm", "norm")}
        sd = load_file(str(folder / "model.safetensors"))
        layer = {k.split(".", 1)[1]: v for k, v in sd.items() if k.startswith(("midlayer.", "layers.0."))}
        missing, unexpected = self.attn.load_state_dict(
            {k[len("self_attn."):]: v for k, v in layer.items() if k.startswith("self_attn.")}, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
        self.mlp.load_state_dict({k[len("mlp."):]: v for k, v in layer.items() if k.startswith("mlp.")})
        for name, norm in self.norms.items():
            norm.weight.data.copy_(layer.get(f"{name}.weight", sd.get(f"{name}.weight")))
        self.fc, self.lm_head, self.embed = sd["fc.weight"], sd["lm_head.weight"], sd["embed_tokens.weight"]
        later = layout == "eagle3.1"
        self.norm_output = later and bool(cfg.get("norm_output", False))
        self.fc_norms = []
        if later and (cfg.get("fc_norm") or cfg.get("use_aux_norm", False)):
            Ht = self.fc.shape[1] // 3
            for i in range(3):
                norm = ds.DeepseekV3RMSNorm(Ht, eps)
                norm.weight.data.copy_(sd[f"fc_norm.{i}.weight"])
                self.fc_norms.append(norm)

    @torch.no_grad()
    def step(self, token_ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        """One drafter pass: [B, S] tokens, [B, S, H] hidden (the fc output or the fed-back state) -> [B, S, H] pre-norm."""
        x = torch.cat([self.norms["input_layernorm"](self.embed[token_ids]), self.norms["hidden_norm"](hidden)], -1)
        cos, sin = self.rotary(x, positions)
        past = cache.get_seq_length()
        S = x.shape[1]
        allowed = torch.ones(S, past + S, dtype=torch.bool).tril(diagonal=past)
        mask = torch.zeros(S, past + S).masked_fill(~allowed, float("-inf"))[None, None]
        attended, _ = self.attn(x, (cos, sin), mask, cache=cache)
        residual = hidden + attended
        return residual + self.mlp(self.norms["post_attention_layernorm"](residual))

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """[B, S, 3 Ht] aux states -> [B, S, H]: per-chunk RMSNorms first at the EAGLE-3.1 layout when set."""
        if self.fc_norms:
            aux = torch.cat([n(c) for n, c in zip(self.fc_norms, aux.chunk(3, dim=-1), strict=True)], dim=-1)
        return aux @ self.fc.T

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norms["norm"](hidden) @ self.lm_head.T

    def feed_back(self, hidden: torch.Tensor) -> torch.Tensor:
        """A step's pre-norm output -> the next step's hidden state (normed with ``norm_output`` at EAGLE-3.1)."""
        return self.norms["norm"](hidden) if self.norm_output else hidden

    def chain_logits(self, ids: torch.Tensor, aux: torch.Tensor, t: int, steps: int) -> list[torch.Tensor]:
        """The logits [B, V] of ``steps`` drafts chained from position ``t`` with a fresh cache, as the engine drafts:
        the prefix ``ids[1 : t + 2]`` over ``aux[: t + 1]``, then step ``i`` reads the teacher's next token at
        RoPE position ``t + i`` and the previous step's state fed back (what the TTT unroll's column ``t`` holds)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        hidden = self.step(ids[:, 1: t + 2], self.project(aux[:, : t + 1]), torch.arange(t + 1)[None], cache)[:, -1:]
        out = [self.logits(hidden)[:, 0]]
        for i in range(1, steps):
            hidden = self.step(ids[:, t + 1 + i: t + 2 + i], self.feed_back(hidden), torch.tensor([[t + i]]), cache)
            out.append(self.logits(hidden)[:, 0])
        return out
