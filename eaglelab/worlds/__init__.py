"""The offline worlds the workbook runs on out of the box: the tiny world (tests, smoke runs) and
the demo world (a real SmolLM2-135M pair and their drafters), built in cached, verified stages.
"""
