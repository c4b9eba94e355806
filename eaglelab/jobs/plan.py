"""What should the team do? ``eaglelab plan`` as one job: the decision table for the user's serving case.

:func:`plan_options` takes a :class:`PlanSettings` (the command's flags are generated from it): each serving
number left out is the founding case's (Kimi-K2.5 on 8 PCIe GPUs), labelled ``[default]`` in the output,
and the target and machine (:class:`~eaglelab.jobs.load.MachineSettings`) give the serving-cost model that
says up to which concurrency each option pays. Its :class:`PlanReport` prints and serialises itself. No torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from eaglelab.errors import ParameterError
from eaglelab.jobs.load import load_model_for
from eaglelab.jobs.load_settings import LoadSettings, MachineSettings
from eaglelab.planning.decision_table import FOUNDING_CASE, Plan, Scenario, plan
from eaglelab.planning.render import plan_lines, plan_markdown
from eaglelab.serving.cost_table import MAX_CONCURRENCY
from eaglelab.serving.logs import parse_log
from eaglelab.serving.perf import CYCLE_MISTAKE, MAX_STEP_S, MAX_TPS, MIN_STEP_S, MIN_TPS, TPS_MISTAKE
from eaglelab.settings import field_help, option

#: The lever-naming models ``--verify-model`` takes (``kimi-k2-pcie`` is ``load``'s old name; ``none`` names none).
VERIFY_MODELS = ("load", "kimi-k2-pcie", "none")


#: The most training samples a plan counts with (a thousand times the largest published drafter corpora).
MAX_SAMPLES = 1e12


@dataclass(frozen=True)
class PlanSettings(MachineSettings):
    """The user's serving case and evidence; every number left as None is the founding case's, labelled [default].

    Attributes:
        baseline_tps: plain decoding tok/s.
        cycle_ms: speculative cycle, ms: draft + verify + overhead.
        accept_len: τ of the drafter you serve now, bonus included.
        log: SGLang / vLLM log: take the served τ as the median of its metrics lines.
        goal_tps: the throughput you want.
        samples: samples of the new target's data the served drafter was trained on.
        gen_tps: tok/s at which you generate training data, all streams.
        tokens_per_sample: tokens per generated sample (assumed).
        k: draft tokens per cycle.
        plugin_tau: the old drafter's τ on the new target, as measured by notebook 03 or `eaglelab probe` on your
            checkpoints.
        old_samples: samples the old drafter was trained on (e.g. 1400000).
        exponents: range of the data exponent b, miss rate ∝ N^-b (assumed).
        transfer_fraction: share of ``old_samples`` a warm start carries over when no ``plugin_tau``.
        budgets: total new-target samples per trained option (None: 1-2-5 steps above ``samples``).
        verify_model: name the lever when the cycle must shrink: the load model's largest part of the cycle (load;
            kimi-k2-pcie is its old name), or none.
        at_concurrency: requests in flight when ``baseline_tps`` and ``cycle_ms`` were measured.
    """

    baseline_tps: float | None = option(None, min=MIN_TPS, max=MAX_TPS, mistake=TPS_MISTAKE)
    cycle_ms: float | None = option(None, min=1e3 * MIN_STEP_S, max=1e3 * MAX_STEP_S, mistake=CYCLE_MISTAKE)
    accept_len: float | None = option(None, min=1)
    log: str | None = None
    goal_tps: float | None = option(None, min=MIN_TPS, max=MAX_TPS, mistake=TPS_MISTAKE)
    samples: float | None = option(None, above=0, max=MAX_SAMPLES)
    gen_tps: float | None = option(None, above=0, max=1e9, mistake="tokens per second over all generation streams")
    tokens_per_sample: float | None = option(None, above=0, max=1e8)
    k: int | None = option(None, min=1)
    plugin_tau: float | None = option(None, min=1)
    old_samples: float | None = option(None, above=0, max=MAX_SAMPLES)
    exponents: tuple[float, ...] | None = option(None, above=0, count=2, flag="exponent")
    transfer_fraction: tuple[float, ...] | None = option(None, min=0, max=1, count=2, flag="transfer")
    budgets: tuple[float, ...] | None = option(None, above=0, max=MAX_SAMPLES)
    verify_model: str = option("load", choices=VERIFY_MODELS)
    at_concurrency: int | None = option(None, min=1, max=MAX_CONCURRENCY)

    def __post_init__(self):
        super().__post_init__()
        if self.log and self.accept_len is not None:
            raise ParameterError("plan", "give --accept-len or --log, not both")

    def scenario(self) -> Scenario:
        """The scenario: the numbers given, ``[entered]``; the others the founding case's, ``[default]``; τ from the
        log when one was given."""
        given = {name: getattr(self, name) for name in FOUNDING_CASE if getattr(self, name, None) is not None}
        s = Scenario.founding_case(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
        return s.with_logged_tau(parse_log(self.log).summary()["median_accept_len"]) if self.log else s


def founding_help(cls: type = PlanSettings) -> dict[str, str]:
    """Each plan flag's help with the founding case's number as its default (the numbers live in ``FOUNDING_CASE``)."""
    docs = field_help(cls)
    return {f.name: f"{docs[f.name].rstrip('.')} (default: the founding case's "
                    f"{' '.join(map(str, v)) if isinstance(v, tuple) else v})"
            for f in fields(cls) if (v := FOUNDING_CASE.get(f.name)) is not None and f.name in docs}


@dataclass
class PlanReport:
    """The decision table for the settings' scenario (:class:`eaglelab.planning.decision_table.Plan`)."""

    settings: PlanSettings
    plan: Plan

    def to_json(self) -> dict[str, Any]:
        return self.plan.to_json()

    def lines(self) -> list[str]:
        return plan_lines(self.plan)

    def markdown(self) -> str:
        return plan_markdown(self.plan)


def plan_options(settings: PlanSettings) -> PlanReport:
    """The decision table: what each option (plug in, warm start, scratch) needs and gives, and the recommendation.

    Raises:
        ParameterError: numbers that cannot be one setup's (see :class:`~eaglelab.planning.decision_table.Scenario`).
        ConfigError / LogFormatError: a target config or log that cannot be read.
    """
    s = settings
    scenario = s.scenario()
    load, source = load_model_for(LoadSettings(**asdict(s.machine_settings()), k=scenario.k))
    return PlanReport(s, plan(scenario, s.budgets, load=load, load_source=source, name_lever=s.verify_model != "none",
                              context_given=s.context is not None))
