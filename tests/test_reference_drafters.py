"""Differential tests: eaglelab's drafter against SpecForge 0.2.0 and speculators 0.9.0 themselves.

Per variant, one checkpoint with weights at a realistic scale and a non-identity vocabulary map is
written by eaglelab, loaded by each reference through its own config class and loader, and run on
the same inputs in fp32: first-step logits, a 3-step TTT unroll, and the loss and accuracy under
that reference's convention (``eaglelab.train.ttt``). Where a reference cannot compute a variant
(speculators has no ``target_hidden_size``, SpecForge 0.2.0 no ``norm_before_*``), eaglelab's
conversion must refuse it with one line instead. See ``tests/references.py`` for the two stand-ins.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass

import pytest
import torch

from eaglelab.checkpoints.drafters.export import export_drafter
from eaglelab.checkpoints.drafters.implied_config import drafter_config_for_target
from eaglelab.checkpoints.drafters.variants import to_speculators_config
from eaglelab.data.states import HiddenStates
from eaglelab.errors import UnsupportedDrafterError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import load_drafter, save_drafter
from eaglelab.train.ttt import TargetTokens, ttt_forward
from tests import references
from tests.conftest import fill_realistic

H, HEADS, KV, INTER, V, VD, LAYERS = 64, 4, 2, 96, 256, 96, 8
S, STEPS = 20, 3
TOL = 1e-5

TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
          "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV,
          "num_hidden_layers": LAYERS, "vocab_size": V, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
          "max_position_embeddings": 512}

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
YARN = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707,
        "mscale_all_dim": 0.707, "original_max_position_embeddings": 16}

# name -> (SpecForge-style overrides, speculators-only flags, references that compute it)
VARIANTS = {
    "plain": ({}, {}, ("specforge", "speculators")),
    "fc_norm": ({"fc_norm": True}, {}, ("specforge", "speculators")),
    "head_dim": ({"head_dim": 24}, {}, ("specforge", "speculators")),
    "rope_linear": ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, {}, ("specforge", "speculators")),
    "rope_llama3": ({"rope_scaling": LLAMA3}, {}, ("specforge", "speculators")),
    "rope_yarn": ({"rope_scaling": YARN}, {}, ("specforge", "speculators")),
    "specforge_norm_output_false": ({"norm_output": False}, {}, ("specforge",)),
    "target_hidden_size": ({"target_hidden_size": 48}, {}, ("specforge",)),
    "norm_before_residual": ({}, {"norm_before_residual": True}, ("speculators",)),
    "norm_before_fc": ({}, {"norm_before_fc": True}, ("speculators",)),
    "speculators_norm_output": ({}, {"norm_output": True}, ("speculators",)),
    "all_speculators_flags": ({"fc_norm": True}, {"norm_before_residual": True, "norm_output": True},
                              ("speculators",)),
    "qwen3_layer": ({"head_dim": 24}, {"transformer_layer_config.model_type": "qwen3", "norm_before_residual": True},
                    ("speculators",)),
    # full vocabulary: draft id = target id, no maps; written explicitly, or left out as TorchSpec's K2.5 config does
    "full_vocab": ({"draft_vocab_size": V}, {}, ("specforge", "speculators")),
    "no_draft_vocab_size": ({"draft_vocab_size": None}, {}, ("specforge", "speculators")),
}


def realistic(d: Eagle3Drafter, seed: int) -> Eagle3Drafter:
    """Realistic weights (:func:`tests.conftest.fill_realistic`) and a random sorted draft vocabulary."""
    gen = fill_realistic(d, seed)
    vd = d.spec.draft_vocab_size
    keep = torch.sort(torch.randperm(V, generator=gen)[:vd]).values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[keep] = True
    d.set_vocab_map(keep - torch.arange(vd), t2d)
    return d


def drafter_config(name: str) -> dict:
    sf, spec_flags, _ = VARIANTS[name]
    sf = copy.deepcopy(sf)
    vd = sf.pop("draft_vocab_size", VD)
    cfg = drafter_config_for_target(TARGET, vd or V, [1, 3, 4], **sf)
    if vd is None:
        del cfg["draft_vocab_size"]
    if "head_dim" in sf:
        cfg["head_dim"] = sf["head_dim"]
    if not spec_flags:
        return cfg
    out = to_speculators_config(cfg, TARGET, "verifier")
    for key, value in spec_flags.items():
        if key.startswith("transformer_layer_config."):
            out["transformer_layer_config"][key.split(".", 1)[1]] = value
        else:
            out[key] = value
    return out


def write_verifier(folder):
    """The target's files speculators reads: its config (layer count) and its embedding, final norm and head.

    speculators computes its training targets itself, as lm_head(norm(last hidden)) from these.
    """
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(7)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(TARGET))
    save_file({"model.embed_tokens.weight": torch.randn(V, H, generator=gen),
               "model.norm.weight": 0.5 + torch.rand(H, generator=gen),
               "lm_head.weight": torch.randn(V, H, generator=gen) / math.sqrt(H) * 4.0},
              str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def verifier(tmp_path):
    return write_verifier(tmp_path / "verifier")


def write_variant(name: str, tmp_path, verifier) -> tuple[Eagle3Drafter, dict]:
    """The drafter in eaglelab, and its folder in each format its references read."""
    d = realistic(Eagle3Drafter(drafter_config(name)), seed=sum(map(ord, name)))
    folders = {}
    native = save_drafter(d, tmp_path / "native", include_embedding=True)
    refs = VARIANTS[name][2]
    if d.spec.layer_prefix == "midlayer":
        folders["specforge"] = native
        if "speculators" in refs:
            folders["speculators"] = export_drafter(native, tmp_path / "speculators", "speculators", TARGET,
                                                    str(verifier))
    else:
        folders["speculators"] = native
        cfg = json.loads((native / "config.json").read_text())
        cfg["speculators_config"]["verifier"]["name_or_path"] = str(verifier)
        (native / "config.json").write_text(json.dumps(cfg))
    return d.eval(), folders


def inputs(d: Eagle3Drafter, batch: int, verifier, seed: int = 1):
    """Token ids, aux states, the target's final-norm weight, head and last states, and a token mask."""
    from safetensors.torch import load_file

    gen = torch.Generator().manual_seed(seed)
    ht = d.spec.target_hidden_size
    ids = torch.randint(0, V, (batch, S), generator=gen)
    aux = torch.randn(batch, S, 3 * ht, generator=gen) * 2.0
    last = torch.randn(batch, S, H, generator=gen)
    weights = load_file(str(verifier / "model.safetensors"))
    norm_w, head = weights["model.norm.weight"], weights["lm_head.weight"]
    token_mask = torch.rand(batch, S, generator=gen) < 0.8
    token_mask[:, 0] = False  # the first token is never predicted
    return ids, aux, last, norm_w, head, token_mask


def target_logits(last, norm_w, head):
    """The target's logits the way speculators computes them: lm_head(RMSNorm(last))."""
    x = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w
    return x @ head.T


def eaglelab_run(d, ids, aux, last, norm_w, head, token_mask, convention):
    logits = target_logits(last, norm_w, head)
    # eaglelab's loss_mask[t]: the token after t is a response token
    mask = torch.cat([token_mask[:, 1:], torch.zeros_like(token_mask[:, :1])], 1)
    states = HiddenStates(ids, mask, aux, last)
    with torch.no_grad():
        unrolled = d.ttt_logits(ids, aux, STEPS)
        out = ttt_forward(d, states, TargetTokens.from_logits(logits, d.draft_target_ids()), STEPS,
                          convention=convention)
    return unrolled, out, logits


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def assert_close(name: str, got: list[float], want: list[float]) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert abs(g - w) <= TOL * max(abs(w), 1e-3), f"{name} step {i}: eaglelab {g} vs reference {w}"


@dataclass
class Side:
    """One variant run by eaglelab and by one reference on the same files and inputs.

    ``ours`` / ``theirs``: per-step logits over the positions both compute (speculators drops the
    last); ``losses`` / ``accs``: (eaglelab, reference) per step in the reference's convention;
    ``total``: (eaglelab, reference) total loss, where the reference reports one.
    """

    ours: list
    theirs: list
    losses: tuple[list[float], list[float]]
    accs: tuple[list[float], list[float]]
    total: tuple[float, float] | None = None


def run_both(name: str, ref: str, root, verifier) -> Side:
    """Write variant ``name``, run it in eaglelab and in ``ref`` (``specforge`` or ``speculators``)."""
    d, folders = write_variant(name, root, verifier)
    ids, aux, last, norm_w, head, token_mask = inputs(d, 2 if ref == "specforge" else 1, verifier)
    ours, out, logits = eaglelab_run(d, ids, aux, last, norm_w, head, token_mask, ref)
    if ref == "specforge":
        theirs, plosses, acces = references.specforge_ttt(folders[ref], ids, aux, logits, token_mask, STEPS)
        return Side(ours, theirs, (out.step_losses, plosses), (out.convention_acc, acces))
    theirs, loss, metrics = references.speculators_ttt(folders[ref], ids, aux, last, token_mask, STEPS)
    # speculators' row t is eaglelab's position t (it drops the last position)
    return Side([o[:, :-1] for o in ours], theirs,
                (out.step_losses, [metrics[f"loss_{i}_sum"] for i in range(STEPS)]),
                (out.convention_acc, [metrics[f"full_acc_{i}_sum"] / metrics[f"full_acc_{i}_total"]
                                      for i in range(STEPS)]),
                (float(out.loss), loss))


@pytest.mark.parametrize("ref,name", [(r, n) for r in ("specforge", "speculators")
                                      for n, v in VARIANTS.items() if r in v[2]])
def test_against_the_reference(ref, name, tmp_path, verifier):
    side = run_both(name, ref, tmp_path, verifier)
    assert len(side.theirs) == STEPS
    for i in range(STEPS):  # first-step logits, then the unroll
        assert rel(side.ours[i], side.theirs[i]) < TOL, \
            f"{name}: step {i} logits differ by {rel(side.ours[i], side.theirs[i]):.2e}"
    assert_close(f"{name} loss", *side.losses)
    assert_close(f"{name} accuracy", *side.accs)
    if side.total is not None:  # speculators reports its total loss
        assert abs(side.total[0] - side.total[1]) <= TOL * abs(side.total[1])
    else:
        assert side.ours[0].abs().mean() > 0.3  # realistic scale: logits of order one, not near zero


@pytest.mark.parametrize("name", ["plain", "fc_norm", "head_dim", "rope_llama3"])
def test_export_round_trip_is_the_same_model(name, tmp_path, verifier):
    """SpecForge layout -> speculators -> SpecForge: same tensors, same logits in eaglelab and in speculators."""
    d, folders = write_variant(name, tmp_path, verifier)
    back = export_drafter(folders["speculators"], tmp_path / "back", "specforge")
    assert json.loads((back / "config.json").read_text()).get("fc_norm", False) == d.spec.fc_norm
    ids, aux, *_ = inputs(d, 1, verifier)
    with torch.no_grad():
        want = d.ttt_logits(ids, aux, STEPS)
        for folder in (folders["speculators"], back):
            got = load_drafter(folder).ttt_logits(ids, aux, STEPS)
            assert all(rel(g, w) < 1e-6 for g, w in zip(got, want, strict=True)), folder
    model, info = references.speculators_model(folders["speculators"])
    assert not info["unexpected_keys"] and not info["missing_keys"], info


@pytest.mark.parametrize("name,to,flag", [
    ("specforge_norm_output_false", "speculators", "norm_output: false"),
    ("qwen3_layer", "specforge", "model_type 'qwen3'"),
    ("norm_before_residual", "specforge", "norm_before_residual"),
    ("speculators_norm_output", "specforge", "norm_output: true"),
])
def test_conversions_refuse_what_the_destination_cannot_compute(name, to, flag, tmp_path, verifier):
    d, folders = write_variant(name, tmp_path, verifier)
    src = next(iter(folders.values()))
    with pytest.raises(UnsupportedDrafterError, match=flag) as err:
        export_drafter(src, tmp_path / "out", to, TARGET, str(verifier))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "model.safetensors").exists()
