"""eaglelab: can an existing EAGLE-3 drafter be reused when the target model changes?

The package is imported by the notebooks and the ``eaglelab`` command line, in sub-packages by
job: ``checkpoints`` (files, schema, inspection, export), ``serving`` (throughput model, logs),
``model`` (drafter, targets, decoding), ``train`` (states, TTT loss, training, fine-tune),
``probe`` (similarity, plug-in probe), ``data`` (the one data layer), ``worlds`` (the offline
worlds), ``workbook`` (runner, plots, widgets, game plan) and ``cli``; the decisions the workbook
takes are in :mod:`eaglelab.decisions`. Importing it is cheap: torch and transformers are imported
only by the modules that need tensors.
"""

__version__ = "0.1.0"
