"""Running and presenting the workbook: the runner (parameters as JSON data), plots, the pickers and their
checks, each notebook's answer for a pick, and the game plan.
"""
