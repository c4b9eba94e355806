"""Issue #13: hostile inputs to the metadata commands exit 0 with valid output or 2 with one line; never a
traceback, a hang, or garbage accepted as valid.

One property test per category of :mod:`tests.fuzzing` (bounded, derandomized, no shrinking unless
``EAGLELAB_FUZZ_SHRINK=1``), then one named test per class of input the issue lists, then checks of the
harness itself. ``python benchmarks/fuzz.py`` runs the same strategies at scale and prints a table.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests import fuzzing as fz
from tests import tiers
from tests.fuzzing import DRAFT_VOCAB, Raw, digits, nested_lists, nested_objects

PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("EAGLELAB_FUZZ_SHRINK") else [])
FUZZ = dict(derandomize=True, deadline=None, database=None, phases=PHASES,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                   HealthCheck.data_too_large, HealthCheck.large_base_example,
                                   HealthCheck.filter_too_much])


def accepted(case: fz.Case, cap: float = fz.TIME_CAP_S) -> fz.Outcome:
    """Run the case; fail unless it exited 0 with valid output or 2 with one line, as its oracle allows."""
    outcome = fz.check(case, cap)
    assert outcome.acceptable, fz.describe(case, outcome)
    return outcome


def refused(case: fz.Case, cap: float = fz.TIME_CAP_S) -> fz.Outcome:
    """Like :func:`accepted`, and the input must be refused outright (exit 2, one line)."""
    outcome = accepted(case, cap)
    assert outcome.kind == "error", fz.describe(case, outcome)
    return outcome


def header(tmp_path, *ops, mode="inspect", fmt="specforge") -> fz.Case:
    return fz.header_case(fz.new_dir(tmp_path, "header"), list(ops), mode, fmt)


def config(tmp_path, key, value, fmt="specforge", mode="inspect", json_flag=False) -> fz.Case:
    folder = fz.new_dir(tmp_path, "config")
    drafter = fz.write_tiny_drafter(folder / "drafter", fmt,
                                    config=fz.dump(fz.set_config_field(fz.tiny_config(fmt), key, value, fmt)))
    oracle, why = fz.config_field_oracle(key, value, fmt)
    argv = ["inspect", str(drafter)]
    if mode == "compare":
        argv = ["compare", str(fz.write_tiny_drafter(folder / "base", fmt)), str(drafter)]
    return fz.Case("config", f"{fmt} {key} = {value!r}"[:120], argv + (["--json"] if json_flag else []), oracle, folder,
                   listed=fz.inspect_listed, note=why)


def target(tmp_path, key, value, json_flag=False, layout="flat") -> fz.Case:
    folder = fz.new_dir(tmp_path, "target")
    drafter = fz.write_tiny_drafter(folder / "drafter")
    (folder / "target.json").write_bytes(fz.dump(fz.target_config(key, value, layout)))
    ok, _ = fz.python_json(value)
    argv = ["compare", str(drafter), str(drafter), "--new-target", str(folder / "target.json")]
    return fz.Case("config", f"target {key} = {value!r}"[:120], argv + (["--json"] if json_flag else []),
                   "any" if ok else "invalid", folder, listed=fz.inspect_listed)


def log(tmp_path, *lines, mode="perf-json") -> fz.Case:
    return fz.log_case(fz.new_dir(tmp_path, "log"), list(lines), mode)


def args(tmp_path, cmd, *pairs, extra=(), json_flag=True) -> fz.Case:
    given_ = {flag: (None if value is None else value.split(" ") if flag in fz.PAIRS or (cmd, flag) in fz.MULTI
                     else [value]) for flag, value in pairs}
    folder = fz.new_dir(tmp_path, "args") if cmd == "predict" else None
    return fz.args_case(folder, cmd, given_, list(extra), json_flag=json_flag)


def special(tmp_path, kind, place, json_flag=False) -> fz.Case:
    return fz.special_case(fz.new_dir(tmp_path, "special"), kind, place, json_flag)


def sglang(accept="2.19", tps="258.07", req="1") -> str:
    return fz.SGLANG_OLD.format(req=req, accept=accept, tps=tps)


def sglang_new(accept="1.87", rate="0.29", tps="190.50", req="4") -> str:
    return fz.SGLANG_NEW.format(req=req, accept=accept, rate=rate, tps=tps)


def vllm(accept="2.05", tps="33.10", pos="0.500, 0.330, 0.220", rate="35.0") -> str:
    return fz.VLLM.format(accept=accept, tps=tps, pos=pos, rate=rate)


# --------------------------------------------------------------------------- the property tests, one per category


@settings(max_examples=80, **FUZZ)
@given(data=st.data())
def test_fuzz_header(tmp_path, data):
    case = data.draw(fz.header_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@settings(max_examples=80, **FUZZ)
@given(data=st.data())
def test_fuzz_config(tmp_path, data):
    case = data.draw(fz.config_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@settings(max_examples=60, **FUZZ)
@given(data=st.data())
def test_fuzz_index(tmp_path, data):
    case = data.draw(fz.index_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@settings(max_examples=60, **FUZZ)
@given(data=st.data())
def test_fuzz_log(tmp_path, data):
    case = data.draw(fz.log_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@settings(max_examples=80, **FUZZ)
@given(data=st.data())
def test_fuzz_args(tmp_path, data):
    case = data.draw(fz.args_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@settings(max_examples=40, **FUZZ)
@given(data=st.data())
def test_fuzz_special(tmp_path, data):
    case = data.draw(fz.special_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@settings(max_examples=60, **FUZZ)
@given(data=st.data())
def test_fuzz_targets(tmp_path, data):
    case = data.draw(fz.targets_cases(tmp_path), label="case")
    outcome = fz.check(case)
    assert outcome.acceptable, fz.describe(case, outcome)


@pytest.mark.parametrize("template", fz.HOSTILE_TEMPLATES)
def test_hostile_templates_are_findings(tmp_path, template):
    """A chat template is someone else's program: any of these renders, or is named as failing, within the cap."""
    case = fz.targets_case(fz.new_dir(tmp_path, "targets"), "chat_template.jinja", template.encode(), json_flag=True)
    outcome = accepted(case)
    assert outcome.kind == "ok", fz.describe(case, outcome)
    templates = json.loads(outcome.stdout)["templates"]
    assert templates["rendered"][1] is not None or templates["problems"][1], templates


# --------------------------------------------------------------------------- the write side and files read back (#31)


@pytest.mark.parametrize("category, examples", [("param", 60), ("out", 60), ("recipe", 60), ("readback", 60),
                                                ("worker", 80), ("picker", 25), ("dump", 80)])
def test_fuzz_write_side(tmp_path, category, examples):
    from tests import fuzzing_write as fw

    strategy = fw.STRATEGIES[category](tmp_path)

    @settings(max_examples=tiers.examples(examples), **FUZZ)
    @given(data=st.data())
    def body(data):
        case = data.draw(strategy, label="case")
        outcome = fz.check(case, max(fz.TIME_CAP_S, fw.TIME_CAPS.get(category, 0.0)))
        assert outcome.acceptable, fz.describe(case, outcome)

    body()


@pytest.mark.parametrize("category, examples", [("plan", 60), ("loadrecipe", 100), ("costs", 100)])
def test_fuzz_round_four(tmp_path, category, examples):
    """Issue #53's surfaces: game plans from hostile findings, load recipes with hostile values, hostile cost tables."""
    from tests import fuzzing_plans as fp

    strategy = fp.STRATEGIES[category](tmp_path)

    @settings(max_examples=tiers.examples(examples), **FUZZ)
    @given(data=st.data())
    def body(data):
        case = data.draw(strategy, label="case")
        outcome = fz.check(case, max(fz.TIME_CAP_S, fp.TIME_CAPS.get(category, 0.0)))
        assert outcome.acceptable, fz.describe(case, outcome)

    body()


def test_fuzz_hub(tmp_path):
    """Every way the hub misbehaves here (trickle, huge or lying bodies, garbage, errors): one line within the deadline."""
    from tests import fuzzing_write as fw

    with fw.hub_for_fuzzing(tmp_path, deadline_s=1.0) as hub:
        for kind in fw.HUB_FAULTS:
            case = fw.hub_case(tmp_path, hub, kind)
            outcome = fz.check(case, 3.0)
            assert outcome.kind == "error", fz.describe(case, outcome)



# --------------------------------------------------------------------------- the starting points are clean


@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
def test_base_drafter_is_clean(tmp_path, fmt):
    """Every mutation is judged against a drafter with no problem of its own: any problem listed is the mutation's."""
    case = header(tmp_path, ("metadata", {"format": "pt"}), mode="inspect-json", fmt=fmt)
    assert case.oracle == "valid", case.note
    out = accepted(case)
    assert out.kind == "ok" and out.json["problems"] == [] and out.json["computed"] is True, fz.describe(case, out)
    sharded = fz.write_sharded_drafter(tmp_path / f"sharded-{fmt}")
    assert fz.run_cli(["inspect", str(sharded)]).stdout.count("problems: none") == 1


def test_the_oracle_is_the_safetensors_library(tmp_path):
    assert header(tmp_path, ("padding", "suffix", b"    ")).oracle == "valid"
    assert header(tmp_path, ("trailing", 8)).oracle == "invalid"
    assert header(tmp_path, ("metadata", {"a": 1})).oracle == "invalid"
    assert header(tmp_path, ("vocab_shape", "d2t", [1] * 33)).oracle == "valid"


# --------------------------------------------------------------------------- header: wrong JSON types (tracebacks)


@pytest.mark.parametrize("value", [5, ["F32"], None, {"a": 1}, True, 1.5, Raw(b"NaN")], ids=repr)
def test_dtype_not_a_string(tmp_path, value):
    refused(header(tmp_path, ("field", 1, "dtype", value)))


@pytest.mark.parametrize("value", ["2", 2, [2.0], [True], [-1], [None], {"0": 2}, [[2]], [Raw(b"1e400")], [2 ** 64]],
                         ids=repr)
def test_shape_wrong_json_types(tmp_path, value):
    refused(header(tmp_path, ("field", 1, "shape", value), mode="inspect-json"))


@pytest.mark.parametrize("value", ["0,8", [0], [0, 8, 9], [0.0, 8.0], [True, 8], {"b": 0}, None, [-8, 0], [8, 0]],
                         ids=repr)
def test_data_offsets_wrong_json_types(tmp_path, value):
    refused(header(tmp_path, ("field", 1, "data_offsets", value)))


@pytest.mark.parametrize("value", [-1, 2 ** 64, 2 ** 63, 2.5, True, 10 ** 30, "16"], ids=repr)
def test_negative_huge_float_bool_sizes(tmp_path, value):
    refused(header(tmp_path, ("dim", 1, 0, value)))


@pytest.mark.parametrize("n", [4000, 5000, 20000])
def test_thousand_digit_integer(tmp_path, n):
    refused(header(tmp_path, ("dim", 1, 0, digits(n))))
    refused(header(tmp_path, ("offset", 2, 1, digits(n)), mode="inspect-json"))
    refused(config(tmp_path, "hidden_size", digits(n)))
    accepted(config(tmp_path, "rope_theta", digits(n)))
    accepted(target(tmp_path, "num_hidden_layers", digits(n)))
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("value", 0, digits(n))))


def test_hundreds_of_digits_where_a_float_is_read(tmp_path):
    """A 400-digit integer is JSON and a Python int, but float() of it overflows."""
    for key in ("rope_theta", "rms_norm_eps", "max_position_embeddings", "hidden_size"):
        accepted(config(tmp_path, key, digits(400), mode="compare", json_flag=True))
    accepted(target(tmp_path, "rope_theta", digits(400), json_flag=True))


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json(tmp_path, depth):
    refused(header(tmp_path, ("whole", nested_lists(depth))))
    refused(header(tmp_path, ("metadata", nested_lists(depth))))
    refused(header(tmp_path, ("extra_entry", nested_objects(depth))))
    refused(config(tmp_path, "hidden_size", nested_lists(depth)))
    accepted(config(tmp_path, "rope_scaling", {"factor": nested_lists(depth)}, json_flag=True))
    accepted(config(tmp_path, "architectures", nested_objects(depth), mode="compare"))
    accepted(target(tmp_path, "text_config", nested_objects(depth)))
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("weight_map", nested_lists(depth))))


@pytest.mark.parametrize("dtype", ["F128", "f32", "", "BF16 ", "int8", "C128", "\ud800"], ids=repr)
def test_unknown_dtype(tmp_path, dtype):
    refused(header(tmp_path, ("dtype", 1, dtype)))


@pytest.mark.parametrize("dtype", ["F4", "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "C64", "U16",
                                   "U32"])
def test_new_safetensors_dtypes_are_read(tmp_path, dtype):
    """safetensors 0.8.0 reads these: refusing the file is wrong (a dtype problem against the drafter is fine)."""
    case = header(tmp_path, ("dtype", 1, dtype))
    assert case.oracle == "valid", case.note
    accepted(case)


@pytest.mark.parametrize("shape", [[1] * 33, [0, 2 ** 63], [0, 2 ** 64 - 1], [0, 2 ** 62, 2 ** 62], [DRAFT_VOCAB, 1], [],
                                   [2, DRAFT_VOCAB // 2]], ids=repr)
@pytest.mark.parametrize("which", ["d2t", "t2d"])
def test_vocab_map_shape_numpy_refuses(tmp_path, which, shape):
    case = header(tmp_path, ("vocab_shape", which, shape), mode="inspect-json")
    out = accepted(case)
    if out.kind == "ok":
        assert out.json["problems"], fz.describe(case, out)


@pytest.mark.parametrize("shape", [[1] * 33, [0, 2 ** 63], [DRAFT_VOCAB, 1]], ids=repr)
def test_vocab_map_shapes_in_compare(tmp_path, shape):
    accepted(header(tmp_path, ("vocab_shape", "d2t", shape), mode="compare-json"))
    accepted(header(tmp_path, ("vocab_shape", "t2d", shape), mode="compare"))


# --------------------------------------------------------------------------- header: garbage accepted as valid


@pytest.mark.parametrize("metadata", [{"a": 1}, "x", [], {"a": None}, {"a": {"b": "c"}}, {"a": ["x"]}, {"a": True}],
                         ids=repr)
def test_metadata_not_str_map_is_a_problem(tmp_path, metadata):
    case = header(tmp_path, ("metadata", metadata))
    assert case.oracle == "invalid", case.note
    accepted(case)
    accepted(header(tmp_path, ("metadata", metadata), mode="inspect-json"))


@pytest.mark.parametrize("n", [1, 8, 64])
def test_bytes_after_last_tensor(tmp_path, n):
    case = header(tmp_path, ("trailing", n))
    assert case.oracle == "invalid", case.note
    accepted(case)
    accepted(header(tmp_path, ("trailing", n), mode="compare-json"))


@pytest.mark.parametrize("where", [0, 5, 15])
def test_gap_between_tensors(tmp_path, where):
    case = header(tmp_path, ("gap", where, 8))
    assert case.oracle == "invalid", case.note
    accepted(case)


@pytest.mark.parametrize("back", [1, 8, 64])
def test_overlapping_spans(tmp_path, back):
    accepted(header(tmp_path, ("overlap", 3, back)))


def test_duplicate_metadata_key(tmp_path):
    case = header(tmp_path, ("duplicate", 0, True))
    assert case.oracle == "invalid", case.note
    accepted(case)


@pytest.mark.parametrize("how", ["+1", "+8", "-1", "0", "file", "2^63", "2^64-1", "100MB+1"])
def test_header_length_field(tmp_path, how):
    accepted(header(tmp_path, ("length", how)))


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.1, 0.5, 0.999])
def test_truncated_file(tmp_path, fraction):
    refused(header(tmp_path, ("truncate", fraction)))


@pytest.mark.parametrize("raw", [Raw(b"[]"), Raw(b'"x"'), Raw(b"1"), Raw(b"null"), Raw(b""), Raw(b"{"), Raw(b"NaN"),
                                 Raw(b"\xef\xbb\xbf{}")], ids=repr)
def test_header_not_an_object(tmp_path, raw):
    refused(header(tmp_path, ("whole", raw)))


def test_non_utf8_header_bytes(tmp_path):
    refused(header(tmp_path, ("rename", 1, Raw(b'"\xff\xfe"'))))
    refused(header(tmp_path, ("rename", 1, Raw(b'"\xed\xa0\x80"'))))  # a surrogate encoded as UTF-8
    refused(header(tmp_path, ("padding", "suffix", b"\xff")))


@pytest.mark.parametrize("mode", ["inspect", "inspect-json", "compare", "compare-json"])
@pytest.mark.parametrize("name", ["\ud800", "\udcff", Raw(b'"\\ud800\\ud800"')], ids=repr)
def test_non_utf8_tensor_name_printed(tmp_path, name, mode):
    """A lone surrogate (escaped in the JSON) is no UTF-8 text: printing it on a UTF-8 terminal must not crash."""
    case = header(tmp_path, ("rename", 1, name), mode=mode)
    assert case.oracle == "invalid", case.note  # safetensors: "unexpected end of hex escape"
    accepted(case)


@pytest.mark.parametrize("name", ["a\x01b", "new\nline", "tab\tname", "x" * 300, "y" * 100_000, "\U0001f600", "",
                                  "\u202eevil"], ids=lambda n: repr(n[:20]))
def test_control_chars_and_long_tensor_names(tmp_path, name):
    for mode in ("inspect", "inspect-json"):
        accepted(header(tmp_path, ("rename", 1, name), mode=mode))


@pytest.mark.parametrize("pad", [(b"suffix", b"       "), (b"prefix", b"  "), (b"suffix", b"\t\r\n ")], ids=repr)
def test_header_padding_with_spaces_is_valid(tmp_path, pad):
    case = header(tmp_path, ("padding", pad[0].decode(), pad[1]), mode="inspect-json")
    assert case.oracle == "valid", case.note
    out = accepted(case)
    assert out.kind == "ok" and out.json["problems"] == [], fz.describe(case, out)


# --------------------------------------------------------------------------- config.json: wrong JSON types


@pytest.mark.parametrize("value", ["x", [1, 3, 4], 5, True, Raw(b"NaN")], ids=repr)
def test_eagle_config_not_an_object(tmp_path, value):
    for json_flag in (False, True):
        accepted(config(tmp_path, "eagle_config", value, json_flag=json_flag))


@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
@pytest.mark.parametrize("value", ["1,3,4", "[1, 3, 4]", "134", ""], ids=repr)
def test_aux_ids_as_string_not_coerced(tmp_path, fmt, value):
    case = config(tmp_path, "aux_ids", value, fmt, json_flag=True)
    assert case.oracle == "invalid"
    accepted(case)
    accepted(config(tmp_path, "aux_ids", value, fmt, mode="compare"))


@pytest.mark.parametrize("fmt", ["specforge", "speculators"])
@pytest.mark.parametrize("value", [[1.0, 3.0, 4.0], [True, False, True], [1, 3, 4.5], ["1", "3", "4"], [1, 3, -4],
                                   [[1], [3], [4]], 1.0, True, False, 0, {}], ids=repr)
def test_aux_ids_floats_or_bools_not_coerced(tmp_path, fmt, value):
    case = config(tmp_path, "aux_ids", value, fmt, json_flag=True)
    assert case.oracle == "invalid"
    accepted(case)


@pytest.mark.parametrize("value", ["1e-6", [1e-6], True, None, Raw(b"NaN"), Raw(b"1e400"), 0, -1e-6, 1.5, {"eps": 1e-6}],
                         ids=repr)
def test_rms_norm_eps_wrong_type(tmp_path, value):
    for fmt in ("specforge", "speculators"):
        accepted(config(tmp_path, "rms_norm_eps", value, fmt))


@pytest.mark.parametrize("value", ["LlamaForCausalLMEagle3", 5, [5], {"a": 1}, None, [None], [["Eagle3"]], [Raw(b"NaN")]],
                         ids=repr)
def test_architectures_wrong_type(tmp_path, value):
    for fmt in ("specforge", "speculators"):
        accepted(config(tmp_path, "architectures", value, fmt, json_flag=True))
        accepted(config(tmp_path, "architectures", value, fmt, mode="compare"))
    accepted(target(tmp_path, "architectures", value))


@pytest.mark.parametrize("value", ["x", [], 5, None, {"num_hidden_layers": "8"}, {"num_hidden_layers": 10 ** 30},
                                   {"text_config": []}, {"hidden_size": "16", "vocab_size": [64]}], ids=repr)
def test_text_config_wrong_type(tmp_path, value):
    """A multimodal target keeps its text model's fields under text_config only: there garbage is read."""
    for key in ("text_config", "language_config"):
        for layout in ("flat", "multimodal"):
            accepted(target(tmp_path, key, value, layout=layout))
            accepted(target(tmp_path, key, value, json_flag=True, layout=layout))
    accepted(config(tmp_path, "text_config", value, json_flag=True))


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "vocab_size", "max_position_embeddings",
                                 "rope_scaling", "num_attention_heads"])
@pytest.mark.parametrize("value", ["8", 8.5, None, [8], {"a": 1}, -1, 10 ** 30, digits(400)], ids=repr)
def test_multimodal_target_fields_wrong_types(tmp_path, key, value):
    accepted(target(tmp_path, key, value, json_flag=True, layout="multimodal"))


@pytest.mark.parametrize("value", ["4096", "big", 4096.5, [4096], -1, Raw(b"Infinity")], ids=repr)
def test_max_position_embeddings_as_string(tmp_path, value):
    for fmt in ("specforge", "speculators"):
        accepted(config(tmp_path, "max_position_embeddings", value, fmt))
        accepted(config(tmp_path, "max_position_embeddings", value, fmt, mode="compare", json_flag=True))
    accepted(target(tmp_path, "max_position_embeddings", value))
    accepted(target(tmp_path, "max_position_embeddings", value, layout="multimodal"))


@pytest.mark.parametrize("key", fz.SIZE_REQUIRED + fz.SIZE_OPTIONAL)
@pytest.mark.parametrize("value", ["16", 16.0, True, -16, 0, [16], 16.5], ids=repr)
def test_size_fields_wrong_types(tmp_path, key, value):
    for fmt in ("specforge", "speculators"):
        case = config(tmp_path, key, value, fmt)
        assert case.oracle == "invalid"
        accepted(case)


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads"])
@pytest.mark.parametrize("value", ["8", 8.0, -1, 0, 10 ** 30, [8], None], ids=repr)
def test_target_fields_wrong_types(tmp_path, key, value):
    accepted(target(tmp_path, key, value, json_flag=True))


@pytest.mark.parametrize("value", ["x", [], None, 5, {}, {"hidden_size": "16"}, {"model_type": 5}], ids=repr)
def test_speculators_layout_garbage(tmp_path, value):
    accepted(config(tmp_path, "transformer_layer_config", value, "speculators"))
    accepted(config(tmp_path, "speculators_config", value, "speculators", json_flag=True))


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
@pytest.mark.parametrize("value", ["yarn", {"rope_type": 5}, {"rope_type": "yarn", "factor": "4"}, [], 5,
                                   {"rope_type": "llama3", "factor": Raw(b"NaN"), "original_max_position_embeddings": "x"},
                                   {"rope_theta": "1e4"}, {"type": None}], ids=repr)
def test_rope_garbage(tmp_path, key, value):
    for fmt in ("specforge", "speculators"):
        accepted(config(tmp_path, key, value, fmt, json_flag=True))
    accepted(target(tmp_path, key, value))


@pytest.mark.parametrize("raw, oracle", fz.WHOLE_CONFIGS, ids=lambda v: repr(v)[:30])
def test_config_not_a_drafter_object(tmp_path, raw, oracle):
    folder = fz.new_dir(tmp_path, "config")
    drafter = fz.write_tiny_drafter(folder / "drafter", config=raw)
    accepted(fz.Case("config", f"config.json = {raw[:30]!r}", ["inspect", str(drafter)], oracle, folder,
                     listed=fz.inspect_listed))


# --------------------------------------------------------------------------- index


@pytest.mark.parametrize("value", [[], "x", 1, None, True, {}, ["a", "b"]], ids=repr)
def test_weight_map_not_a_dict(tmp_path, value):
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("weight_map", value)))


@pytest.mark.parametrize("value", [1, None, [], {}, True, 1.5, "", ".", "/", "sub", "config.json", "\ud800", "x" * 300],
                         ids=repr)
def test_weight_map_values_not_shard_files(tmp_path, value):
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("value", 0, value)))
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("value", 3, value), mode="index-file-json"))


@pytest.mark.parametrize("how", ["dotdot", "nested-dotdot", "absolute", "symlink", "dotdot-valid", "absolute-valid",
                                 "symlink-valid"])
def test_index_outside_folder_not_followed(tmp_path, how):
    """A shard outside the checkpoint folder is refused outright, and nothing read from it is printed."""
    for mode in ("inspect", "index-file-json"):
        out = refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("outside", how), mode))
        assert fz.SECRET_NUMBER not in out.stderr and "12345678" not in out.stderr


@pytest.mark.parametrize("how", ["named", "deleted"])
def test_missing_shard(tmp_path, how):
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("missing_shard", how)))


def test_tensor_in_two_shards(tmp_path):
    accepted(fz.index_case(fz.new_dir(tmp_path, "index"), ("duplicate_tensor",)))


@pytest.mark.parametrize("op", ["wrong_shard", "ghost"])
def test_weight_map_names_tensor_not_in_shard(tmp_path, op):
    accepted(fz.index_case(fz.new_dir(tmp_path, "index"), (op,), "inspect-json"))
    accepted(fz.index_case(fz.new_dir(tmp_path, "index"), (op,), "inspect"))


def test_weight_map_path_with_nul(tmp_path):
    refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("value", 0, "model.safetensors\x00x")))


def test_index_file_not_json(tmp_path):
    for raw in (b"", b"[]", b"{", b"\xff{}", b'{"weight_map": {"a": "' + b"1" * 5000 + b'"}}'):
        refused(fz.index_case(fz.new_dir(tmp_path, "index"), ("whole", raw)))


# --------------------------------------------------------------------------- logs


IMPOSSIBLE_LINES = {
    "sglang tau 0.5": sglang(accept="0.5"), "sglang tau 0": sglang(accept="0"), "sglang tau -1": sglang(accept="-1"),
    "sglang tau nan": sglang(accept="nan"), "sglang tau inf": sglang(accept="inf"),
    "sglang tau 1e400": sglang(accept="1e400"), "sglang tau 5000 digits": sglang(accept="9" * 5000),
    "sglang negative throughput": sglang(tps="-1"), "sglang throughput nan": sglang(tps="nan"),
    "sglang rate 1.5": sglang_new(rate="1.5"), "sglang negative rate": sglang_new(rate="-0.1"),
    "sglang negative batch": sglang(req="-1"),
    "vllm tau 0.5": vllm(accept="0.5", pos="0"), "vllm rate 150%": vllm(rate="150.0"),
    "vllm negative rate": vllm(rate="-5"), "vllm per-position 1.5": vllm(pos="0.5, 1.5, 0.2", accept="3.20"),
    "vllm per-position negative": vllm(pos="-0.1, 0.3", accept="1.20"), "vllm per-position nan": vllm(pos="nan, 0.5"),
    "vllm negative throughput": vllm(tps="-33.1"), "vllm tau inf": vllm(accept="inf"),
}


@pytest.mark.parametrize("name", IMPOSSIBLE_LINES)
def test_impossible_log_values_rejected(tmp_path, name):
    """An impossible value makes its line malformed: alone, the log has no metrics (exit 2); beside a valid line,
    only that line is a record."""
    bad = (IMPOSSIBLE_LINES[name], "invalid", {})
    refused(log(tmp_path, bad))
    out = accepted(log(tmp_path, bad, (sglang(), "valid", {"accept_len": 2.19})))
    assert out.kind == "ok" and [r["line_no"] for r in out.json["records"]] == [2], fz.describe(log(tmp_path, bad), out)
    refused(log(tmp_path, bad, mode="plan-json"))


def test_valid_log_lines_parse(tmp_path):
    lines = [(sglang(), "valid", {"accept_len": 2.19}), (sglang_new(), "valid", {"accept_len": 1.87}),
             (vllm(), "valid", {"accept_len": 2.05})]
    out = accepted(log(tmp_path, *lines))
    assert out.kind == "ok" and len(out.json["records"]) == 3
    assert accepted(log(tmp_path, *lines, mode="perf")).kind == "ok"


def test_one_long_log_line_linear(tmp_path):
    """A 1 MB line (no time asserted: the harness's cap is the hang check) and the valid line after it."""
    valid = (sglang(), "valid", {"accept_len": 2.19})
    for filler in ("Decode batch. ", "Decode batch[", "SpecDecoding metrics: ", "accept len: ", "x"):
        long_line = (filler * (1_000_000 // len(filler)), "any", {})
        accepted(log(tmp_path, long_line, valid), cap=20.0)
    accepted(log(tmp_path, (sglang() + " " + "y" * 1_000_000, "valid", {"accept_len": 2.19})), cap=20.0)
    # 200001 per-position rates: more than any draft length, so either answer; in linear time
    accepted(log(tmp_path, (vllm(pos="0.5, 0.3, " * 100_000 + "0.1", accept="80001.10"), "any", {}), valid), cap=20.0)


def test_binary_garbage_and_empty_logs(tmp_path):
    refused(log(tmp_path))  # empty file
    folder = fz.new_dir(tmp_path, "log")
    (folder / "bin.log").write_bytes(bytes(range(256)) * 64)
    refused(fz.Case("log", "binary", ["perf", "--log", str(folder / "bin.log"), "--json"], "invalid", folder))
    (folder / "mixed.log").write_bytes(bytes(range(256)) + b"\n" + sglang().encode() + b"\n\x00\xff\n")
    out = accepted(fz.Case("log", "binary + valid", ["perf", "--log", str(folder / "mixed.log"), "--json"], "valid",
                           folder))
    assert len(out.json["records"]) == 1


# --------------------------------------------------------------------------- command-line numbers


@pytest.mark.parametrize("cmd_pairs", [
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "0.5")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "0")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "-2.5")]),
    ("plan", [("--accept-len", "0.5")]),
    ("predict", [("--accept-len", "0.5"), ("--k", "3")]),
], ids=lambda v: f"{v[0]}")
def test_accept_len_below_one_arg(tmp_path, cmd_pairs):
    cmd, pairs = cmd_pairs
    case = args(tmp_path, cmd, *pairs)
    assert case.oracle == "invalid"
    refused(case)
    refused(args(tmp_path, cmd, *pairs, json_flag=False))


IMPOSSIBLE_ARGS = [
    ("perf", [("--baseline-tps", "0"), ("--cycle-ms", "30"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "-1"), ("--cycle-ms", "30"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "0"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "-0"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "nan"), ("--cycle-ms", "30"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "inf"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "1e309")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "9" * 5000)]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "2"), ("--goal-tps", "-150")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "2"), ("--goal-tps", "nan")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30")]),
    ("plan", [("--k", "0")]), ("plan", [("--transfer", "0.1 1.5")]), ("plan", [("--exponent", "0 0.3")]),
    ("plan", [("--budgets", "-1")]), ("plan", [("--accept-len", "9")]), ("plan", [("--plugin-tau", "0.5")]),
    ("plan", [("--gen-tps", "nan")]), ("plan", [("--samples", "-5")]), ("plan", [("--old-samples", "-1")]),
    ("plan", [("--tokens-per-sample", "0")]), ("plan", [("--baseline-tps", "1e309")]),
    ("predict", [("--chain", "0.5,0.7")]), ("predict", [("--chain", "1.5")]), ("predict", [("--chain", "nan")]),
    ("predict", [("--accept-len", "2"), ("--k", "0")]), ("predict", [("--accept-len", "9"), ("--k", "3")]),
    ("predict", [("--chain", "0.5"), ("--cycle-ms", "0")]), ("predict", [("--chain", "0.5"), ("--baseline-tps", "-1")]),
    ("predict", [("--chain", "0.5"), ("--cycle-ms", "nan")]), ("predict", []),
]


@pytest.mark.parametrize("cmd_pairs", IMPOSSIBLE_ARGS, ids=lambda v: f"{v[0]} {' '.join(f'{a}={b[:8]}' for a, b in v[1])}")
def test_impossible_arguments(tmp_path, cmd_pairs):
    cmd, pairs = cmd_pairs
    case = args(tmp_path, cmd, *pairs)
    assert case.oracle == "invalid", case.note
    refused(case)


@pytest.mark.parametrize("cmd_pairs", [
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "2.0"), ("--goal-tps", "150 200")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "1")]),
    ("plan", []), ("plan", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "2.0"), ("--k", "4")]),
    ("predict", [("--chain", "0.8,0.6,0.45")]), ("predict", [("--accept-len", "2.2"), ("--k", "3")]),
], ids=lambda v: v[0])
def test_valid_arguments_give_finite_json(tmp_path, cmd_pairs):
    cmd, pairs = cmd_pairs
    case = args(tmp_path, cmd, *pairs)
    assert case.oracle == "valid", case.note
    out = accepted(case)
    assert out.kind == "ok"


@pytest.mark.parametrize("cmd_pairs", [
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "1e-320"), ("--accept-len", "2")]),
    ("perf", [("--baseline-tps", "1e-320"), ("--cycle-ms", "30"), ("--accept-len", "1e308")]),
    ("perf", [("--baseline-tps", "82"), ("--cycle-ms", "30"), ("--accept-len", "2"), ("--goal-tps", "1e308")]),
    ("plan", [("--goal-tps", "1e300")]), ("plan", [("--goal-tps", "1e-300")]),
    ("plan", [("--samples", "1e-300"), ("--gen-tps", "1e-300")]), ("plan", [("--budgets", "1e300")]),
    ("plan", [("--exponent", "1e-300 1e300")]),
    ("predict", [("--chain", "0.5"), ("--cycle-ms", "1e-320")]),
], ids=lambda v: f"{v[0]} {' '.join(f'{a}={b}' for a, b in v[1])}")
def test_json_output_has_no_nan(tmp_path, cmd_pairs):
    """Extreme but finite inputs: whatever the answer, --json stays strict JSON (no NaN / Infinity)."""
    cmd, pairs = cmd_pairs
    accepted(args(tmp_path, cmd, *pairs))


def test_json_output_of_a_log_has_no_nan(tmp_path):
    out = accepted(log(tmp_path, (sglang(tps="1e308"), "any", {}), (sglang(tps="1e308"), "any", {})))
    if out.kind == "ok":
        assert "NaN" not in out.stdout and "Infinity" not in out.stdout


@pytest.mark.parametrize("argv", [
    ["perf", "--bogus"], ["perf", "--accept-len"], ["perf", "--accept-len", "abc"], ["perf", "--accept-len", ""],
    [], ["nonexistent-cmd"], ["inspect"], ["compare", "a"], ["plan", "--k", "1.5"], ["predict"],
    ["plan", "--verify-model", "x"], ["perf", "--goal-tps"], ["inspect", "a", "b", "c"], ["--json"],
    ["perf", "--accept-len", "-inf"], ["plan", "--exponent", "0.1"],
], ids=lambda a: " ".join(a) or "no-args")
def test_argparse_error_one_line(argv):
    case = fz.Case("args", " ".join(argv), argv, "invalid")
    out = refused(case)
    assert out.stderr.endswith("--help)\n") and out.stderr.count("\n") == 1, fz.describe(case, out)


# --------------------------------------------------------------------------- special files


@pytest.mark.parametrize("place", fz.SPECIAL_PLACES)
def test_fifo_does_not_block(tmp_path, place):
    refused(special(tmp_path, "fifo", place))


@pytest.mark.parametrize("place", fz.SPECIAL_PLACES)
def test_symlink_loop(tmp_path, place):
    refused(special(tmp_path, "loop", place, json_flag=True))


@pytest.mark.parametrize("place", fz.SPECIAL_PLACES)
def test_directory_where_file_expected(tmp_path, place):
    refused(special(tmp_path, "dir", place))


@pytest.mark.parametrize("kind", ["long-component", "long-path"])
@pytest.mark.parametrize("place", ["source", "log", "target", "predict-old", "compare-b", "weights"])
def test_long_name(tmp_path, kind, place):
    refused(special(tmp_path, kind, place))


@pytest.mark.parametrize("kind", ["dev-zero", "dev-urandom", "dev-null"])
@pytest.mark.parametrize("place", ["source", "config", "weights", "index", "shard", "log", "target", "predict-old"])
def test_special_device_files(tmp_path, kind, place):
    refused(special(tmp_path, kind, place))


@pytest.mark.parametrize("place", ["source", "log", "target", "predict-old", "compare-b"])
def test_path_with_nul_byte(tmp_path, place):
    refused(special(tmp_path, "nul", place))


@pytest.mark.parametrize("place", fz.SPECIAL_PLACES)
def test_empty_files(tmp_path, place):
    refused(special(tmp_path, "empty", place))


@pytest.mark.parametrize("place", fz.SPECIAL_PLACES)
def test_unreadable_file(tmp_path, place):
    """We run as root, so chmod 000 does not stop a read: a symlink to /proc/self/mem (EIO at offset 0) stands in."""
    refused(special(tmp_path, "unreadable", place))


@pytest.mark.parametrize("json_flag", [False, True])
@pytest.mark.parametrize("place", ["source", "log"])
def test_non_utf8_file_name_printed(tmp_path, place, json_flag):
    """A file name that is not UTF-8 (surrogate-escaped by Python) names a valid input: it must work and print."""
    out = accepted(special(tmp_path, "non-utf8-name", place, json_flag))
    assert out.kind == "ok"


def test_newline_in_file_name(tmp_path):
    accepted(special(tmp_path, "newline-name", "source"))
    missing = str(tmp_path / "no\nsuch.log")
    refused(fz.Case("special", "missing log with a newline in its name", ["perf", "--log", missing], "invalid"))
    refused(fz.Case("special", "missing source with a newline in its name", ["inspect", str(tmp_path / "a\nb")],
                    "invalid"))


# --------------------------------------------------------------------------- the harness itself


def fake(body):
    def main(argv):
        return body(argv)
    return main


def test_harness_classifies_outcomes():
    def ok_json(argv):
        print(json.dumps({"x": 1}))
        return 0

    def nan_json(argv):
        print('{"x": NaN}')
        return 0

    def boom(argv):
        {}["missing"]

    def two_lines(argv):
        import sys

        print("eaglelab perf: error: a: b\nmore", file=sys.stderr)
        return 2

    def one_line(argv):
        import sys

        print("eaglelab perf: error: --accept-len: must be >= 1", file=sys.stderr)
        return 2

    def surrogate(argv):
        print("tensor \ud800")
        return 0

    def slow(argv):
        time.sleep(5)
        return 0

    def swallow(argv):
        try:
            time.sleep(5)
        except Exception:  # the cap is a BaseException: this does not catch it
            return 0
        return 0

    def exits(argv):
        raise SystemExit(2)

    assert fz.run_cli(["--json"], main=fake(ok_json)).kind == "ok"
    assert fz.run_cli(["--json"], main=fake(nan_json)).kind == "bad-output"
    tb = fz.run_cli([], main=fake(boom))
    assert tb.kind == "traceback" and tb.exc_type == "KeyError"
    assert fz.run_cli([], main=fake(two_lines)).kind == "bad-output"
    assert fz.run_cli([], main=fake(one_line)).kind == "error"
    enc = fz.run_cli([], main=fake(surrogate))
    assert enc.kind == "traceback" and enc.exc_type == "UnicodeEncodeError"
    assert fz.run_cli([], time_cap_s=0.3, main=fake(slow)).kind == "hang"
    assert fz.run_cli([], time_cap_s=0.3, main=fake(swallow)).kind == "hang"
    assert fz.run_cli([], main=fake(exits)).kind == "bad-output"  # exit 2 without its one line


def test_harness_restores_the_signal_handler():
    import signal

    before = signal.getsignal(signal.SIGALRM)
    fz.run_cli(["perf", "--json"])
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_judge_applies_the_oracle():
    out = fz.Outcome("ok", 0, "problems: none\n", "")
    assert fz.judge(fz.Case("header", "x", [], "invalid", listed=fz.inspect_listed), out).kind == "garbage"
    err = fz.Outcome("error", 2, "", "eaglelab inspect: error: a: b\n")
    assert fz.judge(fz.Case("header", "x", [], "valid"), err).kind == "refused"
    assert fz.judge(fz.Case("header", "x", [], "any"), fz.Outcome("error", 2, "", "")).kind == "error"
