"""Published plug-in cases (a drafter measured on its own target and on a changed one) as fixtures, and the
quantized-release rule held against them (docs/MEASURED.md, "Published plug-in cases")."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglelab.drift.published import (
    PUBLISHED_CASES,
    hold_quantized_release,
    quantized_release_tau,
    read_published_cases,
)
from eaglelab.errors import ConfigError
from tests.fuzzing import HOSTILE_JSON, dump


def test_every_published_case_names_its_source_and_the_sentence_its_numbers_come_from():
    cases = read_published_cases()
    assert len(cases) >= 20 and len({c.id for c in cases}) == len(cases)
    for c in cases:
        assert c.source_url.startswith("https://") and len(c.quote) > 20, c.id
        numbers = [x for x in (c.tau_old, c.tau_new) if x is not None]
        assert all(str(x).rstrip("0").rstrip(".") in c.quote.replace(",", "") or f"{x:.2f}" in c.quote for x in numbers), c.id


def test_a_quantized_release_keeps_the_drafters_tau_in_every_trusted_published_case():
    """Same weights, quantized (FP8 / FP4): the old drafter's τ (or acceptance rate) unchanged is the prior; on the
    five published pairs of medium reliability or better its error is at most 5%, its median under 1%."""
    check = hold_quantized_release(read_published_cases())
    assert len(check.errors) >= 5
    assert check.median < 0.01 and check.worst <= 0.05, check.to_json()
    assert quantized_release_tau(2.7) == 2.7


def test_the_rule_is_not_held_against_what_it_does_not_claim():
    """A rotated target or another fine-tune is not a quantized release of the same weights: left out of the check."""
    cases = read_published_cases()
    check = hold_quantized_release(cases)
    kinds = {c.id: c.change_kind for c in cases}
    assert {kinds[i] for i in check.errors} == {"quantization"}
    with pytest.raises(ConfigError, match="no quantization case"):
        hold_quantized_release([c for c in cases if c.change_kind != "quantization"])


@pytest.mark.parametrize("bad, problem", [
    ({}, "expected a JSON list"), ([1], "expected a JSON object"),
    ([{"id": "x"}], "change_kind must be"), ("dup", "given twice"), ("neg", "tau_old must be a positive"),
    ("url", "source_url must be an http"),
])
def test_a_bad_fixture_is_one_typed_line_naming_the_file(tmp_path, bad, problem):
    good = json.loads(PUBLISHED_CASES.read_text())[0]
    data = {"dup": [good, good], "neg": [{**good, "tau_old": -1}], "url": [{**good, "source_url": "file:///etc"}]}.get(
        bad, bad) if isinstance(bad, str) else bad
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=problem) as err:
        read_published_cases(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE_JSON)
def test_any_json_is_read_as_cases_or_refused_in_one_line(tmp_path, value):
    path = tmp_path / "cases.json"
    path.write_bytes(dump(value))
    try:
        cases = read_published_cases(path)
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(cases, list)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["id", "change_kind", "metric_kind", "reliability", "k", "tau_old", "tau_new", "source_url",
                              "quote"]), value=HOSTILE_JSON)
def test_any_value_in_any_field_is_read_or_refused_in_one_line(tmp_path, field, value):
    good = json.loads(PUBLISHED_CASES.read_text())[0]
    path = tmp_path / "cases.json"
    path.write_bytes(dump([{**good, field: value}]))
    try:
        (case,) = read_published_cases(path)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert case.tau_old is None or case.tau_old > 0
