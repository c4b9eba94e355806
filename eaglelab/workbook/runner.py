"""Execute the numbered notebooks with papermill parameters (``eaglelab run`` and the tests).

Executed copies go to an output folder, never over the sources. A failing cell raises
:class:`NotebookError` naming the notebook, the cell and the error. Parameters are checked before any
kernel starts: names, types against the defaults, and the local folders and files they name.
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import math
import sys
import time
import tokenize
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from eaglelab.errors import NotebookError, ParameterError
from eaglelab.jobs.load import LoadSettings
from eaglelab.jobs.plan import PlanSettings
from eaglelab.outputs import make_folder, open_output_folder, output_path, resolved
from eaglelab.progress import progress as progress_bar
from eaglelab.settings import range_problem, whole_field
from eaglelab.workbook.case import notebook_case
from eaglelab.workbook.choices import check_local_paths
from eaglelab.workbook.feasibility import cannot_run, stand_in
from eaglelab.workbook.report import save_findings, write_game_plan


@dataclass
class NotebookRun:
    """One executed notebook: source, executed copy, seconds; or, ``not_run``, why it could not run here (its
    findings were written in its stead, :func:`eaglelab.workbook.feasibility.stand_in`)."""

    notebook: Path
    output: Path | None
    seconds: float
    not_run: str | None = None


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


#: Longest ``-p`` value read (characters): far beyond any path or list a notebook takes.
MAX_PARAMETER_CHARS = 64 * 1024


def parse_parameter(text: str) -> tuple[str, Any]:
    """``NAME=VALUE``: VALUE read as a Python literal of JSON's types when it is one, else as a string.

    Tuples become lists; sets, bytes, complex numbers, non-finite numbers and dicts with non-string
    keys are refused (a notebook's parameters are JSON data, see :func:`injected_cell`).

    Raises:
        ParameterError: not ``NAME=VALUE``, an invalid name, an over-long value, or a literal of a
            type a parameter cannot hold; one line.
    """
    if "=" not in text:
        raise ParameterError(f"-p {text[:40]}", "parameters are NAME=VALUE")
    name, raw = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise ParameterError(f"-p {name[:40]}", "is not a valid parameter name")
    if len(raw) > MAX_PARAMETER_CHARS:
        raise ParameterError(f"-p {name}", f"the value is {len(raw):,} characters, over the {MAX_PARAMETER_CHARS:,} cap")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return name, raw  # not a literal: the text itself
    return name, as_json_value(value, f"-p {name}")


def as_json_value(value: Any, where: str) -> Any:
    """``value`` with tuples made lists, checked to hold only JSON's types (finite numbers, string keys).

    Raises:
        ParameterError: a set, bytes, complex number, non-finite float, non-string key, or nesting
            deeper than 32 levels.
    """
    def walk(v: Any, depth: int) -> Any:
        if depth > 32:
            raise ParameterError(where, "nested deeper than 32 levels")
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            if not math.isfinite(v):
                raise ParameterError(where, f"{v!r} is not a finite number")
            return v
        if isinstance(v, (list, tuple)):
            return [walk(x, depth + 1) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise ParameterError(where, "a dict's keys must be strings")
            return {k: walk(x, depth + 1) for k, x in v.items()}
        raise ParameterError(where, f"a {type(v).__name__} is not a parameter value (use a list, dict, string, "
                                    "number, True / False or None)")

    return walk(value, 0)


def injected_cell(parameters: dict[str, Any]) -> str:
    """The source of the cell that hands ``parameters`` to the kernel: one JSON document, decoded as data.

    Papermill writes each value as Python source, and its translator has no case for some types
    (it falls back to ``str(value)`` unquoted): a value could end its literal and run. Here the
    values travel as one JSON string inside a Python string literal made by :func:`repr`, which
    for any text is a literal that evaluates to that same text; ``json.loads`` then gives data
    only. Nothing a user types can become code.
    """
    payload = json.dumps(parameters, ensure_ascii=True, allow_nan=False)
    return ("# Parameters set by `eaglelab run` (JSON decoded as data: a value is never read as code)\n"
            "import json as _json\n\n"
            f"globals().update(_json.loads({payload!r}))\n"
            "del _json\n")


def prepare_notebook(notebook: Path, parameters: dict[str, Any]):
    """The notebook as it will run: its parameters cell followed by :func:`injected_cell` (an nbformat node).

    Raises:
        NotebookError: the notebook has no (or several) parameters cells.
    """
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    at = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if len(at) != 1:
        raise NotebookError(notebook.name, f"needs exactly one cell tagged 'parameters', found {len(at)}")
    values = {name: as_json_value(v, f"parameter {name}") for name, v in parameters.items()}
    if values:
        cell = nbformat.v4.new_code_cell(injected_cell(values), metadata={"tags": ["injected-parameters"]})
        nb.cells.insert(at[0] + 1, cell)
    nb.metadata.setdefault("papermill", {})["parameters"] = _recordable(values)
    return nb


def _recordable(value: Any) -> Any:
    """``value`` for the notebook's metadata, a record for people: a lone surrogate (a non-UTF-8 byte of a path)
    written as its escape, since the file is UTF-8. The kernel gets the value itself (:func:`injected_cell`)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [_recordable(v) for v in value]
    if isinstance(value, dict):
        return {_recordable(k): _recordable(v) for k, v in value.items()}
    return value


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


#: The checkpoints' notebook parameters: one name each, in every notebook that takes the checkpoint (the same words
#: as the command line's flags, :data:`eaglelab.cli.arguments.CHECKPOINT_FLAGS`, and the settings' fields).
CHECKPOINT_PARAMETERS = ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER", "NEW_DRAFTER", "OLD_STATES", "NEW_STATES")


def optional_parameters(notebook: Path) -> set[str]:
    """The parameters whose line in the parameters cell says what None means (``# None: skip``): they take None."""
    import nbformat

    cells = [c for c in nbformat.read(notebook, as_version=4).cells
             if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    names: set[str] = set()
    for line in (cells[0].source.splitlines() if len(cells) == 1 else []):
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
        except (tokenize.TokenError, SyntaxError):
            continue
        comment = next((tok.string for tok in tokens if tok.type == tokenize.COMMENT), "")
        if tokens and tokens[0].type == tokenize.NAME and "None" in comment:
            names.add(tokens[0].string)
    return names


def _ranged_fields(*classes: type) -> dict[str, Any]:
    """Parameter name (the field's in capitals) -> the settings field whose declared range it takes."""
    return {f.name.upper(): f for cls in classes for f in fields(cls)
            if any(f.metadata.get(k) is not None for k in ("min", "above", "max"))}


#: Per notebook, the settings fields its parameters are (the same names in capitals): their declared ranges and
#: physical bounds (a step faster than 10 µs, a link of 1e-300 GB/s) hold for ``-p`` values as for flags.
PARAMETER_FIELDS = {"01": _ranged_fields(LoadSettings, PlanSettings)}


def check_parameters(notebooks: list[Path], parameters: dict[str, Any]) -> None:
    """Refuse parameter names that no selected notebook takes, and values of another type than the default's.

    A typo would silently do nothing; ``DRAFT_TOKENS=2.5`` where the notebook counts drafts would
    fail deep inside it. The type rule, from the parameters cell's default: a boolean takes a
    boolean, an integer an integer (not a boolean), a float any number, a string a string, a list a
    list, a dict a dict; a default of None takes any value; None is taken where the parameter's comment
    says what None means (``SERVING_ENGINE = "vllm"  # None: skip``, :func:`optional_parameters`).

    Raises:
        ParameterError: naming the parameter and, for a typo, the likely intended name.
    """
    defaults = [notebook_parameters(nb) for nb in notebooks]
    optional = [optional_parameters(nb) for nb in notebooks]
    known = set().union(*defaults) if notebooks else set()
    for name, value in parameters.items():
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; the notebooks take {', '.join(sorted(known))}"
            raise ParameterError(f"-p {name}", f"no selected notebook has a parameter {name}{hint}")
        for nb, d, may_be_none in zip(notebooks, defaults, optional):
            if value is None and name in may_be_none:
                continue
            if name in d and not _fits(d[name], value):
                raise ParameterError(f"-p {name}", f"{nb.stem} takes {_kind(d[name])} (its default is "
                                                   f"{d[name]!r:.40}), got {_kind(value)}")
            field = PARAMETER_FIELDS.get(nb.stem[:2], {}).get(name)
            for v in (value if isinstance(value, list) else [value]) if field is not None and value is not None else ():
                problem = range_problem(v, field.metadata, whole_field(field))
                if problem:
                    raise ParameterError(f"-p {name}", problem)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "True or False"
    return {int: "a whole number", float: "a number", str: "a string", list: "a list", dict: "a dict"}.get(
        type(value), type(value).__name__)


def _fits(default: Any, value: Any) -> bool:
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        return isinstance(value, list)
    return isinstance(value, type(default))


def absolutise_paths(value: Any, base: Path | None = None) -> Any:
    """Parameter values that name existing relative paths become absolute (notebooks run in ``notebooks/``).

    Strings and lists of strings are checked against ``base`` (default: the current folder); hub ids
    and other strings that name no existing file or folder pass unchanged.
    """
    base = base or Path.cwd()
    if isinstance(value, str) and value and not Path(value).is_absolute():
        try:
            if (base / value).exists():
                return str((base / value).resolve())
        except (OSError, ValueError):  # a name too long, a NUL byte: not a path here, so the value as given
            return value
    if isinstance(value, list):
        return [absolutise_paths(v, base) for v in value]
    return value


def scratch_dir(default: str, figures_dir: str, smoke: bool, notebook: str) -> str:
    """Where a notebook writes its scratch files: ``default``, or beside the figures in smoke runs.

    Smoke runs (the tests, ``eaglelab run --smoke``) send figures to ``OUT/figures``; their
    scratch files go to ``OUT/scratch-NN`` so a smoke run never writes into ``data/``. A notebook set to
    SMOKE in JupyterLab writes its figures to the workbook's own ``figures/`` (beside ``notebooks/``): its
    scratch files go to ``runs/smoke/scratch-NN`` there, where ``eaglelab run --smoke`` keeps its own, not
    to the checkout's root.
    """
    if not smoke:
        return default
    parent = Path(figures_dir).resolve().parent
    if (parent / "notebooks").is_dir():
        parent = parent / "runs" / "smoke"
    return str(parent / f"scratch-{notebook}")


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
    make_folder(output.parent)
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            prepare_notebook(notebook, parameters), str(output), kernel_name=kernel_name,
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
    out_dir: str | Path,
    smoke: bool = False,
    only: list[str] | None = None,
    parameters: dict[str, Any] | None = None,
    notebooks_dir: Path | None = None,
    kernel_name: str | None = None,
    progress: bool = True,
    prepare_only: bool = False,
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
        prepare_only: write each notebook with its parameters cell filled in (:func:`prepare_notebook`),
            without running it: what would run, to read or to open in JupyterLab.
    """
    notebooks_dir = notebooks_dir or find_notebooks_dir()
    out_dir = resolved(output_path(out_dir))
    if out_dir == notebooks_dir.resolve():
        raise NotebookError(out_dir, "the output folder must not be the notebooks folder")
    params: dict[str, Any] = {}
    if smoke:
        params.update(SMOKE=True, FIGURES_DIR=str(out_dir / "figures"))
    given = dict(parameters or {})
    params.update(given)
    runs = []
    notebooks = discover_notebooks(notebooks_dir, only)
    check_parameters(notebooks, given)
    check_local_paths(given, also_in=notebooks_dir, prefix="-p ")  # before any kernel starts
    for nb in notebooks:  # the user's case whole in each notebook, or the demo's: checked before any kernel starts
        notebook_case(nb.name[:2], given)
    with open_output_folder(out_dir, "workbook run", shared=True) as out:
        bar = progress_bar(notebooks, desc="workbook", unit="nb", disable=not progress, leave=True)
        for nb in bar:
            bar.set_postfix_str(nb.stem)
            if prepare_only:
                import nbformat

                prepared = prepare_notebook(nb, params)
                with out.writing(nb.name) as tmp:
                    nbformat.write(prepared, str(tmp))
                runs.append(NotebookRun(nb, out.file(nb.name), 0.0))
            elif (why := cannot_run(nb.name[:2], params)) is not None:
                runs.append(_stand_in(nb, params, why, out_dir))
            else:
                runs.append(run_notebook(nb, out.claim(nb.name), params, kernel_name))
    if not prepare_only and ends_with_game_plan(runs):
        write_game_plan(figures_dir(notebooks_dir, params))
    return runs


def ends_with_game_plan(runs: list[NotebookRun]) -> bool:
    """Whether a run writes the game plan at its end: notebook 04 writes one, but 05 (or a stand-in) may come after
    it, so a run that reached 04 or wrote a stand-in's findings assembles it again."""
    return any(r.not_run or r.notebook.name[:2] >= "04" for r in runs)


def run_figures_dir(out_dir: str | Path, smoke: bool, parameters: dict[str, Any] | None = None,
                    notebooks_dir: Path | None = None) -> Path:
    """Where a run's notebooks write their figures, findings and game plan: ``-p FIGURES_DIR`` as given, else
    ``OUT/figures`` in a smoke run, else the notebooks' default (``figures/`` beside them)."""
    notebooks_dir = notebooks_dir or find_notebooks_dir()
    given = parameters or {}
    if "FIGURES_DIR" not in given and smoke:
        return resolved(output_path(out_dir)) / "figures"
    return figures_dir(notebooks_dir, given)


def figures_dir(notebooks_dir: Path, parameters: dict[str, Any]) -> Path:
    """Where the notebooks write their figures and findings: ``FIGURES_DIR`` as given, else their default
    (``../figures``), taken from the notebooks' folder as the kernel takes it."""
    value = parameters.get("FIGURES_DIR")
    return (notebooks_dir / (value if isinstance(value, str) and value else "../figures")).resolve()


def _stand_in(notebook: Path, parameters: dict[str, Any], why: tuple[str, str], out_dir: Path) -> NotebookRun:
    """Write the findings of a notebook that cannot run here (its reason and its recipes), and say so."""
    start = time.perf_counter()
    number = notebook.name[:2]
    found = stand_in(number, parameters, why, out_dir)
    save_findings(number, found["numbers"], found["bullets"], figures_dir(notebook.parent, parameters))
    print(f"note: {notebook.stem} not run here: {why[1]}", file=sys.stderr)
    return NotebookRun(notebook, None, time.perf_counter() - start, not_run=why[1])
