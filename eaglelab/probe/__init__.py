"""The direct plug-in probe: how far the target moved at the drafter's layers, and what the old
drafter still accepts on the new target.
"""
