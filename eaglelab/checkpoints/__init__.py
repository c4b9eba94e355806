"""Drafter checkpoints as files: sources (folders, files, shard indexes, hub ids), the EAGLE-3 schema,
inspection and comparison from headers only, export to the vLLM / speculators layout. No torch.
"""
