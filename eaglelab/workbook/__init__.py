"""Running and presenting the workbook: the papermill runner, plots, widgets and the game plan.
"""
