"""What serving engines see: the throughput model (τ, cycles, break-even, MoE verify cost) and
SGLang / vLLM log parsing. No torch.
"""
