"""Every token and state set: captured target states and SpecForge's offline files, a target's own replies,
packed text, standard-library text, the worlds' paths, and the one precedence the notebooks, the command
line and the benchmarks share (:mod:`eaglelab.data.sets`).
"""
