"""The drift sweep: every point of every family measured against A, with the old drafter, cached point by point.

A point's record is computed once and kept as JSON under the cache folder, keyed by everything
that decides it (the checkpoints' files, the data and measurement settings, the
point), so a rerun or an interrupted sweep redoes only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from eaglelab.atomic import write_json_atomic
from eaglelab.data.corpus import docstrings, split_held_out
from eaglelab.data.responses import Responses, response_rows
from eaglelab.data.sets import measure_prompts, probe_set, world_of
from eaglelab.data.tokens import pack_sequences
from eaglelab.data.world import default_world_dir
from eaglelab.drift import families as fam
from eaglelab.drift.families import ZERO, DriftPoint
from eaglelab.drift.measures import measure_drift, reference_pass, teacher_forced
from eaglelab.drift.records import DrafterOn, SweepRecord
from eaglelab.errors import ConfigError
from eaglelab.inputs import path_kind, read_json_object
from eaglelab.model.decoding import measure_acceptance
from eaglelab.model.drafter_files import load_drafter
from eaglelab.model.lora import LoRASnapshots, projection_weights
from eaglelab.model.targets import Target, load_target
from eaglelab.progress import progress as bar
from eaglelab.settings import DEFAULT_K, DEFAULT_MEASURE_PROMPTS, DEFAULT_MEASURE_TOKENS

#: bumped whenever a record's contents change: older cached records are then recomputed, never mixed in
RECORD_VERSION = 4

#: the demo sweep: A, then 4-5 magnitudes of each family, from barely moved to broken; real speculative decoding
#: at one far point of each family (B itself, α = 1, is measured by notebook 03). The ``train`` family's LoRA runs
#: 40 steps at a constant learning rate, so each snapshot is the one a longer run takes at the same step
DEMO_POINTS = (ZERO, *(DriftPoint("path", a) for a in (0.5, 1.0, 2.0, 3.0)),
               DriftPoint("quant", 8), *(DriftPoint("quant", b, g) for b, g in ((4, 128), (4, 32), (3, 32), (2, 32))),
               *(DriftPoint("train", s) for s in (10, 20, 30, 40)))
DEMO_MEASURED = (ZERO, DriftPoint("path", 2.0), DriftPoint("quant", 3, 32), DriftPoint("train", 40))
SMOKE_POINTS = (ZERO, DriftPoint("path", 0.5), DriftPoint("path", 1.0), DriftPoint("path", 2.0), DriftPoint("quant", 8),
                DriftPoint("quant", 4, 32), DriftPoint("quant", 2, 32), DriftPoint("train", 5), DriftPoint("train", 20))
SMOKE_MEASURED = (ZERO, DriftPoint("path", 1.0), DriftPoint("quant", 2, 32), DriftPoint("train", 20))


@dataclass
class SweepSettings:
    """What decides every point's numbers besides the point itself.

    Attributes:
        sequences: held-out sequences teacher forced (the world's conversations on the demo world).
        data: the user's text / JSONL file (``DATA``), read as notebook 03's probe reads it; None: the world's
            conversations when A is a world's target, else built-in text (as the probe).
        seq_len: tokens per row when the data is packed text (tiny world).
        k: drafts per cycle.
        batch_size: sequences per forward.
        top_k: logprobs per position an engine returns (the ``tv_topk`` measure).
        measure_prompts, measure_tokens: real speculative decoding at the measured points.
        lora_rank, lora_lr, lora_batch, lora_seq_len, lora_rows: the ``train`` family's continued training
            (on stdlib docstrings, English prose: another domain than B's Python source).
        seed: of the LoRA.
    """

    sequences: int = 16
    data: str | None = None
    seq_len: int = 64
    k: int = DEFAULT_K
    batch_size: int = 8
    top_k: int = 20
    measure_prompts: int = DEFAULT_MEASURE_PROMPTS
    measure_tokens: int = DEFAULT_MEASURE_TOKENS
    lora_rank: int = 16
    lora_lr: float = 2e-3
    lora_batch: int = 4
    lora_seq_len: int = 64
    lora_rows: int = 256
    seed: int = 1

    #: what a notebook's smoke run sweeps (:func:`eaglelab.settings.smoke_sized`)
    SMOKE_SIZES: ClassVar[dict[str, int]] = {"sequences": 16, "measure_prompts": 2, "measure_tokens": 16, "lora_rows": 128}


@dataclass
class SweepResult:
    """The records of a sweep: one :class:`~eaglelab.drift.records.SweepRecord` per point, plus the other pair's."""

    records: list[SweepRecord]
    pair: list[SweepRecord] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0
    computed: int = 0

    def to_json(self) -> dict:
        return {"records": [r.to_json() for r in self.records], "pair": [r.to_json() for r in self.pair],
                "settings": self.settings, "seconds": self.seconds, "computed": self.computed}

    @property
    def on_a(self) -> DrafterOn:
        """The old drafter on A (every point of one sweep shares it)."""
        return self.records[0].on_a

    def at(self, family: str, magnitude: float) -> SweepRecord:
        """The record of one point.

        Raises:
            KeyError: the sweep has no such point.
        """
        for r in self.records:
            if r.family == family and r.point.magnitude == magnitude:
                return r
        raise KeyError(f"{family} {magnitude:g}")


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def files_key(*sources) -> str:
    """What identifies checkpoints: each folder's files (name, size, modification time), or the hub id as given."""
    parts = []
    for src in sources:
        folder = Path(src)
        parts.append(sorted((str(f.relative_to(folder)), f.stat().st_size, f.stat().st_mtime_ns)
                            for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else str(src))
    return _digest(parts)


def _data_key(data: str) -> list:
    """What identifies the data file: its path, size and modification time (a rewritten file is new data)."""
    st = Path(data).stat()
    return [str(data), st.st_size, st.st_mtime_ns]


def sweep_data(tokenizer, settings: SweepSettings, old_target: str):
    """The held-out set every point is teacher forced on: notebook 03's probe set for the same inputs (the user's
    ``data``, else the world's conversations, else built-in text), its first ``settings.sequences``."""
    return probe_set(tokenizer, settings.sequences, settings.seq_len, world_of(old_target), data_file=settings.data,
                     old_target=old_target)


def default_cache() -> Path:
    """``data/worlds/cache/drift`` (or under ``$EAGLELAB_WORLDS``), next to the worlds' build stages."""

    return default_world_dir("cache") / "drift"


def measured_decoding(model, drafter, prompts, settings: SweepSettings) -> dict:
    """Real speculative decoding of the old drafter on ``model`` (its embedding served, as SGLang does): τ only.

    The sweep fits τ, so it decodes speculatively alone (:func:`eaglelab.model.decoding.measure_acceptance`), with no
    plain-decoding baseline to time against: notebooks 01, 03 and 04 time speculation on A and B.

    Also the drafter teacher forced on exactly the text that decoding produced (``tf_own_text``, and
    replayed cycle by cycle, ``walk_own_text``): next to the teacher-forced τ on A's replies, it
    tells a gap due to the text (B' writes other replies than A) from one due to teacher forcing itself.
    """

    target = Target.for_drafter(model, drafter.spec)
    try:
        with drafter.serving_target(model):
            res = measure_acceptance(target, drafter, prompts, settings.measure_tokens, k=settings.k)
    finally:
        target.close()
    keep = ("accept_len", "position_acceptance", "prompts", "cycles")
    ids, counted, _ = response_rows(Responses([list(p) for p in prompts], res["outputs"]))
    own = teacher_forced(model, drafter, ids, counted, settings.k, settings.batch_size)
    return {**{k: res[k] for k in keep}, "tf_own_text": own["accept_len"], "walk_own_text": own["walk_accept_len"]}


def measure_point(model_a, model_b, drafter, data, settings: SweepSettings, point: dict, weight_distance: float | None,
                  prompts=None, reference=None) -> dict:
    """One point's record: the drift measures, the drafter on A and B', and measured decoding when ``prompts`` is given.

    ``reference`` is A's side on ``data`` (:func:`eaglelab.drift.measures.reference_pass`), shared by a sweep's points.
    """

    t = time.perf_counter()
    m = measure_drift(model_a, model_b, drafter, data.ids, data.counted, settings.k, settings.batch_size,
                      settings.top_k, reference=reference)
    rec = {"point": point, "weight_distance": weight_distance, "measures": m.measure_values(), **m.to_json()}
    rec["measured"] = measured_decoding(model_b, drafter, prompts, settings) if prompts else None
    rec["seconds"] = time.perf_counter() - t
    return rec


def run_sweep(old_target, new_target, old_drafter, points=DEMO_POINTS, measured=DEMO_MEASURED,
              settings: SweepSettings | None = None, cache_dir: str | Path | None = None,
              pair: tuple | None = None, progress: bool = True) -> SweepResult:
    """Build and measure every drift point of target A (target B defines the ``path`` family).

    The held-out data is the probe's (:func:`eaglelab.data.sets.probe_set`): a world's conversations
    with A's own replies when A is a world's target, else held-out built-in text.

    Args:
        old_target, new_target: the old and the new target (folders or hub ids).
        old_drafter: the drafter trained on A.
        points, measured: the points, and those also measured with real speculative decoding.
        cache_dir: where point records are kept (default :func:`default_cache`).
        pair: (target A, target B, drafter) of another related pair, measured as one more point
            (family ``pair``) to test the predictors on a different model.

    Returns:
        every point's record, in the order of ``points``, and the pair's.
    """
    settings = settings or SweepSettings()
    cache = Path(cache_dir) if cache_dir else default_cache()
    base_key = {"models": files_key(old_target, new_target, old_drafter),
                "settings": {k: v for k, v in asdict(settings).items() if k != "data"}, "version": RECORD_VERSION}
    if settings.data:  # records of the default data keep their keys (a rerun reuses them)
        base_key["data"] = _data_key(settings.data)
    paths = {p: cache / f"{p.family}-{p.magnitude:g}-{p.group}-{_digest([base_key, p.to_json()])}.json" for p in points}
    t0 = time.perf_counter()
    records: dict[DriftPoint, SweepRecord] = {p: r for p in points if (r := _cached(paths[p])) is not None}
    todo = [p for p in points if p not in records]
    if todo:
        model_a, tok = load_target(old_target)
        work, _ = load_target(old_target)  # becomes each B' in turn
        drafter = load_drafter(old_drafter).to(next(model_a.parameters()).device)
        data = sweep_data(tok, settings, old_target)
        prompts = measure_prompts(tok, settings.measure_prompts, world_of(old_target))
        state_a = {k: v.detach().clone() for k, v in model_a.state_dict().items()}
        names = list(projection_weights(model_a))
        lora = state_b = None
        reference = reference_pass(model_a, drafter, data.ids, data.counted, settings.k, settings.batch_size)
        for p in bar(todo, desc="drift sweep", disable=not progress):
            if p.family == "path":
                if state_b is None:
                    model_b, _ = load_target(new_target, device=str(next(model_a.parameters()).device))
                    state_b = model_b.state_dict()
                changed = fam.interpolate(state_a, state_b, p.magnitude)
            elif p.family == "quant":
                changed = fam.quantized(state_a, names, int(p.magnitude), p.group)
            elif p.family == "train":
                if lora is None:
                    lora = _continued_training(work, tok, settings, [q.magnitude for q in todo if q.family == "train"])
                changed = lora.merged_weights(state_a, int(p.magnitude))
            else:
                changed = {}
            with torch.no_grad():
                work.load_state_dict(changed, strict=False)
            rec = measure_point(model_a, work if changed else model_a, drafter, data, settings, p.to_json(),
                                fam.weight_distance(state_a, changed), prompts if p in measured else None, reference)
            with torch.no_grad():
                work.load_state_dict({k: state_a[k] for k in changed}, strict=False)  # back to A
            rec["data"] = data.source.description
            write_json_atomic(paths[p], rec)
            records[p] = SweepRecord.from_json(rec)
        del model_a, work, state_b, reference
    extra = [_pair_record(*pair, settings, cache)] if pair is not None else []
    return SweepResult([records[p] for p in points], extra, asdict(settings), time.perf_counter() - t0, len(todo))


def _cached(path: Path) -> SweepRecord | None:
    """A cached record, or None when there is none or it cannot be read as one (it is then recomputed and replaced)."""
    try:
        if path_kind(path, ConfigError) != "file":
            return None
        return SweepRecord.from_json(read_json_object(path, ConfigError, allow_nan=True))  # NaN: a rate no cycle reached
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _continued_training(model, tok, settings: SweepSettings, steps: list[float]):
    """LoRA continued training of A on stdlib docstrings, snapshotted at each step count of the ``train`` family."""

    rows = pack_sequences(tok, split_held_out(docstrings())[0], settings.lora_seq_len, settings.lora_rows)
    lora = LoRASnapshots(model, settings.lora_rank, seed=settings.seed)
    marks = sorted(int(s) for s in steps)
    lora.train(model, rows, marks[-1], settings.lora_lr, settings.lora_batch, settings.seed, snapshot_at=marks,
               desc="train family: LoRA on docstrings")
    return lora


def _pair_record(old_target, new_target, old_drafter, settings: SweepSettings, cache: Path) -> SweepRecord:
    """Another pair (its A, its B, its own drafter) as one point of family ``pair``."""

    world = world_of(old_target)
    name = f"{world.root.name} world" if world else Path(str(old_target)).name
    point = {"family": "pair", "magnitude": 1.0, "group": 0, "label": f"{name}: A → B"}
    key = [files_key(old_target, new_target, old_drafter), asdict(settings), point, RECORD_VERSION]
    path = cache / f"pair-{_digest(key)}.json"
    if (rec := _cached(path)) is not None:
        return rec
    model_a, tok = load_target(old_target)
    model_b, _ = load_target(new_target)
    drafter = load_drafter(old_drafter).to(next(model_a.parameters()).device)
    data = probe_set(tok, settings.sequences, settings.seq_len, world)
    rec = measure_point(model_a, model_b, drafter, data, settings, point, None,
                        measure_prompts(tok, settings.measure_prompts, world))
    rec["data"] = data.source.description
    write_json_atomic(path, rec)
    return SweepRecord.from_json(rec)
