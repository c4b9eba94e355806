"""Training a drafter: captured target states, the TTT loss, the training loop (resume, DDP),
warm start vs scratch, and a target's own replies as data.
"""
