"""Checkpoints read as files, never loaded: three rooms that import one way (files ← targets ← drafters).

- :mod:`~eaglelab.checkpoints.files`: sources (folders, files, shard indexes, hub ids), safetensors headers,
  the hub transport (every hub read goes through :class:`~eaglelab.checkpoints.files.hub.HubRepo`), the
  type of every config field, and the one config-diff engine.
- :mod:`~eaglelab.checkpoints.targets`: a target read without the model: its language model's config, weight
  names and quantization, its tokenizer and chat templates (rendered in a sandbox), two targets compared, and
  what a checkpoint needs in memory.
- :mod:`~eaglelab.checkpoints.drafters`: the EAGLE-3 drafter spec, the variants eaglelab computes, the tensor
  table, config diffs and verdicts, inspection and comparison from headers only, the drafter config a target
  implies, and the exports between the SGLang and vLLM layouts.

No torch at import. Full-size sample checkpoints for tests and benchmarks live beside the worlds
(:mod:`eaglelab.worlds.synthetic_checkpoints`, :mod:`eaglelab.worlds.kimi_shapes`).
"""
