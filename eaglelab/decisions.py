"""The workbook's decisions, as tested functions: plug in, warm start or from scratch, and what data saves.

Notebooks, the command line and the game plan render these results; none of them decides in a
cell. Pure arithmetic over numbers the probe and the fine-tune measured; no torch.

τ is the acceptance length with the bonus token (1.0 = no gain); the gain of speculation is τ - 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum


class Option(StrEnum):
    """What a team can do with the old drafter for the new target: the one spelling of each option.

    A ``str`` (``Option.PLUG_IN == "plug in"``), so JSON, tables and findings carry the words.
    """

    SERVE_AS_NOW = "serve as now"  # keep the drafter served today (the decision table's first row)
    PLUG_IN = "plug in"  # the old drafter as is on the new target
    WARM_START = "warm start"  # fine-tune the old drafter on the new target's data
    FROM_SCRATCH = "from scratch"  # train a new drafter from random weights


#: Fraction of its gain (τ - 1) on the old target the old drafter must keep on the new one to be
#: plugged in as is.
PLUGIN_KEEP = 0.9
#: Below this τ on the new target (bonus included) the old drafter is no better a start than random
#: weights: train from scratch.
WARM_START_MIN_TAU = 1.3
#: The options for the old drafter, cheapest first: plugging in costs nothing, a warm start a short
#: fine-tune, scratch a full training run.
OPTIONS = (Option.PLUG_IN, Option.WARM_START, Option.FROM_SCRATCH)
#: Measured τ within this of the best counts as a tie (run-to-run spread of τ over a few prompts);
#: the cheaper option wins a tie.
TAU_TIE = 0.05


@dataclass(frozen=True)
class Decision:
    """A verdict with the reasons that led to it (numbers formatted in).

    Attributes:
        action: an :class:`Option`: plug in, warm start or from scratch.
        reasons: one line per step of the argument.
        kept: fraction of the gain (τ - 1) on the old target kept on the new one.
    """

    action: str
    reasons: list[str]
    kept: float

    def to_json(self) -> dict:
        return {"level": self.action, "reasons": list(self.reasons), "kept": self.kept}


def gain_kept(tau_old: float, tau_new: float) -> float:
    """Fraction of the gain (τ - 1) on the old target kept on the new one (0 when there was none)."""
    gain = tau_old - 1.0
    return (tau_new - 1.0) / gain if gain > 0 else 0.0


def plugin_verdict(accept_on_a: float, accept_on_b: float) -> Decision:
    """Plug in as is, warm start, or train from scratch, from the old drafter's τ on the old target A and the new B."""
    kept = gain_kept(accept_on_a, accept_on_b)
    reasons = [f"τ {accept_on_a:.2f} on A vs {accept_on_b:.2f} on B: the drafter keeps "
               f"{100 * kept:.0f}% of its gain (τ - 1) on the new target"]
    if kept >= PLUGIN_KEEP:
        return Decision(Option.PLUG_IN, reasons + [f"at least {100 * PLUGIN_KEEP:.0f}% kept: serve it as is, "
                                              "fine-tune later"], kept)
    if accept_on_b >= WARM_START_MIN_TAU:
        return Decision(Option.WARM_START, reasons + [
            f"τ on B {accept_on_b:.2f} ≥ {WARM_START_MIN_TAU}: the old drafter is a better start than random "
            "weights; fine-tune it on the new target's data"], kept)
    return Decision(Option.FROM_SCRATCH, reasons + [
        f"τ on B {accept_on_b:.2f} < {WARM_START_MIN_TAU}: little of the old drafter transfers; train from "
        "scratch (or check aux layers and tokenizer first)"], kept)


def best_drafter(measured: Mapping[str, Mapping[str, float]], key: str = "accept_len") -> str:
    """The name of the drafter with the highest measured ``key`` (τ by default); the first wins a tie."""
    if not measured:
        raise ValueError("no measured drafters to choose from")
    names = list(measured)
    return max(names, key=lambda n: (measured[n][key], -names.index(n)))


@dataclass(frozen=True)
class Recommendation:
    """What to do for the new target, from the measured τ of each option on it.

    Attributes:
        action: one of :data:`OPTIONS`.
        taus: measured τ on the new target of each option considered.
        text: the recommendation in one or two sentences, numbers formatted in.
    """

    action: str
    taus: dict[str, float]
    text: str

    def to_json(self) -> dict:
        return asdict(self)


def recommend(taus: Mapping[str, float]) -> Recommendation:
    """The cheapest option whose measured τ on the new target is within :data:`TAU_TIE` of the best.

    Args:
        taus: measured τ per option, keys from :data:`OPTIONS` (at least one).
    """
    unknown = set(taus) - set(OPTIONS)
    if unknown or not taus:
        raise ValueError(f"options must be among {OPTIONS}, got {sorted(taus)}")
    best = max(taus.values())
    action = next(o for o in OPTIONS if o in taus and taus[o] >= best - TAU_TIE)
    others = ", ".join(f"{o} {taus[o]:.2f}" for o in OPTIONS if o in taus and o != action)
    lead = {
        Option.PLUG_IN: "Plug the old drafter in as is: fine-tuning does not buy a clear gain on the new target",
        Option.WARM_START: "Initialise the new drafter from the old one and fine-tune it on the new target's data",
        Option.FROM_SCRATCH: "Train a new drafter from scratch: the old drafter's weights do not help on the new target",
    }[action]
    text = f"{lead} (measured τ {taus[action]:.2f}" + (f" vs {others}" if others else "") + ")."
    return Recommendation(action, {o: float(taus[o]) for o in OPTIONS if o in taus}, text)
