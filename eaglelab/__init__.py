"""eaglelab: can an existing EAGLE-3 drafter be reused when the target model changes?

The package is imported by the notebooks and the ``eaglelab`` command line. Each question is one job
in :mod:`eaglelab.jobs` taking one settings dataclass; below the jobs the sub-packages are layers
(``docs/ARCHITECTURE.md``), bottom first: the base modules (``errors``, ``inputs``, ``outputs``,
``atomic``, ``progress``, ``decisions``), ``checkpoints`` (files, headers, spec, verdicts, exports),
``serving`` (throughput model, logs), ``engines`` (recipes, logprob files, the vLLM driver), ``model``
(drafter, targets, decoding), ``data`` (every token and state set), ``train`` (TTT loss, training),
``probe``, ``drift``, ``planning``, ``worlds``, then ``jobs``, ``workbook`` and ``cli``. Importing it is
cheap: torch and transformers are imported only by the modules that need tensors.
"""

__version__ = "0.1.0"
