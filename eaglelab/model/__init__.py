"""The models: the EAGLE-3 drafter in PyTorch, its draft vocabulary and files, targets with aux-state
capture, speculative decoding, and the small-batch CPU verify kernels.
"""
