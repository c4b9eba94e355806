"""Config diffs: one engine for any two configs; each family brings its own reading of the keys.

The engine reads two configs through one flattening (:func:`flatten`: a nested dict's fields as
``key.field``), walks the union of their keys, compares values and attaches each differing key's
:class:`KeyRule` (:func:`diff_views`, one :class:`ConfigDiff` a key). What a difference means, which
keys are nested and which absences are no difference is a family's own :class:`RuleTable`: the
drafters' in :mod:`eaglelab.checkpoints.drafters.config_rules` (``DRAFTER_RULES``, ``diff_configs``), the
targets' in :mod:`eaglelab.checkpoints.targets.compare` (``TARGET_RULES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class KeyRule:
    """How a difference in one config key matters."""

    category: str
    why: str


#: The rule of a key no table knows.
UNKNOWN = KeyRule("unknown", "not a key eaglelab knows; check what reads it")


@dataclass(frozen=True)
class ConfigDiff:
    """One differing key between two configs (two drafters' or two targets').

    Attributes:
        key: dotted key (a nested dict's fields flattened one level: ``eagle_config.*`` for drafters,
            ``rope_scaling.*`` for targets).
        a: value in A (None when absent).
        b: value in B.
        category: one of the family's categories (:attr:`RuleTable.order`): for drafters ``architecture``,
            ``behaviour``, ``loader``, ``metadata`` or ``unknown``.
        why: one line on what the difference does.
    """

    key: str
    a: Any
    b: Any
    category: str
    why: str


@dataclass(frozen=True)
class RuleTable:
    """One family's reading of config keys: what a difference in each means, and which differences are none.

    Attributes:
        rules: key (dotted for a nested field) -> its rule.
        order: the categories, most telling first and ``unknown`` last: the order diffs are listed in.
        nested: keys whose dict value is read field by field, as ``key.field`` (:func:`flatten`).
        inner: nested keys whose fields mean what the same key means at the top level.
        by_head: the rule of a dotted key no rule names, by the part before its first dot.
        defaults: what an absent key means to every reader: writing the default is no difference.
        null_is_absent: a null value reads as an absent key (as transformers reads a config), not as a value.
    """

    rules: Mapping[str, KeyRule]
    order: tuple[str, ...]
    nested: tuple[str, ...] = ()
    inner: tuple[str, ...] = ()
    by_head: Mapping[str, KeyRule] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    null_is_absent: bool = False

    def rule(self, key: str) -> KeyRule:
        """Category and reason for a (possibly dotted) key; unknown keys stay unknown."""
        if key in self.rules:
            return self.rules[key]
        head, dot, rest = key.partition(".")
        if not dot:
            return UNKNOWN
        return self.rule(rest) if head in self.inner else self.by_head.get(head, UNKNOWN)


def flatten(cfg: Mapping[str, Any], nested: tuple[str, ...]) -> dict[str, Any]:
    """The config with each ``nested`` key's dict value spread one level, as ``key.field`` (other values kept)."""
    out = {}
    for k, v in cfg.items():
        if k in nested and isinstance(v, dict):
            for kk, vv in v.items():
                out[f"{k}.{kk}"] = vv
        else:
            out[k] = v
    return out


_MISSING = object()


def diff_views(a: Mapping[str, Any], b: Mapping[str, Any], rules: RuleTable) -> list[ConfigDiff]:
    """Every key whose value differs between two flat views of configs, with its rule, in the table's order.

    An absent key is no difference where the other side holds its default (:attr:`RuleTable.defaults`);
    with :attr:`RuleTable.null_is_absent` a null is absent. An absent value is reported as None.
    """
    absent = None if rules.null_is_absent else _MISSING
    diffs = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, absent), b.get(key, absent)
        default = rules.defaults.get(key, _MISSING)
        if va == vb or (va is absent and vb == default) or (vb is absent and va == default):
            continue
        rule = rules.rule(key)
        diffs.append(ConfigDiff(key, None if va is _MISSING else va, None if vb is _MISSING else vb,
                                rule.category, rule.why))
    return sorted(diffs, key=lambda d: (rules.order.index(d.category), d.key))
