"""Which notebooks can run here on the user's checkpoints, and what stands in for one that cannot.

Notebooks 03 (live), 04 and 05 load whole targets. A pair of 1T-parameter targets does not load on a
workstation, and nothing in the notebook can change that: the notebook then says so in one line when run
alone (:func:`require_loadable`), and ``eaglelab run`` does not start it but writes its findings itself
(:func:`stand_in`): what it could not do, why (the memory the target needs against what is here), and what
to run instead: the engines' dumps and the probe on them (``OLD_STATES`` / ``NEW_STATES``, the dump recipe)
for 03, the warm-start recipes for 04. The game plan then shows the reason where the section would be.

Metadata only: configs and safetensors headers (no torch), so the whole-workbook line at Kimi scale runs on
any machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.targets.footprint import fits_here
from eaglelab.engines.probe_recipes import ProbeRecipeSettings, write_probe_recipe
from eaglelab.engines.recipes import TRAINING_ENGINES, RecipeSettings, build_recipe
from eaglelab.errors import EaglelabError, ParameterError
from eaglelab.workbook.case import CHECKPOINTS, given
from eaglelab.workbook.choices import locate
from eaglelab.workbook.inputs_record import record_inputs

#: The targets each notebook loads whole (by parameter name).
LOADS = {"03": ("OLD_TARGET", "NEW_TARGET"), "04": ("NEW_TARGET",), "05": ("OLD_TARGET", "NEW_TARGET")}
#: The notebooks whose ``DTYPE`` parameter says how they load a target; the others load in float32.
TAKES_DTYPE = ("03", "04")
#: Notebook 03 loads no target when the engines' dumps of both are given.
DUMPS = ("OLD_STATES", "NEW_STATES")


def cannot_run(notebook: str, parameters: Mapping[str, Any]) -> tuple[str, str] | None:
    """Why ``notebook`` cannot run here on the checkpoints in ``parameters``: ``(name, one line)``, or None.

    Only the user's checkpoints are checked (a name left unset is the offline world's, which loads anywhere),
    from their headers (:func:`~eaglelab.checkpoints.targets.footprint.fits_here`), in the dtype the notebook loads.
    """
    if notebook == "03" and all(given(parameters.get(n)) for n in DUMPS):
        return None
    given_dtype = parameters.get("DTYPE")
    dtype = given_dtype if notebook in TAKES_DTYPE and isinstance(given_dtype, str) else "float32"
    for name in LOADS.get(notebook, ()):
        value = parameters.get(name)
        if not given(value) or not isinstance(value, str):
            continue
        fit = fits_here(locate(value), dtype)
        if not fit.loads:
            return name, fit.line
    return None


def require_loadable(notebook: str, parameters: Mapping[str, Any]) -> None:
    """Refuse, in one line, a notebook run alone on a target too large to load here (before any world or model).

    Raises:
        ParameterError: naming the target's parameter, what it needs and what to run instead.
    """
    why = cannot_run(notebook, parameters)
    if why is not None:
        raise ParameterError(why[0], f"{why[1]} — {INSTEAD[notebook]}")


#: What to run instead, per notebook, when its targets do not load here.
INSTEAD = {
    "03": "probe from the engines' dumps instead: `eaglelab recipe --job probe` writes the script that dumps both "
          "targets, then set OLD_STATES and NEW_STATES",
    "04": "no fine-tune runs here; the warm-start recipes (`eaglelab recipe`) train it on the cluster",
    "05": "the sweep loads both targets; `eaglelab predict` takes the engines' logprobs of both instead",
}


def stand_in(notebook: str, parameters: Mapping[str, Any], why: tuple[str, str], out_dir: str | Path) -> dict:
    """The findings of a notebook that cannot run here: the reason, and the recipes that do its work at scale.

    Writes the recipes (03: the dump-and-probe script; 04: a warm-start script per training engine) under
    ``out_dir/recipes-NN`` and returns ``{"numbers": ..., "bullets": ...}`` for
    :func:`~eaglelab.workbook.report.save_findings`. A recipe an engine cannot write is a bullet saying why.
    """
    name, line = why
    bullets = [f"- **Not run here:** {line} — {INSTEAD[notebook]}."]
    recipes: dict[str, str] = {}
    folder = Path(out_dir) / f"recipes-{notebook}"
    p = {k: locate(v) if isinstance(v, str) else v for k, v in parameters.items()}
    try:
        if notebook == "03" and all(given(p.get(n)) for n in ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER")):
            recipe = write_probe_recipe(ProbeRecipeSettings("specforge", p["OLD_DRAFTER"], p["OLD_TARGET"],
                                                            p["NEW_TARGET"]), folder / "probe", overwrite=True)
            recipes["probe (specforge)"] = str(folder / "probe" / "run.sh")
            bullets.append(f"- **Hand-over:** `{folder / 'probe' / 'run.sh'}` dumps both targets' states at the old "
                           f"drafter's layers ({len(recipe.steps)} steps); rerun with `-p OLD_STATES=... -p NEW_STATES=...`.")
        if notebook == "04" and all(given(p.get(n)) for n in ("NEW_TARGET", "OLD_DRAFTER")):
            data = p.get("RECIPE_DATA") if isinstance(p.get("RECIPE_DATA"), str) else "prompts.jsonl"
            gpus = p.get("RECIPE_GPUS") if isinstance(p.get("RECIPE_GPUS"), int) else 8
            for engine in TRAINING_ENGINES:
                try:
                    recipe = build_recipe(RecipeSettings(engine, p["OLD_DRAFTER"], p["NEW_TARGET"], data=data, gpus=gpus))
                except EaglelabError as exc:
                    bullets.append(f"- **Hand-over, {engine}:** no recipe: {exc}.")
                    continue
                recipes[engine] = str(recipe.write(folder / engine, overwrite=True) / "run.sh")
            if recipes:
                bullets.append("- **Hand-over:** warm-start recipes that keep the old drafter's vocabulary map: "
                               + ", ".join(f"{e} `{path}`" for e, path in recipes.items()) + ".")
    except EaglelabError as exc:
        bullets.append(f"- **Hand-over:** no recipe: {exc}.")
    inputs = record_inputs({n: p.get(n) if isinstance(p.get(n), str) else None for n in CHECKPOINTS[notebook][0]},
                           None, not_done=[f"not run here: {line}"])
    return {"numbers": {"inputs": inputs, "not_run": {"name": name, "why": line}, "recipes": recipes}, "bullets": bullets}
