"""Does speculation pay here? ``eaglelab perf`` as one job: a measured point, a server log, or the load question.

:func:`diagnose_serving` takes a :class:`PerfSettings` (the command's flags are generated from it) and answers
in one of three readings, chosen by what was given:

- **under load** (``concurrency``, ``plain_log`` or ``costs``): speedup and break-even τ against the requests
  in flight, from the one serving-cost model (:func:`eaglelab.jobs.load.speculation_under_load`), with the
  measured point's arithmetic beside it when one was given;
- **a log** (``log`` alone): the server's metrics lines grouped by concurrency;
- **a point** (``baseline_tps``, ``cycle_ms``, ``accept_len``): effective tok/s, break-even τ and the τ each
  goal needs (:func:`eaglelab.serving.perf.diagnose`).

Its :class:`PerfReport` prints and serialises itself. No torch: numbers and log files only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from eaglelab.errors import ParameterError
from eaglelab.jobs.load import LoadSettings, speculation_under_load
from eaglelab.jobs.load_report import LoadReport, tps_cell
from eaglelab.outputs import strict_json_text, table
from eaglelab.serving.logs import ParsedLog, log_by_concurrency, parse_log
from eaglelab.serving.perf import MAX_TPS, MIN_TPS, TPS_MISTAKE, Diagnosis, diagnose
from eaglelab.settings import option


@dataclass(frozen=True)
class PerfSettings(LoadSettings):
    """What ``eaglelab perf`` is asked: a measured point, a log, or the load question (:class:`LoadSettings`).

    Attributes:
        goal_tps: throughputs wanted: the τ each needs.
    """

    goal_tps: tuple[float, ...] | None = option(None, min=MIN_TPS, max=MAX_TPS, mistake=TPS_MISTAKE)

    def __post_init__(self):
        if self.point_given and all(isinstance(v, (int, float)) and v > 0 for v in (self.baseline_tps, self.cycle_ms)):
            diagnose(self.baseline_tps, self.cycle_ms, self.accept_len, k=self.k)  # the point's own checks, in order
        super().__post_init__()

    @property
    def under_load(self) -> bool:
        """The load question is asked: concurrencies, a plain log or a cost table were given."""
        return bool(self.concurrency or self.plain_log or self.costs)

    @property
    def point_given(self) -> bool:
        """A whole measured point: plain tok/s, the cycle and τ."""
        return None not in (self.baseline_tps, self.cycle_ms, self.accept_len)


@dataclass
class PerfReport:
    """The answer in the reading the settings asked for; the other parts are None.

    Attributes:
        settings: what was asked.
        point: the measured point's arithmetic (:func:`eaglelab.serving.perf.diagnose`), when a whole point was given.
        log: the parsed server log, when it was read alone.
        load: the load question's answer, when it was asked.
    """

    settings: PerfSettings
    point: Diagnosis | None = None
    log: ParsedLog | None = None
    load: LoadReport | None = None

    def to_json(self) -> dict[str, Any]:
        point = self.point.to_json() if self.point is not None else {}
        if self.load is not None:
            return {**point, **self.load.to_json()}
        if self.log is not None:
            return self.log.to_json()
        return point

    def json_chunks(self) -> Iterator[str]:
        """:meth:`to_json` as strict JSON text in pieces: a log's records one at a time (bounded memory)."""
        if self.log is not None and self.load is None:
            yield from self.log.json_chunks()
        else:
            yield strict_json_text(self.to_json())

    def lines(self) -> list[str]:
        if self.load is not None:
            return self.load.lines()
        if self.log is not None:
            return _log_lines(self.log)
        return self.point.lines() if self.point is not None else []


def _log_lines(parsed: ParsedLog) -> list[str]:
    s = parsed.summary()
    out = [f"{parsed.path}: {s['n']} metrics lines, {parsed.skipped_lines} other lines skipped, "
           f"{parsed.n_malformed} malformed",
           f"median accept length {s['median_accept_len']:.2f}, median throughput {s['median_throughput']}"]
    rows = log_by_concurrency(parsed)
    if rows:
        return out + table([[r["concurrency"], r["n"], f"{r['accept_len']:.2f}", tps_cell(r["throughput"]),
                             tps_cell(r["throughput_per_request"])] for r in rows],
                           ["concurrency", "n", "accept len", "tok/s (all)", "tok/s per request"]).splitlines()
    return out + table([[g["source"], g["n"], f"{g['median_accept_len']:.2f}", g["median_throughput"]]
                        for g in s["by_source"]], ["source", "n", "accept len", "tok/s"]).splitlines()


def diagnose_serving(settings: PerfSettings) -> PerfReport:
    """Answer ``eaglelab perf``'s question in the reading the settings ask for (see the module's docstring).

    Raises:
        ParameterError: neither a log, nor a whole measured point, nor the load question.
        LogFormatError / CostTableError: a log or cost table that cannot be read.
    """
    s = settings
    point = diagnose(s.baseline_tps, s.cycle_ms, s.accept_len, s.goal_tps or (), k=s.k) if s.point_given else None
    if s.under_load:
        return PerfReport(s, point=point, load=speculation_under_load(s))
    if s.log:
        return PerfReport(s, log=parse_log(s.log))
    if point is None:
        raise ParameterError("perf", "give --log FILE, or all of --baseline-tps, --cycle-ms and --accept-len")
    return PerfReport(s, point=point)
