"""One function per question, each taking one settings dataclass that owns its defaults.

The command line, the notebooks' pickers and the notebooks call these to answer: ``compare_drafters``
(notebook 02, ``eaglelab compare``), ``inspect_drafter`` (``inspect``), ``compare_targets`` (02,
``compare-targets``), ``probe_checkpoints`` and ``dump_states`` (03, ``probe``, ``dump``), ``warm_vs_scratch`` and
``train_one`` (04), ``train_run`` (``finetune``), ``speculation_under_load`` (01), ``diagnose_serving``
(``perf``), ``plan_options`` (``plan``), ``predict_plugin_tau`` (``predict``), ``write_recipe`` (``recipe``),
``speculate``, ``init_drafter`` / ``export_for_engine`` (``drafter``), ``measure_drafter_in_vllm`` (``engine
measure``) and ``engine_beside_workbook`` (vLLM's measurement next to the workbook's, 03 and 04). The drift sweep
is :func:`eaglelab.drift.sweep.run_sweep`; the workbook's own commands live in :mod:`eaglelab.workbook.commands`.
Each result is typed, with ``to_json()`` (what ``--json`` prints and the findings keep) and ``lines()`` (what
the command line prints).
"""
