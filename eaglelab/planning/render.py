"""The decision table in words: markdown for the game plan, plain rows for the command line."""

from __future__ import annotations

import math

from eaglelab.outputs import table
from eaglelab.planning import provenance as pv
from eaglelab.planning.decision_table import ASSUMPTIONS, FOUNDING_CASE, Plan, Scenario, _duration
from eaglelab.planning.scaling import sample_count

_SCENARIO_FIELDS = (
    ("baseline_tps", "plain decoding", "{:g} tok/s"),
    ("cycle_ms", "speculative cycle", "{:g} ms"),
    ("at_concurrency", "requests in flight when measured", "{}"),
    ("accept_len", "τ of the drafter served now", "{:.2f}"),
    ("samples", "its training samples (new target)", None),
    ("goal_tps", "throughput wanted (the goal)", "{:g} tok/s"),
    ("k", "draft tokens per cycle", "{}"),
    ("gen_tps", "data generation speed", "{:g} tok/s"),
    ("tokens_per_sample", "tokens per sample", "{:g}"),
    ("plugin_tau", "old drafter's τ on the new target", "{:.2f}"),
    ("old_samples", "old drafter's training samples", None),
)


#: The scenario's fields that describe a serving case (the others are assumptions of the model, with a range).
CASE_FIELDS = tuple(name for name in FOUNDING_CASE if name not in ASSUMPTIONS)
#: Sources of a number that is not the user's: left at the founding case's default, a bundled sample, the demo world.
NOT_YOURS = (pv.DEFAULT, pv.SAMPLE, pv.DEMO)
#: Whose serving case a scenario is (:func:`whose_case`).
FOUNDING, PARTLY, YOURS = "founding case", "partly the founding case", "yours"


def founding_fields(s: Scenario) -> list[str]:
    """What each serving number left at the founding case's is (``plain decoding``, ...), in the table's order."""
    return [label for name, label, _ in _SCENARIO_FIELDS
            if name in CASE_FIELDS and getattr(s, name) is not None and s.source(name) in NOT_YOURS]


def whose_case(s: Scenario) -> str:
    """:data:`FOUNDING` when no serving number is the user's, :data:`YOURS` when all are, else :data:`PARTLY`."""
    given = [name for name in CASE_FIELDS if getattr(s, name) is not None]
    left = len(founding_fields(s))
    return FOUNDING if left == len(given) else YOURS if left == 0 else PARTLY


def scenario_title(s: Scenario) -> str:
    """The scenario table's title, true to whose numbers it holds (a default is never called the user's)."""
    return {FOUNDING: "**The founding case's scenario** (every serving number left at its default: enter yours)",
            PARTLY: "**Your scenario** (the numbers tagged [default] are still the founding case's: enter yours)",
            YOURS: "**Your scenario**"}[whose_case(s)]


def scenario_lines(p: Plan) -> list[tuple[str, str, str]]:
    """(what, value, source tag) for every scenario field that has a value, then the derived requirements."""
    s = p.scenario
    out = []
    for name, label, fmt in _SCENARIO_FIELDS:
        v = getattr(s, name)
        if v is None:
            continue
        out.append((label, sample_count(v) if fmt is None else fmt.format(v), s.tag(name)))
    out.append(("data exponent b (miss rate ∝ N^-b)", f"{s.exponents[0]:g}-{s.exponents[1]:g}", s.tag("exponents")))
    if s.plugin_tau is None and s.old_samples is not None:
        lo, hi = s.transfer_fraction
        out.append(("share of the old drafter's samples carried over", f"{100 * lo:.0f}-{100 * hi:.0f}%",
                    s.tag("transfer_fraction")))
    derived = pv.LABELS[pv.DERIVED][0]
    out += [("τ for break-even (cycle × baseline)", f"{s.break_even_tau:.2f}", derived),
            (f"τ for {s.goal_tps:g} tok/s (cycle × goal)", f"{s.goal_tau:.2f}", derived),
            (f"most τ with {s.k} drafts", f"{s.k + 1}", derived)]
    return out


def row_cells(p: Plan) -> list[list[str]]:
    """The table's rows as strings: option, τ [band], tok/s [band], speedup, to generate, time, pays, goal."""
    s = p.scenario
    cells = []
    for r in p.rows:
        band = r.tau_hi > r.tau_lo + 5e-3
        cells.append([r.option,
                      f"{r.tau:.2f}" + (f" [{r.tau_lo:.2f}-{r.tau_hi:.2f}]" if band else ""),
                      f"{r.tps:.0f}" + (f" [{r.tps_lo:.0f}-{r.tps_hi:.0f}]" if band else ""),
                      f"{r.tps / s.baseline_tps:.2f}×",
                      sample_count(r.to_generate) if r.to_generate else "0",
                      _duration(r.generation_h) if r.to_generate else "-",
                      "yes" if r.tau >= s.break_even_tau else "no",
                      "yes" if r.tau >= s.goal_tau else "no",
                      _concurrency(r.pays_up_to) + _range(r.pays_range, r.pays_up_to)])
    return cells


def _range(pays: tuple | None, central: int | None) -> str:
    """`` (16-128)``: the range of "pays up to" over what was not given, where it is not the central value alone."""
    if pays is None or pays == (central, central):
        return ""
    lo, hi = ("never" if p is None else "1024+" if p >= 1024 else str(p) for p in pays)
    return f" ({lo}-{hi})"


def _concurrency(c: int | None) -> str:
    return "never" if c is None else "1024+" if c >= 1024 else f"≤ {c}"


ROW_HEADERS = ["option", "τ", "tok/s", "vs plain", "to generate", "generation", "pays", "goal", "pays up to (requests)"]


def need_cells(p: Plan) -> list[list[str]]:
    """What each start needs: start, goal (τ), total samples [band], still to generate, generation time."""
    out = []
    for n in p.needs:
        c, lo, hi = n.samples
        gc, glo, ghi = n.generation_h
        if math.isinf(lo):
            out.append([n.start, f"{n.goal} (τ {n.tau:.2f})", "unreachable", "never"])
            continue
        out.append([n.start, f"{n.goal} (τ {n.tau:.2f})", f"{sample_count(c)} [{sample_count(lo)}-{sample_count(hi)}]",
                    f"{_duration(gc)} [{_duration(glo)}-{_duration(ghi)}]"])
    return out


NEED_HEADERS = ["start", "goal", "total samples (lower bound)", "generation"]


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + ["| " + " | ".join(r) + " |" for r in rows]


def plan_markdown(p: Plan) -> str:
    """Scenario (with sources), decision table, needs and recommendation, as markdown."""
    lines = [scenario_title(p.scenario), ""]
    lines += _md_table(["", "value", "source"], [[a, b, f"[{c}]"] for a, b, c in scenario_lines(p)])
    lines += ["", f"**Options** (τ bands: {', '.join(f'{k} {v}' for k, v in p.bands.items())}; "
                  "evidence per row below the table)", ""]
    lines += _md_table(ROW_HEADERS, row_cells(p))
    lines += ["", "Evidence: " + "; ".join(sorted({f"{r.kind}: {r.evidence}" for r in p.rows})), ""]
    if p.load:
        lines += [f"Up to which concurrency each option pays: {p.load['source']} (measured at "
                  f"{p.load['at_concurrency']} request(s) in flight; `eaglelab perf --concurrency` for the table).", ""]
    if p.needs:
        lines += ["**What each start needs** (the law has no ceiling below k + 1: read the samples as lower bounds)", ""]
        lines += _md_table(NEED_HEADERS, need_cells(p)) + [""]
    lines += [f"**Decision:** {p.text}", ""]
    return "\n".join(lines)


def plan_lines(p: Plan) -> list[str]:
    """Scenario (with sources), decision table, needs and recommendation, as plain aligned lines (the command line)."""
    lines = table([list(r) for r in scenario_lines(p)], ["scenario", "value", "source"]).splitlines()
    lines += [""] + table(row_cells(p), ROW_HEADERS).splitlines() + [""]
    if p.needs:
        lines += table(need_cells(p), NEED_HEADERS).splitlines()
        lines += ["(the law has no ceiling below k + 1: samples are lower bounds)", ""]
    return lines + [p.text]
