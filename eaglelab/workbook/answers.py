"""Each notebook's answer for a choice of checkpoints, as its picker's button shows it.

Thin: the answer is the notebook's own job (:mod:`eaglelab.jobs`) run on the notebook's settings with
the picked checkpoints swapped in, shown as Markdown (its headline names the checkpoints compared)
and a table. Errors are the package's typed errors (one line in the panel).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from eaglelab.jobs.compare import CompareSettings, compare_drafters
from eaglelab.jobs.finetune import warm_vs_scratch
from eaglelab.jobs.probe import probe_checkpoints
from eaglelab.jobs.targets import TargetCompareSettings, compare_targets
from eaglelab.planning import provenance as pv


def _tag(paths: list[str | None], root: str) -> str:
    return pv.tag(pv.evidence_source(paths, root)) if root else ""


def comparison_answer(values: dict[str, str], root: str = "") -> list[Any]:
    """Notebook 02: ``OLD_DRAFTER`` vs ``NEW_DRAFTER`` (and on ``NEW_TARGET``), headers only; the headline carries the
    worst finding; with ``OLD_TARGET`` too, the two targets' verdict (:func:`eaglelab.jobs.targets.compare_targets`).

    Returns:
        ``[Markdown headline and findings, config-diff table]``.
    """
    import pandas as pd
    from IPython.display import Markdown

    settings = CompareSettings(values["OLD_DRAFTER"], values["NEW_DRAFTER"], values.get("NEW_TARGET") or None)
    report = compare_drafters(settings)
    lines = [report.markdown(_tag([settings.old_drafter, settings.new_drafter, settings.new_target], root))]
    if values.get("OLD_TARGET") and values.get("NEW_TARGET"):  # the two targets too, before any probe
        targets = compare_targets(TargetCompareSettings(values["OLD_TARGET"], values["NEW_TARGET"], settings.old_drafter))
        lines.append(f"- the targets: **{targets.verdict.level}**: {targets.verdict.line}")
    diff = report.to_json()["config_diff"]
    return [Markdown("\n".join(lines)), pd.DataFrame(diff) if diff else Markdown("*configs identical*")]


def probe_answer(settings, values: dict[str, str], root: str = "") -> list[Any]:
    """Notebook 03: :func:`eaglelab.jobs.probe.probe_checkpoints` on the notebook's settings and the picks.

    Args:
        settings: the notebook's :class:`~eaglelab.jobs.probe.ProbeSettings` (its parameters).
        values: the picks (``OLD_TARGET``, ``NEW_TARGET``, ``OLD_DRAFTER``, ``DATA``).

    Returns:
        ``[Markdown headline, the verdict's reasons (or why there is none) and the probe's notes, similarity table
        per layer]``. Evidence too thin for a verdict is the job's typed error: one line in the panel.
    """
    import pandas as pd
    from IPython.display import Markdown

    picked = replace(settings, old_target=values["OLD_TARGET"], new_target=values["NEW_TARGET"],
                     old_drafter=values["OLD_DRAFTER"],
                     data=values.get("DATA") or None)
    report = probe_checkpoints(picked, measure=False)
    tag = _tag([picked.old_target, picked.new_target, picked.old_drafter], root)
    text = (f"**{report.headline(tag)}** · {report.positions} positions ({report.data})\n\n"
            + "\n".join([f"- {r}" for r in report.result.decision.reasons] + [f"- note: {n}" for n in report.notes]))
    return [Markdown(text), pd.DataFrame(report.to_json()["layers"]).set_index("layer").round(4)]


def finetune_answer(settings, values: dict[str, str], root: str = "") -> list[Any]:
    """Notebook 04: :func:`eaglelab.jobs.finetune.warm_vs_scratch` on the notebook's settings and the picks.

    Returns:
        ``[Markdown recommendation naming the checkpoints, table of held-out τ and final loss per option]``.
    """
    import pandas as pd
    from IPython.display import Markdown

    picked = replace(settings, new_target=values["NEW_TARGET"], old_drafter=values["OLD_DRAFTER"],
                     data=values.get("DATA") or None)
    report = warm_vs_scratch(picked)
    loss = {start: f"{r.metrics[-1]['loss']:.3f}" for start, r in report.runs.items()}
    table = pd.DataFrame({"held-out τ": report.taus,
                          f"final loss ({picked.loss_convention})": {"plug in": "not trained", **loss}})
    text = (f"**{report.headline(_tag([picked.new_target, picked.old_drafter], root))}**. "
            f"{report.recommendation.text} Section 3 below measures real decoding.")
    return [Markdown(text), table.round(3)]
