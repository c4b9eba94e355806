"""The drift sweep's parts: families, measures, predictors, engine logprob files and ``eaglelab predict``."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.cli import main
from eaglelab.drift import families as fam
from eaglelab.drift import predictors as pr
from eaglelab.drift.records import DrafterOn, SweepRecord
from eaglelab.engines import logprob_files as ef
from eaglelab.errors import ParameterError
from eaglelab.model.lora import LoRASnapshots

# --------------------------------------------------------------------------- families


@pytest.mark.parametrize("bits,group", [(8, 0), (4, 32), (3, 48), (2, 32)])
def test_quantized_weights_lie_on_their_grid(bits, group):
    torch.manual_seed(0)
    w = torch.randn(16, 80)  # 80 is no multiple of 32 or 48: the last group is shorter
    q = fam.quantize_weight(w, bits, group)
    levels = 2 ** (bits - 1) - 1
    g = group or 80
    for start in range(0, 80, g):
        block, qblock = w[:, start:start + g], q[:, start:start + g]
        scale = block.abs().amax(1, keepdim=True) / levels
        steps = qblock / scale
        assert torch.allclose(steps, steps.round(), atol=1e-4) and steps.abs().max() <= levels + 1e-4
        assert (qblock - block).abs().max() <= scale.max() / 2 + 1e-6  # round to nearest


def test_fewer_bits_move_the_weights_further():
    torch.manual_seed(0)
    w = torch.randn(32, 64)
    errs = [float((fam.quantize_weight(w, b, 32) - w).norm()) for b in (8, 4, 3, 2)]
    assert errs == sorted(errs) and errs[0] < 0.01 * float(w.norm())


def test_interpolation_ends_at_a_and_b():
    a = {"x": torch.zeros(3), "y": torch.ones(2), "n": torch.tensor([1, 2])}
    b = {"x": torch.ones(3), "y": torch.ones(2), "n": torch.tensor([1, 2])}
    assert fam.interpolate(a, b, 0.0)["x"].equal(torch.zeros(3)) and fam.interpolate(a, b, 1.0)["x"].equal(torch.ones(3))
    assert set(fam.interpolate(a, b, 2.0)) == {"x"} and fam.interpolate(a, b, 2.0)["x"].equal(2 * torch.ones(3))
    assert fam.weight_distance(b, {"x": 3 * torch.ones(3)}) == pytest.approx(2.0) and fam.weight_distance(b, {}) == 0.0


def test_lora_snapshot_equals_training_to_that_step(tiny_llama):
    """A snapshot merged later is the model trained to that step and merged then."""
    from tests.conftest import make_tiny_llama

    seqs = torch.randint(0, 256, (8, 16), generator=torch.Generator().manual_seed(0))
    state = {k: v.clone() for k, v in tiny_llama.state_dict().items()}
    lora = LoRASnapshots(tiny_llama, rank=4, seed=3)
    lora.train(tiny_llama, seqs, 3, 1e-2, 2, seed=3, snapshot_at=(1, 3))
    assert all(torch.equal(v, state[k]) for k, v in tiny_llama.state_dict().items())  # training leaves W alone
    early, late = lora.merged_weights(state, 1), lora.merged_weights(state, 3)
    other = make_tiny_llama()
    again = LoRASnapshots(other, rank=4, seed=3)
    again.train(other, seqs, 1, 1e-2, 2, seed=3)
    again.merge()
    sd = other.state_dict()
    assert all(torch.allclose(early[k], sd[k], atol=1e-6) for k in early)
    assert fam.weight_distance(state, early) < fam.weight_distance(state, late)


# --------------------------------------------------------------------------- measures


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**31 - 1), st.integers(1, 12))
def test_tv_through_the_top_k_is_a_lower_bound_and_exact_at_full_k(seed, k):
    from eaglelab.drift.measures import tv_top_k

    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(5, 12, generator=g) * 3, -1)
    logq = torch.log_softmax(torch.randn(5, 12, generator=g) * 3, -1)
    text = torch.randint(0, 12, (5,), generator=g)
    exact = 0.5 * (logp.exp() - logq.exp()).abs().sum(-1)
    through = tv_top_k(logp, logq, text, k)
    assert torch.all(through <= exact + 1e-6)
    assert torch.allclose(tv_top_k(logp, logq, text, 12), exact, atol=1e-6)


def test_measures_of_a_against_itself_and_against_b(tiny_world):
    from eaglelab.data.sets import probe_set
    from eaglelab.drift.measures import measure_drift
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.targets import load_target

    a, tok = load_target(tiny_world.target_a, device="cpu")
    b, _ = load_target(tiny_world.target_b, device="cpu")
    drafter = load_drafter(tiny_world.drafter_a)
    data = probe_set(tok, 8, 32)
    same = measure_drift(a, a, drafter, data.ids, data.counted, k=3)
    assert same.agreement == 1.0 and same.tv == pytest.approx(0, abs=1e-6) and same.kl == pytest.approx(0, abs=1e-6)
    assert same.on_b == same.on_a and same.conditional["chain"] == pytest.approx(same.on_a["chain"])
    moved = measure_drift(a, b, drafter, data.ids, data.counted, k=3)
    assert moved.agreement < 1 and 0 < moved.tv_topk <= moved.tv + 1e-6
    assert all(c <= o + 1e-9 for c, o in zip(moved.conditional["chain"], moved.on_a["chain"]))
    assert moved.on_a == same.on_a and moved.layers["last"]["cosine"] < 1
    assert moved.positions == int(data.counted.sum())


def test_a_sweep_computes_a_side_once_and_gets_the_same_numbers(tiny_world):
    """A's forward and the drafter on A are the same for every B': one reference serves every point exactly."""
    import json

    from eaglelab.data.sets import probe_set
    from eaglelab.drift.families import quantized
    from eaglelab.drift.measures import measure_drift, reference_pass
    from eaglelab.model.drafter_files import load_drafter
    from eaglelab.model.lora import projection_weights
    from eaglelab.model.targets import load_target

    a, tok = load_target(tiny_world.target_a, device="cpu")
    b, _ = load_target(tiny_world.target_b, device="cpu")
    q, _ = load_target(tiny_world.target_a, device="cpu")
    q.load_state_dict(quantized(a.state_dict(), list(projection_weights(a)), 3, 32), strict=False)
    drafter = load_drafter(tiny_world.drafter_a)
    data = probe_set(tok, 12, 32)
    reference = reference_pass(a, drafter, data.ids, data.counted, k=3, batch_size=4)
    for moved in (b, q):
        fresh = measure_drift(a, moved, drafter, data.ids, data.counted, k=3, batch_size=4)
        shared = measure_drift(a, moved, drafter, data.ids, data.counted, k=3, batch_size=4, reference=reference)
        assert json.dumps(shared.to_json(), sort_keys=True) == json.dumps(fresh.to_json(), sort_keys=True)
        assert 0 < shared.tv and shared.agreement < 1
    # B' = A given as A itself (a sweep's zero point): no second forward, the numbers a second copy of A gives
    again, _ = load_target(tiny_world.target_a, device="cpu")
    copy = measure_drift(a, again, drafter, data.ids, data.counted, k=3, batch_size=4, reference=reference)
    itself = measure_drift(a, a, drafter, data.ids, data.counted, k=3, batch_size=4, reference=reference)
    assert json.dumps(itself.to_json(), sort_keys=True) == json.dumps(copy.to_json(), sort_keys=True)
    assert itself.agreement == 1.0 and itself.tv == 0.0 and itself.on_b == itself.on_a
    other_k = measure_drift(a, b, drafter, data.ids, data.counted, k=2, batch_size=4, reference=reference)
    assert len(other_k.on_a["chain"]) == 2  # a reference of other settings is not used
    fewer = measure_drift(a, b, drafter, data.ids[:8], data.counted[:8], k=3, batch_size=4, reference=reference)
    assert fewer.positions == int(data.counted[:8].sum())  # nor one of other text


def test_the_cycle_walk_replays_decoding_over_teacher_forced_hits():
    """Drafts accepted per start position 2,1,0,3,0,3,3,3,... -> cycles start at 0, 3 and 7, as decoding would."""
    from eaglelab.drift.measures import CycleWalk

    runs = [2, 1, 0, 3, 0, 3, 3, 3, 1, 0]
    hits = [torch.tensor([[r > i for r in runs]]) for i in range(3)]
    counted = torch.ones(1, 10, dtype=torch.bool)
    counted[0, 9] = False  # the last position has no next token
    walk = CycleWalk()
    walk.add(hits, counted)
    # starts 0 (2 drafts, 3 tokens), 3 (3 drafts, 4 tokens), 7 (3 drafts, 4 tokens): next start 11 > 8
    assert (walk.emitted, walk.cycles) == (11, 3) and walk.value() == pytest.approx(11 / 3)
    walk.add(hits, torch.zeros(1, 10, dtype=torch.bool))  # a row with nothing counted adds nothing
    assert walk.cycles == 3


# --------------------------------------------------------------------------- engine files

VLLM_HTTP = {"id": "cmpl-abc", "object": "text_completion", "model": "m", "choices": [
    {"index": 0, "text": " I", "logprobs": None, "finish_reason": "length", "token_ids": [358],
     "prompt_logprobs": [None, {"1917": {"logprob": -6.42, "rank": 37, "decoded_token": " world"},
                                "11": {"logprob": -1.2, "rank": 1, "decoded_token": ","},
                                "0": {"logprob": -1.9, "rank": 2, "decoded_token": "!"}},
                         {"0": {"logprob": -0.9, "rank": 1, "decoded_token": "!"},
                          "13": {"logprob": -1.3, "rank": 2, "decoded_token": "."}}],
     "prompt_token_ids": [9906, 1917, 0]}], "usage": {"prompt_tokens": 3}}
SGLANG = {"text": " I", "meta_info": {"id": "5f1c", "prompt_tokens": 3,
                                      "input_token_logprobs": [[None, 9906, "Hello"], [-6.42, 1917, " world"], [-0.9, 0, "!"]],
                                      "input_top_logprobs": [None, [[-1.2, 11, ","], [-1.9, 0, "!"]],
                                                             [[-0.9, 0, "!"], [-1.3, 13, "."]]]}}


def test_the_engines_documented_layouts_read_alike(tmp_path):
    """vLLM's completion response, its chat variant (top-level prompt_logprobs), SGLang's, and a batch list."""
    chat = {"choices": [{"index": 0}], "prompt_logprobs": VLLM_HTTP["choices"][0]["prompt_logprobs"],
            "prompt_token_ids": [9906, 1917, 0]}
    offline = {"prompt_token_ids": [9906, 1917, 0],
               "prompt_logprobs": [None, {"1917": -6.42, "11": -1.2, "0": -1.9}, {"0": -0.9, "13": "-1.3"}]}
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in (VLLM_HTTP, chat, SGLANG, [SGLANG, SGLANG])) + "\n\n")
    seqs = ef.read_logprob_file(path)
    assert len(seqs) == 5 and all(s.token_ids == [9906, 1917, 0] for s in seqs)
    assert all(s.top1(1) == 11 and s.top1(2) == 0 and s.dists[0] is None for s in seqs)
    assert seqs[0].dists[1] == seqs[2].dists[1] == {1917: -6.42, 11: -1.2, 0: -1.9}
    (tmp_path / "bad.jsonl").write_text(json.dumps(offline) + "\n")
    with pytest.raises(ef.EngineFileError, match=r"bad.jsonl:1: .*logprob '-1.3' is not a number"):
        ef.read_logprob_file(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("line,problem", [
    ("{not json", "Expecting property name"),
    ('{"prompt_token_ids": [1, 2], "prompt_logprobs": [null, {"5": NaN}]}', "NaN is not a valid number"),
    ('{"prompt_token_ids": [1, 2], "prompt_logprobs": [null, {"5": 0.5}]}', "is not a log-probability"),
    ('{"prompt_token_ids": [1, -2], "prompt_logprobs": [null, {"5": -1}]}', "token id -2"),
    ('{"prompt_token_ids": [1, 2], "prompt_logprobs": [null]}', "as long as prompt_token_ids"),
    ('{"prompt_logprobs": [null, {"5": -1}]}', "prompt_token_ids missing"),
    ('{"choices": [{"prompt_logprobs": []}, {}]}', "one choice per line"),
    ('{"meta_info": {"input_token_logprobs": [[null, 1, null]]}}', "top_logprobs_num"),
    ('[1, 2]', "must be a JSON object"),
    ('{"text": "hello"}', "neither a vLLM"),
    ('{"count_from": 0, "prompt_token_ids": [], "prompt_logprobs": []}', "count_from"),
])
def test_malformed_lines_name_the_file_line_and_problem(tmp_path, line, problem):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(VLLM_HTTP) + "\n" + line + "\n")
    with pytest.raises(ef.EngineFileError) as err:
        ef.read_logprob_file(path)
    assert str(err.value).startswith(f"{path}:2: ") and problem in str(err.value)


def test_not_a_regular_file_or_empty(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    for name, problem in (("fifo", "is a FIFO"), ("missing", "no such file"), ("empty.jsonl", "no responses")):
        with pytest.raises(ef.EngineFileError, match=problem):
            ef.read_logprob_file(tmp_path / name)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 70000) | st.floats(allow_nan=False) | st.text(max_size=4),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
                        st.sampled_from(["choices", "prompt_logprobs", "prompt_token_ids", "meta_info", "logprob",
                                         "input_token_logprobs", "input_top_logprobs", "count_from", "0", "7"]),
                        kids, max_size=4), max_leaves=25)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(JSON)
def test_any_json_line_is_read_or_refused_with_an_engine_file_error(tmp_path, obj):
    path = tmp_path / "fuzz.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    try:
        seqs = ef.read_logprob_file(path)
    except ef.EngineFileError as exc:
        assert str(exc).startswith(str(path))
    else:
        for s in seqs:
            assert len(s.dists) == len(s.token_ids) and all(all(v <= 1e-4 for v in d.values()) for d in s.dists if d)


def test_files_written_from_a_model_give_the_sweeps_measures(tiny_world, tmp_path):
    """A's logprobs as vLLM responses, B's as SGLang ones: agreement and TV(top-k) equal those of the logits."""
    from eaglelab.data.sets import probe_set
    from eaglelab.drift.measures import top_logprobs, tv_top_k
    from eaglelab.model.targets import load_target

    a, tok = load_target(tiny_world.target_a, device="cpu")
    b, _ = load_target(tiny_world.target_b, device="cpu")
    data = probe_set(tok, 6, 24)
    counted = data.counted.clone()
    counted[:, :3] = False  # the "prompt": not counted
    ef.write_jsonl(tmp_path / "a.jsonl", [ef.vllm_response(s) for s in top_logprobs(a, data.ids, counted, k=5)])
    ef.write_jsonl(tmp_path / "b.jsonl", [ef.sglang_response(s) for s in top_logprobs(b, data.ids, counted, k=5)])
    cmp_ = ef.compare_logprobs(ef.read_logprob_file(tmp_path / "a.jsonl"), ef.read_logprob_file(tmp_path / "b.jsonl"))
    with torch.no_grad():
        la, lb = (torch.log_softmax(m(input_ids=data.ids).logits, -1)[:, :-1] for m in (a, b))
    keep = counted[:, :-1]  # positions with a next token in the text
    agree = (la.argmax(-1) == lb.argmax(-1))[keep].float().mean()
    tv = tv_top_k(la[keep], lb[keep], data.ids[:, 1:][keep], 5).mean()
    assert cmp_.positions.sum() == keep.sum() and cmp_.agreement == pytest.approx(float(agree))
    assert cmp_.tv_mean == pytest.approx(float(tv), rel=1e-4)
    ids_b = ef.read_logprob_file(tmp_path / "b.jsonl")
    ids_b[0].token_ids[-1] += 1
    with pytest.raises(ef.EngineFileError, match="response 1: the two targets scored different texts"):
        ef.compare_logprobs(ef.read_logprob_file(tmp_path / "a.jsonl"), ids_b)


# --------------------------------------------------------------------------- predictors


def _json_record(family, agreement, chain_a, gamma_true, label=None) -> dict:
    """A record's JSON as a sweep writes it, its τ on B' following the law with ``gamma_true``."""
    s = agreement ** gamma_true
    tau_b = 1 + sum(c * s ** (i + 1) for i, c in enumerate(chain_a))
    return {"point": {"family": family, "label": label or f"{family} {agreement}"},
            "measures": {"agreement": agreement, "tv_topk": 1 - agreement, "tv": 1 - agreement, "kl": -math.log(agreement),
                         "cos_last": agreement},
            "on_a": {"chain": chain_a, "accept_len": 1 + sum(chain_a)}, "on_b": {"accept_len": tau_b},
            "conditional": {"accept_len": tau_b}}


def _record(*args, **kwargs) -> SweepRecord:
    return SweepRecord.from_json(_json_record(*args, **kwargs))


def test_held_out_errors_get_a_sequence_bootstrap_band_and_the_ranking_uses_its_upper_end():
    """Records with per-sequence hits: each worst error gets a band around it; a lucky predictor does not win."""
    import numpy as np

    rng = np.random.default_rng(0)
    chain = [0.8, 0.6, 0.45]

    def noisy(rec, n=30):
        out = json.loads(json.dumps(rec))
        for side, rates in (("on_a", rec["on_a"]["chain"]),
                            ("on_b", [(rec["on_b"]["accept_len"] - 1) * c / sum(chain) for c in chain])):
            counted = np.full((n, 3), 20)
            hits = rng.binomial(counted, np.clip(rates, 0, 1))
            out[side].update(seq_counted=counted.tolist(), seq_hits=hits.tolist(),
                             chain=(hits.sum(0) / counted.sum(0)).tolist())
            out[side]["accept_len"] = 1 + sum(out[side]["chain"])  # the point estimate is what the sequences say
        return out

    recs = [SweepRecord.from_json(noisy(_json_record(f, a, chain, 1.7))) for f, ags in
            (("none", (1.0,)), ("path", (0.9, 0.7)), ("quant", (0.97, 0.85)), ("train", (0.8, 0.75))) for a in ags]
    held = pr.leave_one_family_out(recs, [pr.by_name("agreement^γ"), pr.by_name("agreement")])
    bands = pr.held_out_bands(held, recs, reps=200)
    rows = {r["predictor"]: r for r in pr.rank_predictors(held, bands)}
    for name, (lo, hi) in bands.items():
        assert 0 <= lo < hi and lo <= rows[name]["worst"] + 0.01
    assert bands["agreement^γ"][1] < bands["agreement"][1]  # the fitted law is the better one, band and all
    # the ranking reads the band's upper end: a smaller worst with a wider band loses
    fake = {"agreement^γ": (0.01, 0.30), "agreement": (0.05, 0.10)}
    assert pr.rank_predictors(held, fake)[0]["predictor"] == "agreement"
    bare = [replace(r, on_a=DrafterOn(chain, 1 + sum(chain))) for r in recs]  # no per-sequence hits: no band, no claim
    assert pr.held_out_bands(held, bare) == {}
    # #56 item 4: how often each is chosen over resamples of the sequences and the families, summing to one
    draws = pr.worst_draws(held, recs, (), 200, 0)
    assert pr.held_out_bands(held, recs, reps=200, draws=draws) == bands  # one set of draws, the same bands
    shares = pr.selection_shares(held, recs, reps=200, draws=draws)
    assert set(shares) == {"agreement^γ", "agreement"} and sum(shares.values()) == pytest.approx(1.0)
    assert shares["agreement^γ"] > 0.5  # the better law wins most resamples
    assert pr.selection_shares(held, bare) == {}
    from eaglelab.drift.analysis import PredictorChoice

    choice = PredictorChoice(held, list(rows.values()), "agreement^γ", "agreement^γ", {}, {"any": shares, "engine": shares})
    said = choice.stability()
    assert said.startswith(f"chosen in {100 * shares['agreement^γ']:.0f}% of resamples of the sequences and the families")
    split = {"agreement^γ": 0.55, "agreement": 0.45}
    unsettled = PredictorChoice(held, list(rows.values()), "agreement^γ", "agreement^γ", {}, {"any": split}).stability()
    assert unsettled.endswith("agreement in 45%: the sweep does not settle between them")
    assert "not measured" in PredictorChoice(held, [], "agreement^γ", "agreement^γ", {}).stability()


def test_a_fitted_exponent_is_recovered_and_held_out_errors_vanish():
    chain = [0.8, 0.6, 0.45]
    recs = [_record("none", 1.0, chain, 1.7)] + [_record(f, a, chain, 1.7) for f, ags in
                                                  (("path", (0.9, 0.7, 0.5)), ("quant", (0.97, 0.93, 0.85)),
                                                   ("train", (0.8, 0.75)))
                                                  for a in ags]
    assert pr.fit_gamma(pr.by_name("agreement^γ"), recs) == pytest.approx(1.7, rel=1e-3)
    held = pr.leave_one_family_out(recs)
    worst = {r["predictor"]: r["worst"] for r in pr.rank_predictors(held)}
    assert worst["agreement^γ"] < 1e-3 and worst["conditional"] < 1e-9 and worst["unchanged"] > 0.2
    assert pr.choose(pr.rank_predictors(held), engine_only=True)["predictor"] == "agreement^γ"
    assert {h.family for h in held} == {"path", "quant", "train"}


def test_chain_from_tau_round_trips():
    chain = pr.chain_from_tau(2.2, 3)
    assert 1 + sum(chain) == pytest.approx(2.2) and chain == sorted(chain, reverse=True)


def test_prediction_band_brackets_the_estimate():
    cmp_ = ef.TargetComparison(np.array([80.0, 90, 70, 95]), np.array([5.0, 4, 8, 2]), np.array([100.0, 100, 100, 100]))
    p = pr.predict_plugin([[0.7, 0.5, 0.3], [0.72, 0.52, 0.33]], cmp_, "agreement")
    assert p.low <= p.tau <= p.high and p.measures["agreement"] == pytest.approx(0.8375)
    wider = pr.predict_plugin([[0.7, 0.5, 0.3], [0.72, 0.52, 0.33]], cmp_, "agreement", calibration_error=0.1)
    assert wider.low < p.low and wider.high > p.high
    with pytest.raises(ParameterError, match="engine logprobs"):
        pr.predict_plugin([[0.7]], cmp_, "conditional")


# --------------------------------------------------------------------------- eaglelab predict


@pytest.fixture
def engine_files(tmp_path):
    old = dict(VLLM_HTTP, count_from=1)
    new = json.loads(json.dumps(SGLANG))
    new["meta_info"]["input_top_logprobs"][1] = [[-0.5, 13, "."], [-1.9, 0, "!"]]  # disagrees at position 1
    (tmp_path / "old.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(old) + "\n")
    (tmp_path / "new.jsonl").write_text(json.dumps(new) + "\n" + json.dumps(SGLANG) + "\n")
    return tmp_path / "old.jsonl", tmp_path / "new.jsonl"


def test_predict_from_engine_files_and_a_vllm_log(engine_files, tmp_path, capsys):
    old, new = engine_files
    log = tmp_path / "vllm.log"
    log.write_text("INFO SpecDecoding metrics: Mean acceptance length: 2.05, Accepted throughput: 33.10 tokens/s, "
                   "Drafted throughput: 96.77 tokens/s, Accepted: 1050 tokens, Drafted: 3000 tokens, "
                   "Per-position acceptance rate: 0.500, 0.330, 0.220, Avg Draft acceptance rate: 35.0%\n")
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--log", str(log), "--cycle-ms", "20",
                 "--json",
                 "--baseline-tps", "80"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measures"]["agreement"] == pytest.approx(0.75) and out["positions"] == 4
    expected = 1 + sum(c * 0.75 ** (i + 1) for i, c in enumerate([0.5, 0.33, 0.22]))
    assert out["tau"] == pytest.approx(expected) and out["tau_on_old"] == pytest.approx(2.05)
    assert out["tokens_per_s"][0] == pytest.approx(expected / 0.02) and out["break_even_tau"] == pytest.approx(1.6)
    assert out["low"] < 1.6 < out["high"] and out["plug_in"].startswith("straddles break-even")  # τ 1.65, band around it
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--accept-len", "2.2", "--k", "3"]) == 0
    text = capsys.readouterr().out
    assert "predicted plug-in τ on the new target" in text and "tok/s" in text


def test_predict_with_a_sweeps_calibration(engine_files, tmp_path, capsys):
    from eaglelab.drift.analysis import save_calibration

    chain = [0.8, 0.6, 0.45]
    recs = [_record("none", 1.0, chain, 2.0)] + [_record(f, a, chain, 2.0) for f, ags in
                                                  (("path", (0.9, 0.6)), ("quant", (0.95, 0.8)), ("train", (0.85, 0.7)))
                                                  for a in ags]
    from eaglelab.drift.analysis import held_out_choice

    cal = save_calibration(tmp_path / "05_predictor.json", held_out_choice(recs), "a test sweep")
    old, new = engine_files
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--chain", "0.8,0.6,0.45",
                 "--calibration", str(cal), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "agreement^γ" and out["gamma"] == pytest.approx(2.0, rel=1e-3)
    assert out["calibration_error"] is not None and out["calibration_error"] < 1e-3


def test_predict_calibrated_on_one_probe(engine_files, tmp_path, capsys):
    """A probe's result (here of the shape `eaglelab probe --json` prints) solves agreement^γ on the user's own pair."""
    chain = [0.8, 0.6, 0.45]
    agreement, gamma = 0.9, 1.7
    tau_b = 1 + sum(c * agreement ** (gamma * (i + 1)) for i, c in enumerate(chain))
    probe = {"argmax_agreement": agreement, "checkpoints": {"target_a": "kimi-k2", "target_b": "kimi-k2.5"},
             "plugin": {"chain_on_a": chain, "accept_len_on_b": tau_b},
             "verdict": {"bands": {"tau_b": {"low": tau_b - 0.05, "high": tau_b + 0.1, "level": 0.9}}}}
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    old, new = engine_files
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--chain", "0.8,0.6,0.45", "--calibration",
                 str(tmp_path / "probe.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "agreement^γ" and out["gamma"] == pytest.approx(gamma, rel=1e-3)
    assert out["calibration_error"] == pytest.approx(0.1 / tau_b) and "kimi-k2 → kimi-k2.5" in out["calibration"]
    (tmp_path / "bad.json").write_text(json.dumps({**probe, "plugin": {"chain_on_a": [2], "accept_len_on_b": 2}}))
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--chain", "0.5", "--calibration",
                 str(tmp_path / "bad.json")]) == 2
    assert "chain_on_a must be a list of rates" in capsys.readouterr().err


@pytest.mark.parametrize("extra,problem", [
    (["--accept-len", "2.2"], "--k: --accept-len needs the drafts per cycle"),
    (["--chain", "0.5,0.7"], "must lie in [0, 1] and not increase"),
    ([], "give the old drafter's acceptance"),
    (["--accept-len", "5", "--k", "3"], "not reachable"),
    (["--chain", "0.5", "--calibration", "NOFILE"], "NOFILE: no such file"),
])
def test_predict_refuses_bad_input_in_one_line(engine_files, capsys, extra, problem):
    old, new = engine_files
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err


def test_predict_names_a_malformed_file_line(engine_files, capsys):
    old, new = engine_files
    new.write_text(new.read_text() + '{"meta_info": {"input_token_logprobs": "x"}}\n')
    assert main(["predict", "--old-logprobs", str(old), "--new-logprobs", str(new), "--chain", "0.6,0.4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{new}:3:" in err


# --------------------------------------------------------------------------- the sweep


def test_sweep_measures_each_point_once_and_reuses_its_cache(tiny_world, tmp_path):
    from eaglelab.drift.families import ZERO, DriftPoint
    from eaglelab.drift.sweep import SweepSettings, run_sweep

    points = (ZERO, DriftPoint("path", 1.0), DriftPoint("quant", 3, 32), DriftPoint("train", 2), DriftPoint("train", 4))
    measured = (DriftPoint("path", 1.0),)
    s = SweepSettings(sequences=4, measure_prompts=1, measure_tokens=8, lora_seq_len=32, lora_rows=16, lora_batch=2)
    first = run_sweep(tiny_world.target_a, tiny_world.target_b, tiny_world.drafter_a, points, measured, s, tmp_path,
                      progress=False)
    assert first.computed == 5 and len(list(tmp_path.glob("*.json"))) == 5
    by = {r.label: r for r in first.records}
    assert by["A itself"].weight_distance == 0 and by["A itself"].measures["agreement"] == 1.0
    assert 0 < by["2 steps"].weight_distance < by["4 steps"].weight_distance
    m = by["α = 1"].measured
    assert m.prompts == 1 and m.cycles and all(1 <= x <= 4 for x in (m.accept_len, m.tf_own_text, m.walk_own_text))
    assert all(r.measured is None for r in first.records if r.label != "α = 1")
    assert first.at("path", 1.0) is by["α = 1"] and first.on_a == by["A itself"].on_a
    again = run_sweep(tiny_world.target_a, tiny_world.target_b, tiny_world.drafter_a, points, measured, s, tmp_path,
                      progress=False)
    # compared as JSON: a rate no cycle reached is NaN, and NaN != NaN once read back from the cache
    assert again.computed == 0 and json.dumps(again.to_json()["records"], sort_keys=True) == \
        json.dumps(first.to_json()["records"], sort_keys=True)
    next(tmp_path.glob("quant-*.json")).write_text("{truncated")  # a damaged record is recomputed, not trusted
    assert run_sweep(tiny_world.target_a, tiny_world.target_b, tiny_world.drafter_a, points, measured, s, tmp_path,
                     progress=False).computed == 1
    other = run_sweep(tiny_world.target_a, tiny_world.target_b, tiny_world.drafter_a, points[:2], (), SweepSettings(
        sequences=3, measure_prompts=1, measure_tokens=8), tmp_path, progress=False)
    assert other.computed == 2  # other settings: other keys, nothing stale reused


def test_the_sweeps_tau_on_b_is_the_probes_on_the_same_data(tiny_world, tmp_path):
    """#54 item 3: 03 gave τ 1.52 on B and 05 1.20 teacher forced for the same pair, unexplained: 05 ignored DATA and
    probed built-in text. With the user's file both read the same rows, and B itself (α = 1) gives 03's τ exactly."""
    from eaglelab.drift.families import DriftPoint
    from eaglelab.drift.sweep import SweepSettings, run_sweep
    from eaglelab.jobs.probe import ProbeSettings, probe_checkpoints

    data = tmp_path / "mine.txt"
    data.write_text("\n\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}  # scaled, then shifted" for i in range(60)))
    sweep = run_sweep(tiny_world.target_a, tiny_world.target_b, tiny_world.drafter_a, (DriftPoint("path", 1.0),), (),
                      SweepSettings(sequences=6, data=str(data), seq_len=32), tmp_path / "cache", progress=False)
    probe = probe_checkpoints(ProbeSettings(str(tiny_world.target_a), str(tiny_world.target_b), str(tiny_world.drafter_a),
                                            data=str(data), sequences=6, seq_len=32, measure_prompts=0), progress=False)
    b = sweep.at("path", 1.0)
    assert str(data) in b.data and b.data == probe.data
    assert b.on_b.accept_len == pytest.approx(probe.tau_b, abs=1e-6)
    assert sweep.on_a.accept_len == pytest.approx(probe.tau_a, abs=1e-6)
