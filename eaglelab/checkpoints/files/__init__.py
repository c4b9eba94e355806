"""Checkpoint files and their transport: sources, safetensors headers, the hub, config types, the config-diff engine.

Knows nothing of EAGLE, drafters or targets; the other two rooms of :mod:`eaglelab.checkpoints` read through it.
"""
