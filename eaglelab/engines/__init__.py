"""What the engines read and write: warm-start recipes for the training engines (SpecForge, speculators) and
the quoting of their scripts, the serving engines' logprob files, and vLLM measuring an exported drafter.

vLLM lives in its own environment (``make engine`` / ``scripts/setup-engine.sh`` builds
``.venv-vllm``), because it pins its own torch and transformers; eaglelab talks to it through a
subprocess and a JSON contract (:mod:`eaglelab.engines.vllm_worker` runs inside that environment,
:mod:`eaglelab.engines.vllm` drives it from here). SGLang has no CPU build; it would sit behind the
same :func:`eaglelab.engines.vllm.measure_in_engine` call where it can be installed (CUDA GPUs).
"""
