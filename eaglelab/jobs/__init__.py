"""One function per question, each taking one settings dataclass that owns its defaults.

The command line, the notebooks' pickers and the notebooks call these and nothing else to answer:
``compare_drafters(CompareSettings)`` (notebook 02, ``eaglelab compare``), ``probe_checkpoints(ProbeSettings)``
(notebook 03, ``eaglelab probe``), ``warm_vs_scratch(FinetuneSettings)`` and ``train_one`` (notebook 04,
``eaglelab finetune``), ``engine_beside_workbook`` (vLLM's measurement next to the workbook's, 03 and 04).
The drift sweep is :func:`eaglelab.drift.sweep.run_sweep` with its :class:`~eaglelab.drift.sweep.SweepSettings`;
the decision table :func:`eaglelab.planning.decision_table.plan` of a
:class:`~eaglelab.planning.decision_table.Scenario`. Each result is typed, with ``to_json()`` (what ``--json``
prints and the findings keep) and ``lines()`` (what the command line prints).
"""
