"""Drafter checkpoints as files: sources (folders, files, shard indexes, hub ids) and their headers, the
drafter spec and tensor table, config diffs and verdicts, inspection and comparison from headers only,
the variants eaglelab computes, and the exports between the SGLang and vLLM layouts. No torch at import.
"""
