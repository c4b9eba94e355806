"""The one data layer: every token set the notebooks, the command line and the benchmarks use.
"""
