"""The browser-test harness checks itself: JupyterLab in Chromium renders and drives ipywidgets.

A tiny notebook (an IntSlider, an HTML widget kept at ``square: n*n`` by ``observe``, a reset
Button) is run in JupyterLab (tests/browser.py) and worked like a user would: keyboard on the
slider, a click on the button. Screenshots go to tests.browser.artifacts_dir("harness").
Skips with the reason where Playwright or a system Chromium is missing (.ci/run installs Debian's).
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import nbformat
import pytest

from tests.browser import (
    artifacts_dir,
    browser_page,
    browser_skip_reason,
    cell_errors,
    cell_outputs_text,
    click_button,
    jupyter_lab,
    move_slider,
    open_notebook,
    run_all,
    run_below,
    screenshot,
    set_text,
    slider_value,
    wait_for_widget_text,
    widget_texts,
    widget_value,
)

CELL = """\
import ipywidgets as w
from IPython.display import display

n = w.IntSlider(value=3, min=0, max=10, description="n")
square = w.HTML(f"square: {n.value * n.value}")
reset = w.Button(description="reset")
n.observe(lambda change: setattr(square, "value", f"square: {change['new'] ** 2}"), names="value")
reset.on_click(lambda _: setattr(n, "value", 3))
display(w.VBox([n, square, reset]))
print("widgets shown")
"""


@pytest.mark.browser
@pytest.mark.browser_harness
def test_harness_drives_ipywidgets_in_jupyterlab(tmp_path):
    if reason := browser_skip_reason():
        pytest.skip(reason)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, tmp_path / "harness.ipynb")
    out = artifacts_dir("harness")

    with jupyter_lab(tmp_path, env={"HF_HUB_OFFLINE": "1"}) as lab, browser_page(out) as page:
        open_notebook(page, lab, "harness.ipynb")
        run_all(page, timeout_s=60)
        assert "widgets shown" in cell_outputs_text(page)[0]
        wait_for_widget_text(page, "square: 9")
        assert slider_value(page, "n") == 3
        screenshot(page, out, "1-ran")

        move_slider(page, "n", +2)  # keyboard: two ArrowRight presses on the handle
        wait_for_widget_text(page, "square: 25")
        assert slider_value(page, "n") == 5 and "square: 9" not in widget_texts(page)
        screenshot(page, out, "2-moved")

        click_button(page, "reset")
        wait_for_widget_text(page, "square: 9")
        assert slider_value(page, "n") == 3
        screenshot(page, out, "3-reset")


# --------------------------------------------------------------------------- the workbook itself, as a user works it

def _prepare(tmp_path, number: str, upto: str | None = None, parameters: dict | None = None):
    """The repository's notebook ``number`` with ``SMOKE = True`` and ``parameters`` injected (papermill, not
    executed).

    It lies in ``tmp/notebooks`` beside a link to the repository's ``data/``, so its relative paths
    (sample logs, fixtures) resolve; figures and scratch files go to ``tmp/figures`` / ``tmp/runs/smoke/scratch-NN``.
    ``upto``: keep the cells up to the first whose source holds this text (the smoke run tests the rest).
    """
    import papermill as pm

    from tests.conftest import REPO

    (tmp_path / "notebooks").mkdir(exist_ok=True)
    if not (tmp_path / "data").exists():
        (tmp_path / "data").symlink_to(REPO / "data")
    source = next((REPO / "notebooks").glob(f"{number}_*.ipynb"))
    target = tmp_path / "notebooks" / source.name
    pm.execute_notebook(str(source), str(target), parameters={"SMOKE": True, **(parameters or {})},
                        prepare_only=True, progress_bar=False)
    if upto:
        nb = nbformat.read(target, as_version=4)
        nb.cells = nb.cells[:next(i for i, c in enumerate(nb.cells) if upto in c.source) + 1]
        nbformat.write(nb, target)
    return f"notebooks/{source.name}"


def _lab_env() -> dict[str, str]:
    import os

    return {"HF_HUB_OFFLINE": "1", "EAGLELAB_WORLDS": os.environ["EAGLELAB_WORLDS"]}  # the tiny world the fixture built


@contextmanager
def _ran(tmp_path, number: str, artifacts: str, upto: str | None = None, env: dict[str, str] | None = None,
         parameters: dict | None = None):
    """Notebook ``number`` (see :func:`_prepare`) opened in JupyterLab in Chromium and Run All done: ``(page, out)``."""
    if reason := browser_skip_reason():
        pytest.skip(reason)
    name, out = _prepare(tmp_path, number, upto, parameters), artifacts_dir(artifacts)
    with jupyter_lab(tmp_path, env={**_lab_env(), **(env or {})}) as lab, browser_page(out) as page:
        open_notebook(page, lab, name)
        run_all(page, timeout_s=600)
        yield page, out


def _numbers(page) -> str:
    return next(t for t in widget_texts(page) if "tok/s ·" in t)


@pytest.mark.browser
def test_notebook_01_explorer_prints_its_numbers_live(tiny_world, tmp_path):
    from eaglelab.workbook.widgets import explorer_numbers

    # the explorer reads the notebook's numbers; vLLM's sections are the smoke run's (test_workbook.py)
    with _ran(tmp_path, "01", "01-explorer", parameters={"SERVING_ENGINE": None}) as (page, out):
        at_start = explorer_numbers(82.0, 30.0, 2.0, [100, 150, 200])
        wait_for_widget_text(page, f"{at_start.effective_tps:.1f} tok/s · {at_start.speedup:.2f}× plain")
        first = _numbers(page)
        assert f"break-even τ {at_start.break_even_tau:.2f}" in first and "150 tok/s → τ 4.50" in first
        screenshot(page, out, "1-explorer")

        move_slider(page, "accept len τ", +20)  # one action: τ 2.0 -> 3.0 with the keyboard
        moved = explorer_numbers(82.0, 30.0, 3.0, [100, 150, 200])
        wait_for_widget_text(page, f"{moved.effective_tps:.1f} tok/s · {moved.speedup:.2f}× plain")
        assert slider_value(page, "accept len τ") == 3.0
        screenshot(page, out, "2-moved")

        click_button(page, "reset to measured")
        wait_for_widget_text(page, first)
        assert slider_value(page, "accept len τ") == 2.0
        screenshot(page, out, "3-reset")


@pytest.mark.browser
def test_notebook_02_picker_answers_in_two_actions_and_run_all_keeps_it(tiny_world, tmp_path):
    with _ran(tmp_path, "02", "02-picker") as (page, out):
        wait_for_widget_text(page, "✓ drafter: hidden 64")
        before = "\n".join(cell_outputs_text(page))
        assert "vocabulary maps: moved" in before  # drafter-a vs drafter-b-small: same shapes, another vocabulary map
        screenshot(page, out, "1-ran")

        set_text(page, "new drafter (B)", "/no/such/drafter")  # a typo: one line in the widget, no traceback
        wait_for_widget_text(page, "✗ /no/such/drafter: no such file or folder")
        assert "Traceback" not in "\n".join(widget_texts(page))
        screenshot(page, out, "2-typo")

        set_text(page, "new drafter (B)", str(tiny_world.drafter_a))  # action 1: the choice
        wait_for_widget_text(page, "the same checkpoint as old drafter (A): this compares it with itself")
        click_button(page, "Compare")  # action 2: the answer, in place
        page.get_by_text(re.compile(r"INTERCHANGEABLE \[demo\]: ")).wait_for(timeout=60_000)
        wait_for_widget_text(page, "answered in")
        screenshot(page, out, "3-answered")

        run_all(page, timeout_s=300)  # Run All keeps the choice: the whole notebook answers for it
        assert widget_value(page, "new drafter (B)") == str(tiny_world.drafter_a)
        after = "\n".join(cell_outputs_text(page))
        assert "vocabulary maps: same" in after and "are the same checkpoint" in after
        screenshot(page, out, "4-run-all")


@pytest.mark.browser
@pytest.mark.parametrize("number, label, pick, button, answer, upto", [
    ("03", "new target (B)", "target_a", "Probe", re.compile(r"Verdict \[demo\]: PLUG IN · drafter .* · τ \(teacher "
                                                             r"forced, k = 3\) (\d\.\d\d) on A vs (\d\.\d\d) on B"),
     "computing on "),
    ("04", "old drafter", "drafter_b_small", "Fine-tune", re.compile(r"on held-out τ \(teacher forced, k = 5, 20 steps each"),
     "case.panel("),
], ids=["03", "04"])
def test_notebooks_03_04_pickers_answer_in_two_actions(tiny_world, tmp_path, number, label, pick, button, answer, upto):
    choice = str(getattr(tiny_world, pick))
    # only up to the panel (03: and the cell below it; the smoke run tests the rest); progress bars on, as a user has them
    with _ran(tmp_path, number, f"{number}-picker", upto=upto, env={"EAGLELAB_PROGRESS": "1"}) as (page, out):
        wait_for_widget_text(page, "✓ drafter: hidden 64")
        screenshot(page, out, "1-ran")

        set_text(page, label, choice)  # action 1: the choice
        click_button(page, button)  # action 2: the answer, in place, with progress
        wait_for_widget_text(page, "answered in", timeout_s=300)
        wait_for_widget_text(page, {"03": "plug-in probe", "04": "warm start vs scratch"}[number])  # its progress bar
        found = answer.search("\n".join(page.locator(".jp-OutputArea").all_inner_texts()))
        assert found, "the answer for the new choice is shown in the panel"
        if number == "03":  # B is A now: the probe sees one target twice
            assert found.group(1) == found.group(2)
        screenshot(page, out, "2-answered")

        if number == "03":  # #54: Run > Run Selected Cell and All Below: the set-up has not taken the pick
            assert "refused until the set-up cell runs again" in "\n".join(widget_texts(page))
            run_below(page, "case.panel(", timeout_s=300)
            errors = cell_errors(page)
            assert len(errors) == 1 and "StalePickError: picks: new target (B) " in errors[0], errors
            assert f"-> {choice} since the set-up cell ran" in errors[0] and "computing on" not in "\n".join(
                cell_outputs_text(page)), "a cell below computed on the set-up's checkpoints"
            screenshot(page, out, "3-run-below-refused")

        run_all(page, timeout_s=300)  # Run All keeps the choice, and the cells below compute on it
        assert widget_value(page, label) == choice
        if number == "03":
            below = "\n".join(cell_outputs_text(page))
            assert f"B {choice} · drafter {tiny_world.drafter_a}" in below and "computing on [demo]" in below, below
        screenshot(page, out, "4-run-all")
