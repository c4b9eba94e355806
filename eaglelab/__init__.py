"""eaglelab: can an existing EAGLE-3 drafter be reused when the target model changes?

The package is imported by the notebooks and the ``eaglelab`` command line. Importing it
is cheap: torch and transformers are imported only by the modules that need tensors.
"""

__version__ = "0.1.0"
