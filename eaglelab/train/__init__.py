"""Training a drafter: the TTT loss and teacher-forced acceptance, the training loop (resume, DDP), a run's
folder and its resume checks, warm start vs scratch and the data-budget sweep.
"""
