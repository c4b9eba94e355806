"""ipywidgets front ends over pure functions (ipywidgets is imported lazily).

Each widget's logic lives in plain functions that the notebooks and the tests also call:
:mod:`eaglelab.workbook.choices` behind :class:`ChoicePanel`, :func:`find_checkpoints` behind the
pickers, :func:`explorer_numbers` (:func:`eaglelab.serving.perf.diagnose`) behind :func:`perf_explorer`.
"""

from __future__ import annotations

import fnmatch
import html
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.spec import is_eagle3_config
from eaglelab.errors import ConfigError, EaglelabError
from eaglelab.inputs import printable, read_json_object
from eaglelab.workbook.choices import DATA, DRAFTER, TARGET, Check, Choices, stale_picks

LABEL_WIDTH = "11em"  # one width for every picker's label, so the boxes line up


#: Most folder entries a picker's search looks at: a root such as ``/`` lists nothing rather than hanging.
MAX_ENTRIES = 20_000


def _files(root: Path, pattern: str, max_depth: int):
    """Files matching ``pattern`` under ``root``, at most ``max_depth`` folders down.

    A bounded walk: hidden folders skipped, symlinked folders not followed, at most
    :data:`MAX_ENTRIES` entries looked at, unreadable folders passed over.
    """
    if not root.is_dir():
        return
    seen = 0
    stack = [(root, 0)]
    found = []
    while stack and seen < MAX_ENTRIES:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if e.name.startswith("."):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    if depth < max_depth:
                        stack.append((Path(e.path), depth + 1))
                elif fnmatch.fnmatch(e.name, pattern):
                    found.append(Path(e.path))
            except OSError:
                continue
    yield from sorted(found)


def _configs(root: Path, max_depth: int):
    """``(folder, config)`` for every readable config.json under ``root`` that has safetensors beside it.

    Each config is read as hostile input (:func:`eaglelab.inputs.read_json_object`: a regular file,
    never a blocking open, 1 MB at most): a FIFO or a huge file named config.json is passed over.
    """
    for cfg in _files(root, "config.json", max_depth):
        try:
            obj = read_json_object(cfg, ConfigError, limit=1 << 20)
            if any(cfg.parent.glob("*.safetensors")):
                yield cfg.parent, obj
        except (ConfigError, OSError):
            continue


def find_checkpoints(root: str | Path, max_depth: int = 4) -> list[str]:
    """EAGLE-3 drafter folders under ``root``: a config.json naming an Eagle3 architecture plus weights.

    Returns:
        sorted folder paths (strings), speculators exports included.
    """
    return sorted(str(folder) for folder, cfg in _configs(Path(root), max_depth) if is_eagle3_config(cfg))


def find_targets(root: str | Path, max_depth: int = 4) -> list[str]:
    """Causal-LM folders under ``root`` (a ``*ForCausalLM`` config plus weights), drafters excluded."""
    return sorted(str(folder) for folder, cfg in _configs(Path(root), max_depth)
                  if not is_eagle3_config(cfg) and any(str(a).endswith("ForCausalLM") for a in cfg.get("architectures") or []))


def find_data(root: str | Path, max_depth: int = 3) -> list[str]:
    """Text and JSONL files under ``root`` (candidates for a notebook's ``DATA``)."""
    return sorted(str(p) for ext in ("jsonl", "txt") for p in _files(Path(root), f"*.{ext}", max_depth))


_FINDERS = {DRAFTER: find_checkpoints, TARGET: find_targets, DATA: find_data}


def checkpoint_picker(root: str | Path, description: str, value: str = "", kind: str = DRAFTER):
    """A combobox of the checkpoints found under ``root`` that also takes a typed path or hub id.

    The value is sent when the user presses Enter, leaves the box or presses a button, not at every
    keystroke: a half-typed hub id is never looked up.
    """
    import ipywidgets as w

    options = _FINDERS[kind](root) if str(root) else []  # no folder given: nothing to list (not the cwd)
    return w.Combobox(value=value or (options[0] if options else ""), options=options, description=description,
                      placeholder="folder, .safetensors file or hub id" if kind != DATA else "a .txt / .jsonl file, or empty",
                      ensure_option=False, continuous_update=False, layout=w.Layout(width="70%"),
                      style={"description_width": LABEL_WIDTH})


def check_html(check: Check) -> str:
    """A check as one coloured line (green: usable, amber: usable but worth a look, red: the problem)."""
    mark, colour = ("✗", "#cf222e") if not check.ok else ("⚠", "#9a6700") if check.warn else ("✓", "#1a7f37")
    return f"<span style='color:{colour}'>{mark} {html.escape(check.line)}</span>"


def _one_line_error(exc: BaseException) -> str:
    if isinstance(exc, EaglelabError):
        return printable(str(exc))
    return printable(f"{type(exc).__name__}: {exc}") + " (run the cells below for the full error)"


class ChoicePanel:
    """Pickers for a notebook's checkpoints, checked as they change, and a button that answers in place.

    Each picker lists what was found under the choices' root and takes any typed folder, file or
    hub id; its line below says what the checkpoint is or what is wrong with it (no traceback). The
    button records the picks (Run All keeps them, :class:`~eaglelab.workbook.choices.Choices`) and runs
    ``answer`` with progress shown in the panel. The notebook's variables take the picks where they are
    made, in the set-up cell: until it runs again, the kernel refuses the other cells in one line
    (:func:`~eaglelab.workbook.choices.stale_picks`), and the status line says so.

    An answer is only ever shown for the picks it was computed for: when a pick changes (right or
    wrong), the answer is cleared and a line says which picks it was for (:func:`out_of_date_line`)
    until the button is pressed again.

    Args:
        choices: the notebook's slots, parameters and picks.
        answer: ``answer(values) -> list of displayable objects`` (tables, Markdown): the notebook's
            answer for the chosen checkpoints, computed by package functions.
        button: the button's text.
    """

    def __init__(self, choices: Choices, answer: Callable[[dict[str, str]], Sequence[Any]], button: str = "Recompute"):
        import ipywidgets as w

        self.choices, self.answer = choices, answer
        self.pickers = {s.name: checkpoint_picker(choices.root, s.label, choices.value(s.name), s.kind)
                        for s in choices.slots}
        self.lines = {name: w.HTML(layout=w.Layout(margin=f"0 0 4px {LABEL_WIDTH}")) for name in self.pickers}
        self.button = w.Button(description=button, button_style="primary", icon="play",
                               layout=w.Layout(width="auto"))
        self.status = w.HTML()
        self.stale = w.HTML()  # says that an answer was cleared, and for which picks it was
        self.output = w.Output()
        self.answered: dict[str, str] | None = None  # the picks the output shown is for (None: nothing shown)
        for p in self.pickers.values():
            p.observe(self._changed, names="value")
        self.button.on_click(self._clicked)
        rows = [r for name in self.pickers for r in (self.pickers[name], self.lines[name])]
        # picks Run All dropped (the parameter edited since, or the checkpoint gone): said, not silent
        notes = [w.HTML(check_html(Check(True, note, warn=True))) for note in choices.notes]
        self.widget = w.VBox([*notes, *rows, w.HBox([self.button, self.status]), self.stale, self.output])
        self._changed()

    def values(self) -> dict[str, str]:
        """The pickers' values, by the notebook variable each sets."""
        return {name: p.value.strip() for name, p in self.pickers.items()}

    def _changed(self, *_) -> dict[str, Check]:
        values = self.values()
        checks = self.choices.check(values)
        for name, c in checks.items():
            self.lines[name].value = check_html(c)
        ok = all(c.ok for c in checks.values())
        self.button.disabled = not ok
        self.status.value = "" if ok else "<i>fix the choices marked ✗ first</i>"
        if self.answered is not None and values != self.answered:
            self._clear_answer(values)
        return checks

    def _clear_answer(self, values: dict[str, str]) -> None:
        """The picks moved away from those the answer shown was computed for: clear it, and say so."""
        self.output.clear_output()
        self.output.outputs = ()  # the front end's copy too, kernel or none
        self.stale.value = check_html(Check(True, out_of_date_line(self.choices, self.answered, values,
                                                                   self.button.description), warn=True))
        self.answered = None

    def _clicked(self, *_) -> None:
        self.run()

    def run(self) -> bool:
        """Check, record the picks, and compute the answer into the panel. Returns whether it answered."""
        from IPython.display import display

        if not all(c.ok for c in self._changed().values()):
            return False
        values = self.values()
        for name, value in values.items():
            self.choices.pick(name, value)
        self.button.disabled = True
        self.status.value = "<i>computing…</i>"
        self.stale.value = ""
        self.answered = values  # what the output will show is for these picks, answered or failed part way
        start = time.perf_counter()
        done = False
        with self.output:
            self.output.clear_output()
            try:
                for item in self.answer(values):
                    display(item)
                done = True
            except Exception as exc:  # noqa: BLE001 — the widget shows one line; the cells below show the rest
                self.status.value = check_html(Check(False, _one_line_error(exc)))
        self.button.disabled = False
        if done:
            below = ("the cells below are refused until the set-up cell runs again with it (Run All keeps it)"
                     if stale_picks() else "the cells below read this choice")
            self.status.value = f"answered in {time.perf_counter() - start:.1f} s · {below}"
        return done

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def out_of_date_line(choices: Choices, old: dict[str, str], new: dict[str, str], button: str) -> str:
    """The line that replaces a cleared answer: which picks it was for, and what to press.

    ``"out of date: the answer was for old target (A) /w/target-a, and was cleared; press Probe to answer
    for the picks above"`` (only the picks that changed are named; an empty one as "empty").
    """
    changed = [f"{choices.slot(name).label} {printable(value) or 'empty'}" for name, value in old.items()
               if new.get(name) != value]
    return (f"out of date: the answer was for {', '.join(changed) or 'other picks'}, and was cleared; press "
            f"{button} to answer for the picks above")


# --------------------------------------------------------------------------- the performance explorer

def explorer_numbers(baseline_tps: float, cycle_ms: float, accept_len: float, goals: Sequence[float]):
    """What the explorer prints for a point: tok/s, speedup, break-even τ and the τ each target needs
    (:class:`eaglelab.serving.perf.Diagnosis`)."""
    from eaglelab.serving import perf

    return perf.diagnose(baseline_tps, cycle_ms, accept_len, list(goals), strict=False)


def explorer_html(numbers, k: int | None = None) -> str:
    """The explorer's numbers (a :class:`~eaglelab.serving.perf.Diagnosis`) as one line of HTML; with ``k``, a τ above
    k + 1 (no chain of k drafts gives it) is marked."""
    need = ", ".join(f"{t} tok/s → τ {v:.2f}" + (f" (beyond k + 1 = {k + 1})" if k is not None and v > k + 1 else "")
                     for t, v in numbers.required_accept_len.items())
    colour = "#1a7f37" if numbers.pays else "#cf222e"
    return (f"<b style='color:{colour}'>{numbers.effective_tps:.1f} tok/s · {numbers.speedup:.2f}× plain</b>"
            f" · break-even τ {numbers.break_even_tau:.2f} · needed: {need}")


def perf_explorer(baseline_tps: float, cycle_ms: float, accept_len: float, goals: Sequence[float],
                  accept_grid=None, k: int | None = None):
    """Sliders for baseline tok/s, cycle ms and τ; prints the numbers at once, redraws the figure, resets.

    Args:
        baseline_tps, cycle_ms, accept_len: the measured point (where "reset" returns).
        goals: the throughputs wanted (tok/s) whose τ the explorer prints.
        accept_grid: τ values of the figure's curve (default 1..7).
        k: drafts per cycle: a needed τ above k + 1 is marked unreachable.
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    import numpy as np
    from IPython.display import display

    from eaglelab.serving import perf
    from eaglelab.workbook import plots

    grid = np.linspace(1.0, 7.0, 121) if accept_grid is None else accept_grid
    style = {"description_width": "initial"}
    b = w.FloatSlider(value=baseline_tps, min=5, max=max(400, 2 * baseline_tps), step=1, description="baseline tok/s",
                      style=style, continuous_update=False)
    c = w.FloatSlider(value=cycle_ms, min=2, max=max(100, 2 * cycle_ms), step=0.5, description="cycle ms", style=style,
                      continuous_update=False)
    a = w.FloatSlider(value=accept_len, min=1, max=8, step=0.05, description="accept len τ", style=style,
                      continuous_update=False)
    reset = w.Button(description="reset to measured", icon="undo", layout=w.Layout(width="auto"))
    numbers = w.HTML()
    out = w.Output()

    resetting = []

    def update(*_):
        if resetting:
            return
        n = explorer_numbers(b.value, c.value, a.value, goals)
        numbers.value = explorer_html(n, k)  # first: the numbers do not wait for the figure
        fig = plots.plot_tps_vs_accept_len(grid, {f"cycle {c.value:g} ms": perf.effective_tps(grid, c.value / 1e3)},
                                           b.value, points=[(a.value, n.effective_tps, n.verdict.split(":")[0])],
                                           goals=list(goals))
        with out:
            out.clear_output(wait=True)
            display(fig)
        plt.close(fig)

    def back(*_):
        resetting.append(True)  # one redraw for the three values, not three
        try:
            b.value, c.value, a.value = baseline_tps, cycle_ms, accept_len
        finally:
            resetting.clear()
        update()

    for s in (b, c, a):
        s.observe(update, names="value")
    reset.on_click(back)
    update()
    return w.VBox([w.HBox([b, c, a]), w.HBox([reset, numbers]), out])
