"""The load model held against published sweeps: calibrate at one point, predict the others, report the error.

A published sweep (``data/fixtures/load_sweeps/*.json``: a paper's table, an engine's or a team's README)
gives the speedup of speculative decoding at several concurrencies for one target, GPU, engine and k,
sometimes with the plain and speculative tok/s. :func:`hold_against` gives the model what a user would
give it, the sweep's target config, GPU and count, k and one measured point, and predicts the rest:

- with tok/s at the calibration point, the plain step ``c / plain tok/s`` and the cycle ``τ · c / spec
  tok/s`` calibrate the model there (:func:`eaglelab.serving.load.calibrate`);
- with ratios only (a paper's table), the plain step is the datasheet model's, and the cycle ``τ · plain
  step / speedup`` fixes the drafter.

No sweep publishes τ per concurrency, so each fixture states the τ it assumes and why (``assumed``); the
error is reported at that τ, and its sensitivity over ``τ ± 0.3``. Numbers only: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eaglelab.errors import ConfigError
from eaglelab.inputs import read_json_object
from eaglelab.serving.load import LoadModel, machine
from eaglelab.serving.load_fit import Point, calibrate
from eaglelab.serving.target_shape import shape_from_config

#: Bits per weight by a fixture's ``weights`` when its config holds no quantization_config (scales included).
WEIGHT_BITS = {"bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int4": 4.5, "awq": 4.5, "nvfp4": 4.5, "mxfp4": 4.25}
#: The fields a fixture's ``stated`` may name: the ``perf`` flags a user gives from what the source says.
STATED_FIELDS = ("gpu", "gpus", "context", "kv_dtype", "verify_kv", "weight_bits", "dcp", "accept_len")
#: The τ offsets the sensitivity is taken over.
TAU_SPREAD = (-0.3, 0.0, 0.3)
#: The default fixtures' folder.
SWEEPS = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "load_sweeps"


@dataclass(frozen=True)
class Sweep:
    """One published sweep (its fixture's fields that the check reads)."""

    name: str
    source: str
    config: dict[str, Any]
    weight_bits: float | None
    gpu: str
    gpus: int
    k: int
    draft_tokens: int | None
    points: list[dict[str, Any]]
    tau: float
    context: int
    scored: bool
    kv_dtype: str = "bf16"
    verify_kv: str = "once"
    why_not_scored: str = ""
    stated: dict[str, Any] = field(default_factory=dict)


def read_sweep(path: str | Path) -> Sweep:
    """A sweep fixture, with its assumptions (``assumed``: accept_len, context, and scored / why not).

    Raises:
        ConfigError: a file that is not a sweep fixture (missing fields, no points).
    """
    where = str(path)
    d = read_json_object(path, ConfigError)
    try:
        target, hw, spec, assumed = d["target"], d["hardware"], d["speculation"], d["assumed"]
        src = d["source"]
        config = dict(target["config"])
        weights = str(target.get("weights", "bf16")).lower()
        bits = None if "quantization_config" in config else WEIGHT_BITS.get(weights)
        points = sorted(d["points"], key=lambda p: p["concurrency"])
        sweep = Sweep(d["name"], f"{src['title']}, {src['where']} ({src['url']})", config, bits, hw["gpu"],
                      int(hw["gpus"]), int(spec["k"]), spec.get("draft_tokens"), points, float(assumed["accept_len"]),
                      int(assumed["context"]), bool(assumed.get("scored", True)),
                      why_not_scored=assumed.get("why_not_scored", ""), kv_dtype=str(assumed.get("kv_dtype", "bf16")),
                      verify_kv=str(assumed.get("verify_kv", "once")), stated=dict(d.get("stated", {})))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(where, f"not a load-sweep fixture: {exc!r}") from None
    if len(sweep.points) < 2:
        raise ConfigError(where, "a sweep needs at least two points")
    unknown = sorted(set(sweep.stated) - set(STATED_FIELDS))
    if unknown:
        raise ConfigError(where, f"'stated' names {', '.join(unknown)}, not among {', '.join(STATED_FIELDS)}")
    return sweep


def model_for(sweep: Sweep) -> LoadModel:
    """The uncalibrated model of the sweep's target on its GPUs."""
    shape = shape_from_config(sweep.config, weight_bits=sweep.weight_bits, kv_dtype=sweep.kv_dtype, where=sweep.name)
    return LoadModel(shape, machine(sweep.gpu, sweep.gpus), context=sweep.context, verify_kv=sweep.verify_kv,
                     draft_tokens=sweep.draft_tokens if sweep.draft_tokens not in (None, sweep.k + 1) else None,
                     dcp=int(sweep.stated.get("dcp", 1)))


def calibration_point(sweep: Sweep, model: LoadModel, tau: float, at: int = 0) -> Point:
    """What a user would measure at the sweep's ``at``-th point: the plain step and the cycle (τ given)."""
    p = sweep.points[at]
    c = int(p["concurrency"])
    if p.get("baseline_tok_s") and p.get("spec_tok_s"):
        return Point(c, decode_s=c / p["baseline_tok_s"], cycle_s=tau * c / p["spec_tok_s"], k=sweep.k)
    decode = float(model.decode_s(c))
    return Point(c, decode_s=decode, cycle_s=tau * decode / p["speedup"], k=sweep.k)


@dataclass(frozen=True)
class SweepCheck:
    """The model against one sweep: per point the published and predicted speedup, and the summary."""

    sweep: Sweep
    rows: list[dict[str, Any]]
    median_error: float
    worst_error: float
    published_crossover: int | None
    predicted_crossover: int | None
    worst_over_tau: float
    crossover_within_one_step: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.sweep.name, "source": self.sweep.source, "tau": self.sweep.tau, "rows": self.rows,
                "median_error": self.median_error, "worst_error": self.worst_error,
                "published_crossover": self.published_crossover, "predicted_crossover": self.predicted_crossover,
                "crossover_within_one_step": self.crossover_within_one_step, "worst_over_tau": self.worst_over_tau,
                "scored": self.sweep.scored}


def crossover(concurrency: list[int], speedups: list[float]) -> int | None:
    """The largest concurrency up to which every point pays (None: the first does not)."""
    best = None
    for c, s in zip(concurrency, speedups):
        if s < 1.0:
            break
        best = c
    return best


def _predict(sweep: Sweep, tau: float) -> tuple[list[float], LoadModel]:
    start = model_for(sweep)
    model = calibrate(start, [calibration_point(sweep, start, tau)])
    return [float(model.speedup(p["concurrency"], sweep.k, tau)) for p in sweep.points], model


def hold_against(sweep: Sweep) -> SweepCheck:
    """Calibrate at the sweep's first point, predict the others at the assumed τ (and τ ± 0.3)."""
    conc = [int(p["concurrency"]) for p in sweep.points]
    published = [float(p["speedup"]) for p in sweep.points]
    by_tau = {dt: _predict(sweep, min(max(sweep.tau + dt, 1.0), sweep.k + 1.0)) for dt in TAU_SPREAD}
    predicted, model = by_tau[0.0]
    rows = [{"concurrency": c, "published": pub, "predicted": pred, "error": pred / pub - 1.0, "held_out": i > 0,
             "kv_fits": bool(model.kv_fits(c, sweep.k))}
            for i, (c, pub, pred) in enumerate(zip(conc, published, predicted))]
    held = [abs(r["error"]) for r in rows if r["held_out"]]
    spread = [max(abs(o / p - 1.0) for o, p in zip(other[1:], published[1:])) for other, _ in by_tau.values()]
    pub_x, pred_x = crossover(conc, published), crossover(conc, predicted)
    index = {c: i for i, c in enumerate(conc)}
    near = (pub_x == pred_x) or (pub_x is not None and pred_x is not None and abs(index[pub_x] - index[pred_x]) <= 1)
    return SweepCheck(sweep, rows, float(np.median(held)), max(held), pub_x, pred_x, max(spread), near)


def check_all(folder: str | Path = SWEEPS) -> list[SweepCheck]:
    """Every sweep fixture in ``folder``, held against the model, in name order."""
    return [hold_against(read_sweep(p)) for p in sorted(Path(folder).glob("*.json"))]


def budget_met(check: SweepCheck, median: float = 0.10, worst: float = 0.25) -> bool:
    """The issue's budget for one sweep: median held-out error, worst, and the crossover within one step."""
    return check.median_error <= median and check.worst_error <= worst and check.crossover_within_one_step \
        and math.isfinite(check.worst_error)
