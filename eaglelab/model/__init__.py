"""The models: the EAGLE-3 drafter in PyTorch, its draft vocabulary and files, targets with aux-state
capture, speculative decoding, the small-batch CPU verify kernels, and LoRA continued training.
"""
