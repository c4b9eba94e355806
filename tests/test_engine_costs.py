"""The cost table measured in vLLM with τ forced: plain steps and speculative cycles on the tiny world.

vLLM's ``rejection_sample_method="synthetic"`` accepts draft ``i`` by a coin (its minimum-variance
schedule: unconditional rates ``[1] * floor(τ - 1) + [frac(τ - 1)] + [0] * ...``), while the drafter
still drafts and the target still verifies, so a cycle costs what it costs. The CPU build has no
synthetic kernel; the worker supplies a port of vLLM's Triton one (``vllm_synthetic.synthetic_sampler``),
checked here at the schedule's deterministic ends. The engine tests run vLLM from ``.venv-vllm``
(``make engine``) and skip, with the reason, only where it is absent; the refusals need no engine.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eaglelab.engines.vllm import engine_drafter, engine_status, run_worker, run_workers
from eaglelab.engines.vllm_load import _measured_taus, measure_costs_in_engine
from eaglelab.errors import EngineError, ParameterError
from eaglelab.serving.cost_table import read_cost_table, write_cost_table

K, TOKENS, CONCURRENCY, FORCED, REPEATS = 2, 48, (1, 4), (1.5, 2.5), 2


def need_engine() -> None:
    ok, why = engine_status()
    if not ok:
        pytest.skip(f"vLLM environment not installed here: {why}")


@pytest.fixture(scope="module")
def prompts(tiny_world) -> list[list[int]]:
    from eaglelab.data.sets import measure_prompts
    from eaglelab.model.targets import load_target

    _, tok = load_target(tiny_world.target_a, device="cpu")
    return measure_prompts(tok, max(CONCURRENCY), tiny_world)


def band(forced: float, concurrency: int) -> float:
    """Four standard deviations of a run's measured τ around the forced one.

    Per cycle the accepted drafts are ``floor(τ - 1)`` plus one Bernoulli(``frac(τ - 1)``) coin: standard
    deviation at most 0.5. A run of ``c`` requests generating ``TOKENS`` each (the first from prefill) holds
    about ``c (TOKENS - 1) / τ`` cycles, so its mean τ has a standard deviation of at most
    ``0.5 / sqrt(cycles)``: 0.09 at c 1 and τ 1.5, 0.05 at c 4 (a miss of four of them: ~6e-5 a row).
    """
    return 4 * 0.5 / math.sqrt(concurrency * (TOKENS - 1) / forced)


@pytest.mark.engine
def test_a_forced_cost_table_is_measured_written_and_read_back(tiny_world, prompts, tmp_path):
    """Rows complete, measured τ near the forced one, cycles longer than plain steps, provenance kept."""
    need_engine()
    table = measure_costs_in_engine(tiny_world.target_a, tiny_world.drafter_a, prompts, TOKENS, K, CONCURRENCY, FORCED,
                                    repeats=REPEATS)
    back = read_cost_table(write_cost_table(tmp_path / "costs.csv", table.rows, table.comments))
    assert len(back.rows) == len(CONCURRENCY) * REPEATS * (1 + len(FORCED))
    assert back.provenance()["engine"].startswith("vllm 0.") and back.provenance()["k"] == str(K)
    assert {"target", "drafter", "dtype", "date", "accept_len"} <= set(back.provenance())
    for c in CONCURRENCY:
        plain = [r for r in back.plain if r.concurrency == c]
        assert len(plain) == REPEATS and all(r.accept_len == 1 and r.draft_tokens == 1 for r in plain)
        context = round(sum(map(len, prompts[:c])) / c + TOKENS / 2)
        for forced in FORCED:
            cycles = [r for r in back.cycles if r.concurrency == c and abs(r.accept_len - forced) <= band(forced, c)]
            assert len(cycles) == REPEATS, (c, forced, [r.accept_len for r in back.cycles if r.concurrency == c])
            assert all(r.k == K and r.draft_tokens == K + 1 and r.topk == 1 and r.context == context for r in cycles)
            # every row timed; how much longer a cycle is than a plain step (1.5-2x on 2 quiet CPU cores) is a
            # measurement, not an assertion: under other load the order can flip (notebook 01's cost fit reports it)
            assert all(math.isfinite(r.step_s) and r.step_s > 0 for r in cycles + plain)
    # the written rows read back as measured (accept_len to 6 significant digits)
    assert [(r.concurrency, r.k, r.context) for r in back.rows] == [(r.concurrency, r.k, r.context) for r in table.rows]
    assert [r.accept_len for r in back.rows] == pytest.approx([r.accept_len for r in table.rows], rel=1e-5)


@pytest.mark.engine
def test_the_schedule_ends_are_exact_and_tau_one_is_the_target_alone(tiny_world, prompts, tmp_path):
    """Forced τ 1 rejects every draft (the outputs are the target's greedy ones); τ k + 1 accepts every draft."""
    need_engine()
    base = {"target": str(Path(tiny_world.target_a).resolve()), "prompts": prompts, "max_new_tokens": 16, "batch": "all",
            "dtype": "float32", "max_model_len": 1024, "seed": 0}
    folder = str(engine_drafter(tiny_world.drafter_a, tiny_world.target_a, tmp_path, K))
    # three engines one after another in one worker process (the last forced, the first not: the port is per engine)
    alone, none, every = run_workers([{**base, "drafter": None, "k": 0},
                                      {**base, "drafter": folder, "k": K, "forced_accept_len": 1.0},
                                      {**base, "drafter": folder, "k": K, "forced_accept_len": float(K + 1)}])
    assert none["forced_accept_len"] == 1.0 and none["spec"]["tau"] == 1.0 and none["outputs"] == alone["outputs"]
    assert every["spec"]["tau"] == K + 1 and every["spec"]["position_rate_unconditional"] == [1.0] * K
    assert every["synthetic_sampler"] in ("vllm", "eaglelab-cpu-port")


@pytest.mark.parametrize("accept_lens", [(0.5,), (1.5, K + 1.5), (math.nan,), (True,), ("2",), ()])
@pytest.mark.engine
def test_a_bad_forced_tau_is_refused_before_the_engine_starts(tiny_world, accept_lens, monkeypatch):
    """The refusal comes before any engine: with no engine environment at all it is still the τ that is named."""
    monkeypatch.setenv("EAGLELAB_VLLM_PYTHON", "/nonexistent/python")
    with pytest.raises(ParameterError, match=r"^accept_lens: .*\[1, 3\]") as err:
        measure_costs_in_engine(tiny_world.target_a, tiny_world.drafter_a, [[1, 2, 3]] * 4, 8, K, (1, 4), accept_lens)
    assert "\n" not in str(err.value)


@pytest.mark.engine
def test_the_worker_refuses_a_bad_forced_tau_in_one_line(tmp_path, monkeypatch):
    """The real worker script validates before it imports vLLM: run by this interpreter, it names the field."""
    monkeypatch.setenv("EAGLELAB_VLLM_PYTHON", sys.executable)
    import eaglelab.engines.vllm as ev

    monkeypatch.setattr(ev, "_VERSION", "print('test')")  # this interpreter stands in as the engine's
    for name in ("target", "drafter"):
        (tmp_path / name).mkdir()
    req = {"target": str(tmp_path / "target"), "drafter": str(tmp_path / "drafter"), "k": 2, "prompts": [[1, 2]],
           "max_new_tokens": 4, "max_model_len": 64}
    for bad, words in ((3.5, "not in [1, k + 1] = [1, 3]"), ("2", "must be null or a number"),
                       (True, "must be null or a number")):
        with pytest.raises(EngineError, match=r"forced_accept_len") as err:
            run_worker({**req, "forced_accept_len": bad}, timeout_s=120)
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EngineError, match="forced_accept_len needs a drafter"):
        run_worker({**req, "drafter": None, "k": 0, "forced_accept_len": 1.5}, timeout_s=120)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                                     max_size=3), max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(runs=json_values | st.lists(st.floats(0, 5) | st.integers(0, 5), max_size=3))
def test_hostile_measured_taus_are_read_or_refused_in_one_line(runs):
    """The worker's ``tau_runs`` for 2 repeats at k 2: two finite τ in [1, 3], else one EngineError line."""
    try:
        taus = _measured_taus({"tau_runs": runs}, 2, 2)
    except EngineError as exc:
        assert "\n" not in str(exc) and "tau_runs" in str(exc)
    else:
        assert len(taus) == 2 and all(isinstance(t, float) and 1 <= t <= 3 for t in taus)
