"""Memory: what a checkpoint needs, what is free, and a probe that does not fit saying so in one line (issue #42).

The Kimi-shaped sparse sample (hidden 7,168, vocabulary 163,840) is the case of the issue: its targets
do not load here (:func:`fits_here`), its drafter loads in the dtype asked for without being built and
initialised in float32 first and without an embedding of its own when the target's is lent
(:func:`load_drafter`), and the probe from its dumps sizes itself before it allocates
(:func:`load_dump_probe`). Tiny transformers models built here check the counts against what
transformers writes; the DeepSeek-V3 count against its published size.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.checkpoints.files.sources import load_checkpoint
from eaglelab.checkpoints.targets.footprint import (
    Fit,
    _cgroup_room,
    drafter_weight_bytes,
    fits_here,
    header_parameters,
    language_model_parameters,
    out_of_memory_as_error,
    parameter_count,
    require_memory,
)
from eaglelab.errors import CheckpointMismatchError, EaglelabError, ResourceError
from eaglelab.model.drafter import Eagle3Drafter
from eaglelab.model.drafter_files import drafter_state_dict, load_drafter, save_drafter
from eaglelab.worlds.kimi_shapes import build_kimi_sample, deepseek_sample_entries, read_fixture
from eaglelab.worlds.synthetic_checkpoints import KIMI_K2_DRAFTER_CONFIG, write_synthetic_drafter

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "data" / "fixtures" / "kimi"
H, V = 7168, 163840


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    """The Kimi-shaped sparse checkpoints (a few hundred kB of disk)."""
    return build_kimi_sample(tmp_path_factory.mktemp("kimi") / "sample", FIXTURES)


def write_kimi_dumps(root: Path, samples: int = 4, tokens: int = 64) -> tuple[Path, Path]:
    """Two SpecForge folders at Kimi width, bf16, written with eaglelab's own writer."""
    from eaglelab.data.dump_writers import specforge_payload

    g = torch.Generator().manual_seed(0)
    folders = (root / "old", root / "new")
    for f in folders:
        (f / "rows_0-2000").mkdir(parents=True)
    for i in range(samples):
        ids = torch.randint(0, V, (tokens,), generator=g)
        counted = torch.ones(tokens, dtype=torch.bool)
        counted[-1] = False
        for f in folders:
            payload = specforge_payload(ids, counted, torch.randn(tokens, 3 * H, generator=g).bfloat16(),
                                        torch.randn(tokens, H, generator=g).bfloat16())
            torch.save(payload, f / "rows_0-2000" / f"data_{i}.ckpt")
    return folders


# --------------------------------------------------------------------------- fits_here

def test_a_kimi_target_does_not_load_here_and_says_so_in_one_line(kimi):
    fit = fits_here(str(kimi.k25_target), "bfloat16", available=21_000_000_000)
    assert isinstance(fit, Fit) and not fit.loads
    # the config counts the whole model: the sample's headers hold two layers and two experts of 384
    assert fit.counted_from == "config" and fit.parameters == 1_026_408_232_448
    assert fit.needed_bytes == 2 * fit.parameters and fit.available_bytes == 21_000_000_000
    assert fit.line == ("k25-target: 1.03 T parameters, about 2.1 TB in bfloat16, this machine has 21 GB free: it does "
                        "not load here")
    assert fits_here(str(kimi.k2_target), "float32").needed_bytes == 4 * fit.parameters  # the same language model


def test_deepseek_v3_counts_its_published_671b():
    """DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3 on the hub): 671B total parameters (its technical report,
    arXiv 2412.19437, without the 14B multi-token-prediction module its checkpoint adds)."""
    cfg = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
           "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
           "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "vocab_size": 129280, "tie_word_embeddings": False, "topk_method": "noaux_tc"}
    assert language_model_parameters(cfg) == pytest.approx(671e9, rel=0.002)


def tiny_models():
    from transformers import (
        DeepseekV3Config,
        DeepseekV3ForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        MixtralConfig,
        MixtralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    common = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=False)),
        "llama tied, biased": lambda: LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True,
                                                                  attention_bias=True, head_dim=16)),
        "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False)),
        "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, tie_word_embeddings=False)),
        "mixtral": lambda: MixtralForCausalLM(MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2)),
        "deepseek-v3": lambda: DeepseekV3ForCausalLM(DeepseekV3Config(
            vocab_size=128, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=1, n_group=1, topk_group=1, bos_token_id=None, eos_token_id=None,
            pad_token_id=None, tie_word_embeddings=False)),
    }


@pytest.mark.parametrize("family", list(tiny_models()))
def test_the_config_counts_what_transformers_writes(family, tmp_path):
    torch.manual_seed(0)
    model = tiny_models()[family]()
    model.save_pretrained(tmp_path / family)
    ck = load_checkpoint(str(tmp_path / family))
    written = header_parameters(ck.tensors, ck.config)
    assert written == sum(t.numel for t in ck.tensors.values())  # nothing packed, nothing scaled
    assert language_model_parameters(ck.config) == written
    fit = fits_here(str(tmp_path / family), "bfloat16")
    assert fit.loads and fit.counted_from == "headers" and fit.needed_bytes == 2 * written
    assert fit.line.endswith("free: it loads here")


def test_packed_int4_experts_count_unpacked(kimi):
    """The K2.5 sample stores its routed experts as compressed-tensors int4 (eight to an int32), with scales."""
    ck = load_checkpoint(str(kimi.k25_target))
    entries = deepseek_sample_entries(read_fixture(FIXTURES, "kimi-k25-target-config-fields.json")["text_config"],
                                      "language_model.model.", "language_model.lm_head.weight", "bf16", "int4")
    logical = 0
    for name, shape, _ in entries:
        if name.endswith(("weight_scale", "weight_shape")):
            continue
        n = shape[0] * shape[1] if len(shape) == 2 else shape[0]
        logical += n * 8 if name.endswith("weight_packed") else n
    logical += 1152 * 3 * 14 * 14 + H * 4608  # the vision tower's and projector's tensors in the sample
    assert header_parameters(ck.tensors, ck.config) == logical
    assert parameter_count(ck) == (1_026_408_232_448, "config")


def test_a_drafter_is_counted_by_its_headers_not_as_a_one_layer_language_model(kimi):
    fit = fits_here(str(kimi.k2_drafter))
    assert fit.counted_from == "headers" and fit.loads
    assert fit.parameters == sum(t.numel for t in load_checkpoint(str(kimi.k2_drafter)).tensors.values())


def test_fits_here_reads_no_torch(kimi):
    code = ("import sys; from eaglelab.checkpoints.targets.footprint import fits_here; "
            f"f = fits_here({str(kimi.k25_target)!r}); assert not f.loads; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=st.dictionaries(
    st.sampled_from(["hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
                     "head_dim", "intermediate_size", "kv_lora_rank", "q_lora_rank", "n_routed_experts",
                     "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
                     "mlp_only_layers", "tie_word_embeddings", "model_type", "attention_bias", "text_config",
                     "quantization_config", "n_shared_experts", "shared_expert_intermediate_size"]),
    st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=True), st.text(max_size=8),
              st.lists(st.integers(-2, 5), max_size=3),
              st.dictionaries(st.text(max_size=6), st.integers(), max_size=3)),
    max_size=14))
def test_hostile_configs_count_or_say_none(cfg):
    """Whatever a config holds, the count is a whole number or None, and fits_here's reader raises only typed errors."""
    n = language_model_parameters(cfg)
    assert n is None or (isinstance(n, int) and n >= 0)
    from eaglelab.checkpoints.files.sources import Checkpoint

    try:
        count, source = parameter_count(Checkpoint("hostile", "folder", cfg, None, []))
        assert count > 0 and source == "config"
    except EaglelabError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.one_of(st.integers(0, 1 << 64), st.text(max_size=12)), usage=st.one_of(st.integers(0, 1 << 40),
                                                                                          st.text(max_size=12)),
       stat=st.text(max_size=40), line=st.text(max_size=30))
def test_hostile_cgroup_files_give_a_room_or_none(tmp_path_factory, limit, usage, stat, line):
    root = tmp_path_factory.mktemp("cg")
    folder = root / "memory" / "job"
    folder.mkdir(parents=True)
    (folder / "memory.limit_in_bytes").write_text(str(limit))
    (folder / "memory.usage_in_bytes").write_text(str(usage))
    (folder / "memory.stat").write_text(stat)
    (root / "cgroup").write_text(f"4:memory:/job\n{line}\n")
    room = _cgroup_room(str(root / "cgroup"), str(root))
    assert room is None or (isinstance(room, int) and room >= 0)


def test_the_cgroup_limits_v1_and_v2_and_their_ancestors(tmp_path):
    v1 = tmp_path / "v1"
    (v1 / "memory" / "a" / "b").mkdir(parents=True)
    for folder, limit, usage in ((v1 / "memory" / "a", 10 << 30, 5 << 30),
                                 (v1 / "memory" / "a" / "b", 8 << 30, 3 << 30)):
        (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (folder / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (v1 / "memory" / "a" / "b" / "memory.stat").write_text("cache 9\ntotal_inactive_file 1073741824\n")
    (v1 / "cgroup").write_text("4:memory:/a/b\n3:cpu:/\n")
    assert _cgroup_room(str(v1 / "cgroup"), str(v1)) == 5 << 30  # the parent leaves 5 GiB, the child 6
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("max\n")
    (v2 / "job" / "memory.current").write_text("100\n")
    (v2 / "cgroup").write_text("0::/job\n")
    assert _cgroup_room(str(v2 / "cgroup"), str(v2)) is None  # no limit
    (v2 / "job" / "memory.max").write_text(f"{4 << 30}\n")
    assert _cgroup_room(str(v2 / "cgroup"), str(v2)) == (4 << 30) - 100


def test_available_memory_honours_the_address_space_limit():
    code = ("import resource; from eaglelab.checkpoints.targets.footprint import available_memory; "
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); print(available_memory())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert 0 < int(proc.stdout) <= 3 << 30


# --------------------------------------------------------------------------- one line, before and while allocating

def test_a_step_that_does_not_fit_is_refused_in_one_line():
    needs = {"the heads of both targets": 9_400_000_000, "the drafter in bfloat16": 2_400_000_000}
    with pytest.raises(ResourceError) as err:
        require_memory("the probe from dumps", needs, available=8_000_000_000, advice="lower --batch-size")
    assert str(err.value) == ("the probe from dumps: needs about 12 GB (the heads of both targets 9.4 GB, the drafter "
                              "in bfloat16 2.4 GB), this machine has 8.0 GB free: lower --batch-size")
    assert require_memory("x", needs, available=12_000_000_000) == 11_800_000_000


def test_running_out_of_memory_is_one_line_and_lets_the_frames_go():
    with pytest.raises(ResourceError) as err:
        with out_of_memory_as_error("the probe from dumps", "lower --batch-size"):
            torch.empty(1 << 60, dtype=torch.uint8)  # what the allocator refuses outright
    text = str(err.value)
    assert "\n" not in text and text.startswith("the probe from dumps: ran out of memory (")
    assert "can't allocate memory" in text and text.endswith("free now: lower --batch-size")
    assert err.value.__context__ is None and err.value.__cause__ is None  # no traceback chained, no frames held
    with pytest.raises(RuntimeError, match="shape"):  # any other error passes through as it was
        with out_of_memory_as_error("x"):
            torch.zeros(2, 3) @ torch.zeros(2, 3)


# --------------------------------------------------------------------------- the drafter, loaded

TARGET = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "num_hidden_layers": 8, "vocab_size": 256, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
          "rope_theta": 10000.0, "hidden_act": "silu"}


def digest(model: Eagle3Drafter) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        if k != "embed_tokens.weight":  # initialised from the global generator, then replaced by the target's
            h.update(k.encode())
            h.update(v.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_a_fresh_drafter_is_initialised_as_before():
    """Seed 3 gives the weights it gave before loading changed (digest taken with the code of commit af2489d)."""
    d = Eagle3Drafter.from_target_config(TARGET, draft_vocab_size=64, seed=3)
    assert digest(d) == "81d7fb2fb443ee3e6e9d6cb5450c93d37eadde6384ea9a410a8ec7c11ac4c70b"
    assert digest(Eagle3Drafter.from_target_config(TARGET, draft_vocab_size=64, seed=3)) == digest(d)
    assert d.holds("embed_tokens.weight") and d.holds("lm_head.weight")


@pytest.fixture
def saved(tmp_path):
    """A fresh drafter with a real embedding and a permuted vocabulary map, saved with its embedding."""
    d = Eagle3Drafter.from_target_config(TARGET, draft_vocab_size=64, seed=5)
    g = torch.Generator().manual_seed(1)
    keep = torch.randperm(256, generator=g)[:64].sort().values
    t2d = torch.zeros(256, dtype=torch.bool)
    t2d[keep] = True
    d.set_vocab_map(keep - torch.arange(64), t2d)
    d.set_embedding(torch.randn(256, 64, generator=g))
    return d, save_drafter(d, tmp_path / "drafter", include_embedding=True)


def test_loading_reads_in_the_dtype_asked_and_draws_no_random_number(saved):
    d, folder = saved
    before = torch.random.get_rng_state()
    back = load_drafter(folder, torch.bfloat16)
    assert torch.equal(torch.random.get_rng_state(), before)  # nothing was randomly initialised
    for name, p in back.named_parameters():
        assert p.dtype == torch.bfloat16, name
        assert torch.equal(p, d.get_parameter(name).detach().to(torch.bfloat16)), name
    assert back.d2t.dtype == torch.int64 and torch.equal(back.d2t, d.d2t) and torch.equal(back.t2d, d.t2d)
    assert back.midlayer.self_attn.inv_freq.dtype == torch.float32  # RoPE's frequencies computed, in float32
    assert torch.equal(back.midlayer.self_attn.inv_freq, d.midlayer.self_attn.inv_freq)
    assert back.has_embedding and not any(p.is_meta for p in back.parameters())


def test_a_drafter_served_with_the_targets_embedding_holds_none_and_computes_the_same(saved, tmp_path):
    d, folder = saved
    lent = load_drafter(folder, embedding=False)
    assert not lent.holds("embed_tokens.weight") and not lent.has_embedding
    assert lent.embed_tokens.weight.shape == (256, 64) and lent.embed_tokens.weight.is_meta  # no [V, H] allocated
    ids, aux = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(2)), torch.randn(2, 10, 192)
    with pytest.raises(CheckpointMismatchError, match="has no embedding of its own") as err:
        lent.ttt_logits(ids, aux, 2)
    assert "\n" not in str(err.value)
    target_embedding = torch.randn(256, 64)
    with torch.no_grad(), lent.serving_embedding(target_embedding), d.serving_embedding(target_embedding):
        assert all(torch.equal(a, b) for a, b in zip(lent.ttt_logits(ids, aux, 3), d.ttt_logits(ids, aux, 3)))
    assert lent.embed_tokens.weight.is_meta  # given back
    lent = lent.to(torch.float64)  # moving a drafter moves what it holds; the placeholder stays one, retyped
    assert lent.fc.weight.dtype == torch.float64 and lent.embed_tokens.weight.is_meta
    assert lent.embed_tokens.weight.dtype == torch.float64
    assert "embed_tokens.weight" not in drafter_state_dict(lent, include_embedding=True)  # nothing to write
    lent.set_embedding(target_embedding.double())  # taken from the target: held from now on
    assert lent.holds("embed_tokens.weight") and torch.equal(lent.embed_tokens.weight, target_embedding.double())


def test_loading_allocates_the_weights_once(tmp_path):
    """A drafter at 2048 wide with a 64k vocabulary (0.22 GB of weights in bf16 without its embedding): the process
    grows by about its weights, not by a float32 build, its embedding and the file (1.4 GB before)."""
    cfg = {**KIMI_K2_DRAFTER_CONFIG, "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16,
           "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 64000, "draft_vocab_size": 16000}
    folder = write_synthetic_drafter(tmp_path / "wide", cfg)
    expected = drafter_weight_bytes(load_checkpoint(str(folder)).tensors, "bfloat16")
    code = f"""
import json, resource, torch
from eaglelab.model.drafter_files import load_drafter
torch.ones(8) @ torch.ones(8)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
d = load_drafter({str(folder)!r}, torch.bfloat16, embedding=False)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
held = sum(t.numel() * t.element_size() for t in list(d.parameters()) + list(d.buffers()) if not t.is_meta)
print(json.dumps({{"grew": grew, "held": held}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    rope = 64 * 4  # the RoPE frequencies: computed, not in the file
    assert got["held"] == expected + rope  # the estimate is what is held
    assert got["grew"] <= 1.15 * expected + (48 << 20), got  # the weights, one tensor in passing, the allocator's slack


# --------------------------------------------------------------------------- the probes' pre-flights

def test_the_probe_from_dumps_at_kimi_width_is_sized_from_headers(kimi, tmp_path):
    from eaglelab.checkpoints.drafters.preflight import check_drafter
    from eaglelab.data.dumps import open_dumps, pair_dumps
    from eaglelab.model.heads import plan_target_heads
    from eaglelab.probe.memory import dump_probe_needs, sample_tokens

    old, new = write_kimi_dumps(tmp_path)
    pairs = pair_dumps(open_dumps(old), open_dumps(new))
    spec, _ = check_drafter(str(kimi.k2_drafter), str(kimi.k2_target))
    plans = (plan_target_heads(str(kimi.k2_target)), plan_target_heads(str(kimi.k25_target)))
    assert sample_tokens(pairs, H) == 64
    needs = dump_probe_needs(pairs, plans, load_checkpoint(str(kimi.k2_drafter)).tensors, spec, torch.bfloat16, 8, 3)
    heads, drafter, batch = needs.values()
    assert heads == 2 * (2 * V * H * 2 + H * 2)  # embedding and head of each target, as stored (bf16), and the norm
    no_embedding = sum(t.numel for n, t in load_checkpoint(str(kimi.k2_drafter)).tensors.items()
                       if n not in ("embed_tokens.weight", "d2t", "t2d"))
    assert drafter == 2 * no_embedding + 8 * 32000 + V  # bf16 weights, int64 d2t, bool t2d: no [V, H] of its own
    assert 0 < batch < 4e9 and list(needs)[2] == "a batch of 4 x 64 positions"
    float32 = dump_probe_needs(pairs, plans, load_checkpoint(str(kimi.k2_drafter)).tensors, spec, torch.float32, 8, 3)
    # each head cast to float32 (two more bytes a value) beside its stored copy until the cast is done
    assert float32["the heads of both targets"] == heads + 2 * (V * H * 2 + V * H * 2)


def test_a_probe_from_dumps_that_does_not_fit_is_refused_before_it_allocates(kimi, tmp_path):
    """Under a 3 GB address-space limit (``ulimit -v``), the Kimi-width probe is refused in one line naming what
    it needs and what is free, and the process never holds more than its imports."""
    old, new = write_kimi_dumps(tmp_path)
    code = f"""
import json, resource, torch
from eaglelab.checkpoints.drafters.preflight import check_drafter
from eaglelab.data.dumps import open_dumps, pair_dumps
from eaglelab.errors import ResourceError
from eaglelab.probe.dumps import load_dump_probe
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
vm = int(status["VmSize"].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), resource.RLIM_INFINITY))
spec, _ = check_drafter({str(kimi.k2_drafter)!r}, {str(kimi.k2_target)!r})
pairs = pair_dumps(open_dumps({str(old)!r}), open_dumps({str(new)!r}))
try:
    load_dump_probe(pairs, {str(kimi.k2_target)!r}, {str(kimi.k25_target)!r}, {str(kimi.k2_drafter)!r}, spec,
                    torch.bfloat16, torch.device("cpu"), 8, 3)
    out = "loaded"
except ResourceError as exc:
    out = str(exc)
print(json.dumps({{"out": out, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert re.match(r"the probe from dumps: needs about 1[23] GB \(the heads of both targets 9\.4 GB, the drafter in "
                    r"bfloat16 2\.4 GB, a batch of 4 x 64 positions [\d.]+ [GM]B\), this machine has [23]\.\d GB free: "
                    r"lower --batch-size", got["out"]), got["out"]
    assert "\n" not in got["out"] and got["peak"] < 2e9  # nothing of the 12 GB was allocated


def test_the_live_probe_on_kimi_targets_is_refused_from_configs(kimi):
    from eaglelab.probe.memory import check_live_probe_memory, live_probe_needs

    needs = live_probe_needs(str(kimi.k2_target), str(kimi.k25_target), str(kimi.k2_drafter), "bfloat16", 8, 64, 3)
    assert needs["both targets in bfloat16"] == 2 * 2 * 1_026_408_232_448
    with pytest.raises(ResourceError, match=r"^the live probe: needs about 4\.1 TB \(both targets in bfloat16 4\.1 TB"):
        check_live_probe_memory(str(kimi.k2_target), str(kimi.k25_target), str(kimi.k2_drafter), "bfloat16", 8, 64, 3,
                                device="cpu")


def test_the_live_probe_on_tiny_targets_fits(tmp_path):
    from eaglelab.probe.memory import check_live_probe_memory, live_probe_needs

    torch.manual_seed(0)
    tiny_models()["llama"]().save_pretrained(tmp_path / "target")
    cfg = json.loads((tmp_path / "target" / "config.json").read_text())
    save_drafter(Eagle3Drafter.from_target_config(cfg, draft_vocab_size=64, aux_layer_ids=[0, 1, 2]), tmp_path / "d")
    target, drafter = str(tmp_path / "target"), str(tmp_path / "d")
    needs = live_probe_needs(target, target, drafter, "float32", 8, 64, 3)
    assert needs["both targets in float32"] == 2 * 4 * 31456
    assert check_live_probe_memory(target, target, drafter, "float32", 8, 64, 3, device="cpu") == sum(needs.values())


@pytest.mark.slow
def test_the_kimi_width_probe_from_dumps_in_bf16_peaks_under_16_gb():
    """Issue #42's probe, the job itself, on the Kimi sample with four 64-token dumps per target: the peak resident
    size (benchmarks/bench_dump_memory.py, a child process) within 16 GB, and the pre-flight's estimate above
    what the probe added. Skipped, with the probe's own line, where this machine has less free than it needs.

    64 tokens, not the benchmark's 256: the weights (11.8 GB of the ~12.5 GB added) are the same, the estimate's
    margin is the thinnest (its batch term grows faster than the batch's real peak), and the head products that
    take 256-token samples to 85 s take 30 s."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_dump_memory.py"), "--json",
                           "--tokens", "64"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.stdout.strip(), proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if "refused" in got:
        pytest.skip(got["refused"])
    assert got["verdicts"] == {"memory": True, "estimate": True}, got
    assert got["headline"].startswith("Verdict")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_drafter_file_loads_or_is_one_typed_line(tmp_path_factory, data):
    """The loader reads each tensor by its header's span: a file cut short, or bytes overwritten anywhere (header,
    offsets, data), is read as written or refused in one typed line, never a traceback from the reader."""
    folder = tmp_path_factory.mktemp("damaged")
    d = Eagle3Drafter.from_target_config(TARGET, draft_vocab_size=64, seed=1)
    save_drafter(d, folder / "d", include_embedding=data.draw(st.booleans()))
    path = folder / "d" / "model.safetensors"
    raw = bytearray(path.read_bytes())
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    path.write_bytes(bytes(raw))
    try:
        back = load_drafter(folder / "d", data.draw(st.sampled_from([torch.float32, torch.bfloat16])),
                            embedding=data.draw(st.booleans()))
    except EaglelabError as exc:
        assert "\n" not in str(exc)
    else:
        assert not any(p.is_meta for n, p in back.named_parameters() if n != "embed_tokens.weight")
