"""A target model read without the model: config, weight names, quantization, tokenizer, chat templates, memory.

Reads through :mod:`eaglelab.checkpoints.files`; knows nothing of drafters.
"""
