"""Real drafter configs, surveyed: does each parse into a consistent tensor table, and is it computed as its engine does?

:func:`survey_configs` reads every JSON config in a folder (SpecForge's, shipped under ``data/fixtures``) through
:func:`eaglelab.checkpoints.drafters.inspection.config_table` and classifies the differences of one named pair (the
EAGLE-3 and EAGLE-3.1 configs of Qwen3-30B-A3B: ``fc_norm``); the :class:`ConfigSurvey` owns notebook 02's tables and
its findings sentence. Metadata only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eaglelab.checkpoints.drafters.config_rules import diff_configs
from eaglelab.checkpoints.drafters.inspection import config_table
from eaglelab.errors import ConfigError
from eaglelab.inputs import read_json_object

#: The pair whose differences the survey classifies (a real architecture change between two releases).
EAGLE31_PAIR = ("qwen3-30B-A3B-eagle3.json", "qwen3-30B-A3B-eagle3.1.json")


@dataclass(frozen=True)
class ConfigSurvey:
    """One row per config (:func:`config_table`), and the classified differences of the pair.

    Attributes:
        rows: per config: sizes, aux ids, ``consistent`` (its tensor table), ``computed`` (else ``refused``: why).
        pair: the two config names compared; pair_diff: their differences, classified.
    """

    rows: list[dict[str, Any]]
    pair: tuple[str, str]
    pair_diff: list

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows).set_index("config")

    def pair_table(self):
        import pandas as pd

        return pd.DataFrame([vars(d) for d in self.pair_diff])

    def findings(self, tag: str = "[sample]") -> dict[str, str]:
        """``configs``: how many parse into consistent tables and how many are computed as SpecForge does (the others
        named with why), and what the pair's configs differ in."""
        inconsistent = [r["config"] for r in self.rows if not r["consistent"]]
        refused: dict[str, list[str]] = {}
        for r in self.rows:
            if not r["computed"]:
                refused.setdefault(r["refused"], []).append(r["config"])
        n = len(self.rows)
        bad = f" (inconsistent: {', '.join(inconsistent)})" if inconsistent else ""
        why = ("" if not refused else " (refused: " + "; ".join(f"{', '.join(f'`{c}`' for c in names)}: {reason}"
                                                               for reason, names in refused.items()) + ")")
        differ = ", ".join(f"`{d.key}` ({d.category})" for d in self.pair_diff) or "nothing"
        return {"configs": f"**SpecForge configs {tag}:** {n - len(inconsistent)} of {n} real configs parse into "
                           f"consistent tensor tables{bad}; eaglelab computes {n - sum(map(len, refused.values()))} of "
                           f"them exactly as SpecForge does{why}; {Path(self.pair[0]).stem} vs {Path(self.pair[1]).stem} "
                           f"differ in {differ}."}


def survey_configs(folder: str | Path, pair: Sequence[str] = EAGLE31_PAIR) -> ConfigSurvey:
    """Every ``*.json`` drafter config in ``folder``, and the differences of ``pair`` (two file names there).

    Raises:
        SourceError / ConfigError: no config there, or one that cannot be read (naming the file).
    """
    rows = config_table(sorted(Path(folder).glob("*.json")))
    a, b = (read_json_object(Path(folder) / name, ConfigError) for name in pair)
    return ConfigSurvey(rows, (pair[0], pair[1]), diff_configs(a, b))
