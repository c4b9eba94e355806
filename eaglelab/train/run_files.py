"""A training run's folder: its record, metrics, checkpoints, and the checks that make a resume exact.

Layout (what ``eaglelab finetune --out`` and notebook 04 write)::

    run.json                 what the run is: its settings, data size, aux layers, drafter shape
    metrics.jsonl            one JSON line per logged step
    checkpoints/step-N/      config.json, model.safetensors, training_state.pt (the newest two)
    final/                   the trained drafter

The folder is an :class:`eaglelab.outputs.OutputFolder` (kind ``finetune run``): eaglelab's files
listed, locked while a run writes, never replacing a file eaglelab did not write. A resume reads
every file back through :mod:`eaglelab.inputs` and refuses, in one line, a run it could not
continue exactly: other settings, another drafter shape or vocabulary, fewer steps than the
checkpoint has done, or a metrics line torn anywhere but at the end (a torn last line, what a
kill mid-write leaves, is dropped with a note).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eaglelab.errors import ConfigError
from eaglelab.inputs import MAX_JSON_BYTES, field_int, iter_lines, loads_json, path_kind, printable, read_json_object

RUN_KIND = "finetune run"
RECORD = "run.json"
METRICS = "metrics.jsonl"
#: Settings that may change between a run and its resume: how long it runs and how often it reports.
RESUMABLE_CHANGES = ("steps", "log_every", "eval_every", "checkpoint_every")
_STEP_DIR = re.compile(r"^step-(\d{1,12})$")


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoints (``checkpoints/step-N`` with weights and training state), oldest first."""
    root = Path(run_dir) / "checkpoints"
    if path_kind(root, ConfigError) != "folder":
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / "training_state.pt").is_file() and (p / "model.safetensors").is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def checkpoint_step(path: Path) -> int:
    return int(_STEP_DIR.match(path.name).group(1))


def read_metrics_file(path: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """The metrics lines of a run, and a note when a torn last line was dropped.

    Raises:
        ConfigError: a line other than the last is not a metrics record (the file was edited or
            damaged, not cut short by a kill), or a step number goes backwards.
    """
    path = Path(path)
    where = printable(str(path))
    if path_kind(path, ConfigError) is None:
        return [], None
    rows: list[dict[str, Any]] = []
    bad: tuple[int, str] | None = None
    for n, raw, cut in iter_lines(path, ConfigError, MAX_JSON_BYTES):
        if bad is not None:
            raise ConfigError(where, f"line {bad[0]} is not a metrics record ({bad[1]}) and more lines follow it")
        line = raw.strip()
        if not line:
            continue
        try:
            if cut:
                raise ConfigError(where, "over the line-length cap")
            row = loads_json(line, f"{where} line {n}", ConfigError)
            if not isinstance(row, dict):
                raise ConfigError(where, "not a JSON object")
            field_int(row, "step", f"{where} line {n}", ConfigError, low=1, high=10**12)
        except ConfigError as exc:
            bad = (n, exc.problem)
            continue
        if rows and row["step"] <= rows[-1]["step"]:
            raise ConfigError(where, f"line {n}: step {row['step']} after step {rows[-1]['step']}")
        rows.append(row)
    note = None if bad is None else f"{where}: dropped its torn last line {bad[0]} ({bad[1]})"
    return rows, note


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The metrics lines of a run folder (a torn last line left out)."""
    return read_metrics_file(Path(run_dir) / METRICS)[0]


def run_record(cfg, train_sequences: int, aux_layers, drafter) -> dict[str, Any]:
    """What ``run.json`` says of a run (readable without torch: ``eaglelab recipe --from-run`` reads it)."""
    spec = drafter.spec
    return {"config": asdict(cfg), "train_sequences": int(train_sequences), "aux_layers": list(aux_layers or []),
            "drafter": {"hidden_size": spec.hidden_size, "target_hidden_size": spec.target_hidden_size,
                        "vocab_size": spec.vocab_size, "draft_vocab_size": spec.draft_vocab_size,
                        "aux_layer_ids": list(spec.aux_layer_ids or [])}}


def read_run_record(run_dir: str | Path) -> dict[str, Any] | None:
    """``run.json`` of a run folder, strict JSON (None when there is none).

    Raises:
        ConfigError: unreadable, or without the ``config`` object every record has.
    """
    path = Path(run_dir) / RECORD
    if path_kind(path, ConfigError) is None:
        return None
    record = read_json_object(path, ConfigError)
    if not isinstance(record.get("config"), dict):
        raise ConfigError(printable(str(path)), "is not a run record (no config object)")
    return record


def check_resume(stored: dict[str, Any] | None, new: dict[str, Any], run_dir: Path, done: int) -> list[str]:
    """Refuse a resume that could not continue the stored run exactly; notes on what may change.

    Args:
        stored: the run's ``run.json`` (None: a run folder without one, from before the record).
        new: :func:`run_record` of the run about to resume.
        done: the newest checkpoint's step.

    Returns:
        notes (one line each) on what changed but may: a longer run stretches the learning-rate
        schedule from this step on.

    Raises:
        ConfigError: another setting, drafter shape, vocabulary, aux layers or data size; or
            ``steps`` below the checkpoint's step.
    """
    where = printable(str(run_dir))
    steps = new["config"]["steps"]
    if steps < done:
        raise ConfigError(where, f"its checkpoint is at step {done}, beyond --steps {steps}: resuming cannot go back; "
                                 f"give --steps {done} or more (or start over with --force)")
    if stored is None:
        return []
    changed = []
    for key, value in new["config"].items():
        old = stored["config"].get(key)
        if key not in RESUMABLE_CHANGES and _differs(old, value):
            changed.append(f"{key} {_show(old)} -> {_show(value)}")
    for key in ("train_sequences", "aux_layers"):
        if _differs(stored.get(key), new[key]):
            changed.append(f"{key} {_show(stored.get(key))} -> {_show(new[key])}")
    for key, value in new["drafter"].items():
        old = (stored.get("drafter") or {}).get(key, value)
        if _differs(old, value):
            changed.append(f"drafter {key} {_show(old)} -> {_show(value)}")
    if changed:
        raise ConfigError(where, "cannot resume: the run was started with other settings (" + "; ".join(changed[:4])
                                 + "); resume with the same ones, or start over with --force")
    old_steps = stored["config"].get("steps")
    if isinstance(old_steps, int) and old_steps != steps:
        return [f"{where}: --steps {steps} where the run was started with {old_steps}: the learning-rate schedule "
                f"runs to step {steps} from step {done} on, so the curve is not the one an uninterrupted run gives"]
    return []


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return list(a or []) != list(b or [])
    if isinstance(a, float) or isinstance(b, float):
        try:
            return not math.isclose(float(a), float(b), rel_tol=1e-12)
        except (TypeError, ValueError):
            return True
    return a != b


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return printable(text if len(text) <= 40 else text[:37] + "...")


def load_training_state(path: Path) -> dict[str, Any]:
    """A checkpoint's optimizer state and step: ``torch.load(weights_only=True)``, never a full unpickle.

    Raises:
        ConfigError: the file is not a training state eaglelab wrote (``weights_only`` refuses it, or
            its fields are missing or of the wrong type).
    """
    import torch

    where = printable(str(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle and zip errors of every kind: the file is not one eaglelab wrote
        raise ConfigError(where, f"cannot be read as a training state with weights_only=True "
                                 f"({type(exc).__name__})") from None
    if not isinstance(state, dict) or not isinstance(state.get("optimizer"), dict):
        raise ConfigError(where, "is not a training state (no optimizer state)")
    field_int(state, "step", where, ConfigError, low=1, high=10**12)
    return state
