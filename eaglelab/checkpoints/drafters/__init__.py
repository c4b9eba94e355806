"""EAGLE-3 drafters from their configs and headers: spec, variants, tensor table, diffs, verdicts, inspection, exports.

Reads through :mod:`eaglelab.checkpoints.files` and asks :mod:`eaglelab.checkpoints.targets` what a target holds.
"""
