"""Whose checkpoints a notebook runs on: the user's, all of them, or the offline world's, all of them.

A notebook takes its checkpoints by the names every interface uses (``OLD_TARGET``, ``NEW_TARGET``,
``OLD_DRAFTER``, ``NEW_DRAFTER``). Left unset, all of them, it runs on the offline world and says so
([demo]). Given, it runs on what was given and never fills a gap from the world: an answer that mixed
the user's new target with the demo world's drafter would be neither case. A checkpoint the notebook
cannot do without is then a one-line error before anything is built; one it can do without stays None,
and the notebook says in its findings what it left out (``not_done``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eaglelab.errors import ParameterError
from eaglelab.inputs import one_line, unshown_character


def given(value) -> bool:
    """Whether a checkpoint parameter was set (None and the empty string mean 'left to the world')."""
    return value not in (None, "")


def checkpoint_case(given_values: Mapping[str, str | None], required: Sequence[str]) -> bool:
    """Whether the notebook runs on the offline world (nothing given), after checking the user's case is whole.

    Args:
        given_values: the notebook's checkpoint parameters, name -> value (None: not given).
        required: the names the notebook cannot run without.

    Returns:
        True when no checkpoint was given: build (or reuse) the world and read every checkpoint from it.

    Raises:
        ParameterError: some checkpoints given and a required one not: naming it, since filling it from the
            demo world would answer for neither case; or a name holding a control or format character.
    """
    for name, value in given_values.items():
        bad = unshown_character(value) if isinstance(value, str) else None
        if bad is not None:
            raise ParameterError(name, f"holds the character {one_line(bad[1])} at position {bad[0]}: a checkpoint's "
                                       "name is shown in the findings and the game plan, where a line break or a bidi "
                                       "override would read as eaglelab's own words (rename the folder)")
    if not any(given(v) for v in given_values.values()):
        return True
    missing = [name for name in required if not given(given_values.get(name))]
    if missing:
        shown = ", ".join(n for n, v in given_values.items() if given(v))
        raise ParameterError(missing[0], f"not given, while {shown} {'is' if ',' not in shown else 'are'} yours: "
                                         f"give {' and '.join(missing)} too (the demo world's would mix two cases)")
    return False


#: Each notebook's checkpoints: those it takes, and those it cannot run without once any is the user's. The runner
#: checks every selected notebook against this table before a kernel starts; the notebook checks itself too.
#: Dumps (``OLD_STATES`` / ``NEW_STATES``) are data about targets, not checkpoints: dumps of the offline world's
#: targets probe the world, dumps of yours need your targets named (their heads are read).
CHECKPOINTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "01": (("OLD_TARGET", "OLD_DRAFTER"), ("OLD_TARGET", "OLD_DRAFTER")),
    "02": (("OLD_DRAFTER", "NEW_DRAFTER", "NEW_TARGET", "OLD_TARGET"), ("OLD_DRAFTER", "NEW_TARGET", "OLD_TARGET")),
    "03": (("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER"), ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER")),
    "04": (("NEW_TARGET", "OLD_DRAFTER"), ("NEW_TARGET", "OLD_DRAFTER")),
    "05": (("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER"), ("OLD_TARGET", "NEW_TARGET", "OLD_DRAFTER")),
}


def notebook_case(notebook: str, values: Mapping[str, str | None]) -> bool:
    """:func:`checkpoint_case` for notebook ``notebook`` (``"03"``) on its checkpoints among ``values``.

    Returns True (the offline world's case) for a notebook that takes no checkpoint.
    """
    takes, required = CHECKPOINTS.get(notebook, ((), ()))
    return checkpoint_case({name: values.get(name) for name in takes}, required)


def world_default(demo: bool, path) -> str:
    """A picker's default for one checkpoint: the world's path in the world's case, else none (the user's case
    takes nothing from the world, :func:`checkpoint_case`)."""
    return str(path) if demo else ""
