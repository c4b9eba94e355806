"""Execute the numbered notebooks with papermill parameters (``eaglelab run`` and the tests).

Executed copies go to an output folder, never over the sources. A failing cell raises
:class:`NotebookError` naming the notebook, the cell and the error.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.errors import NotebookError, ParameterError


@dataclass
class NotebookRun:
    """One executed notebook: source, executed copy, seconds."""

    notebook: Path
    output: Path
    seconds: float


def find_notebooks_dir(start: Path | None = None) -> Path:
    """The workbook's ``notebooks/`` folder: under the current folder, else beside the package."""
    for base in (start or Path.cwd(), Path(__file__).resolve().parents[2]):
        cand = base / "notebooks"
        if cand.is_dir() and any(cand.glob("[0-9][0-9]_*.ipynb")):
            return cand
    raise NotebookError("notebooks/", "no numbered notebooks found; run from the eaglelab checkout")


def discover_notebooks(notebooks_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Numbered notebooks in order, optionally only those whose number or name matches ``only``."""
    notebooks = sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb"))
    if only:
        wanted = [o.strip() for o in only]
        picked = [nb for nb in notebooks if any(nb.name.startswith(w.zfill(2)) or w in nb.stem for w in wanted)]
        unknown = [w for w in wanted if not any(nb.name.startswith(w.zfill(2)) or w in nb.stem for nb in notebooks)]
        if unknown:
            raise ParameterError("--only", f"no notebook matches {unknown}; have {[nb.stem for nb in notebooks]}")
        notebooks = picked
    return notebooks


def parse_parameter(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` with VALUE read as a Python literal when it is one, else as a string."""
    if "=" not in text:
        raise ParameterError(text, "parameters are NAME=VALUE")
    name, raw = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise ParameterError(text, f"{name!r} is not a valid parameter name")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return name, value


def notebook_parameters(notebook: Path) -> dict[str, Any]:
    """The names and default values of a notebook's ``parameters``-tagged cell (literals only).

    Raises:
        NotebookError: the notebook has no parameters cell, or it does not parse.
    """
    import nbformat

    cells = [c for c in nbformat.read(notebook, as_version=4).cells
             if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise NotebookError(notebook.name, f"needs exactly one cell tagged 'parameters', found {len(cells)}")
    try:
        tree = ast.parse(cells[0].source)
    except SyntaxError as exc:
        raise NotebookError(notebook.name, f"the parameters cell does not parse ({exc.msg})") from None
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    try:
                        out[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        out[target.id] = None
    return out


def check_parameters(notebooks: list[Path], parameters: dict[str, Any]) -> None:
    """Refuse parameter names that no selected notebook takes (a typo would silently do nothing).

    Raises:
        ParameterError: naming the unknown parameter and, when one is close, the likely intended name.
    """
    import difflib

    known = set().union(*(notebook_parameters(nb) for nb in notebooks)) if notebooks else set()
    for name in parameters:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; the notebooks take {', '.join(sorted(known))}"
            raise ParameterError(f"-p {name}", f"no selected notebook has a parameter {name}{hint}")


def absolutise_paths(value: Any, base: Path | None = None) -> Any:
    """Parameter values that name existing relative paths become absolute (notebooks run in ``notebooks/``).

    Strings and lists of strings are checked against ``base`` (default: the current folder); hub ids
    and other strings that name no existing file or folder pass unchanged.
    """
    base = base or Path.cwd()
    if isinstance(value, str) and value and not Path(value).is_absolute() and (base / value).exists():
        return str((base / value).resolve())
    if isinstance(value, list):
        return [absolutise_paths(v, base) for v in value]
    return value


def scratch_dir(default: str, figures_dir: str, smoke: bool, notebook: str) -> str:
    """Where a notebook writes its scratch files: ``default``, or beside the figures in smoke runs.

    Smoke runs (the tests, ``eaglelab run --smoke``) send figures to ``OUT/figures``; their
    scratch files go to ``OUT/scratch-NN`` so a smoke run never writes into ``data/``.
    """
    return str(Path(figures_dir).resolve().parent / f"scratch-{notebook}") if smoke else default


def run_notebook(notebook: Path, output: Path, parameters: dict[str, Any],
                 kernel_name: str | None = None, timeout_s: int | None = None) -> NotebookRun:
    """Execute one notebook with papermill and write the executed copy to ``output``.

    Raises:
        NotebookError: a cell failed; the message names the notebook, cell number, the
            cell's first line, and the exception.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    if output.resolve() == notebook.resolve():
        raise NotebookError(output, "refusing to write an executed copy over the source notebook")
    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name=kernel_name,
            cwd=str(notebook.parent), progress_bar=False, log_output=False,
            execution_timeout=timeout_s,
        )
    except PapermillExecutionError as exc:
        first = next((ln for ln in (exc.source or "").splitlines() if ln.strip()), "")
        raise NotebookError(
            notebook.name,
            f"code cell {_source_code_cell_number(output, exc.cell_index)} (`{first[:80]}`) failed: {exc.ename}: "
            f"{str(exc.evalue)[:300]} — executed copy with the traceback: {output}",
        ) from None
    return NotebookRun(notebook, output, time.perf_counter() - start)


def _source_code_cell_number(executed: Path, cell_index: int) -> int | str:
    """1-based number of the failing cell among the *source* notebook's code cells.

    The executed copy holds papermill's extra cells (an error banner, the injected
    parameters), so the failing cell is found by its error output, not by index.
    """
    import nbformat

    try:
        cells = nbformat.read(executed, as_version=4).cells
    except Exception:  # the copy is unreadable: fall back to papermill's index
        return cell_index + 1
    number = 0
    for c in cells:
        if c.cell_type != "code" or "injected-parameters" in c.metadata.get("tags", []):
            continue
        number += 1
        if any(o.get("output_type") == "error" for o in c.get("outputs", [])):
            return number
    return cell_index + 1


def run_workbook(
    out_dir: Path,
    smoke: bool = False,
    only: list[str] | None = None,
    parameters: dict[str, Any] | None = None,
    notebooks_dir: Path | None = None,
    kernel_name: str | None = None,
    progress: bool = True,
) -> list[NotebookRun]:
    """Run the numbered notebooks in order.

    Args:
        out_dir: folder for executed copies (and, in smoke runs, figures).
        smoke: pass ``SMOKE=True`` and send figures to ``out_dir/figures`` instead of ``figures/``.
        only: notebook numbers or name parts to run.
        parameters: extra papermill parameters for every notebook.
        notebooks_dir: defaults to :func:`find_notebooks_dir`.
        kernel_name: Jupyter kernel (default: the notebook's, which resolves to this Python).
        progress: show a progress bar.
    """
    from eaglelab.progress import progress as progress_bar

    notebooks_dir = notebooks_dir or find_notebooks_dir()
    out_dir = Path(out_dir).resolve()
    if out_dir == notebooks_dir.resolve():
        raise NotebookError(out_dir, "the output folder must not be the notebooks folder")
    params: dict[str, Any] = {}
    if smoke:
        params.update(SMOKE=True, FIGURES_DIR=str(out_dir / "figures"))
    params.update(parameters or {})
    runs = []
    notebooks = discover_notebooks(notebooks_dir, only)
    check_parameters(notebooks, parameters or {})
    bar = progress_bar(notebooks, desc="workbook", unit="nb", disable=not progress, leave=True)
    for nb in bar:
        bar.set_postfix_str(nb.stem)
        runs.append(run_notebook(nb, out_dir / nb.name, params, kernel_name))
    return runs
