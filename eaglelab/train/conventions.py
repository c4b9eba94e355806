"""The two TTT loss conventions by name, torch-free (settings and flags take them before anything loads).

What each computes is in :mod:`eaglelab.train.ttt`: ``specforge`` (SpecForge's ``OnlineEagle3Model``, the default)
and ``speculators`` (speculators' ``Eagle3DraftModel``).
"""

LOSS_CONVENTIONS = ("specforge", "speculators")
DEFAULT_CONVENTION = "specforge"
# each reference's default per-step loss weight base (SpecForge's ploss_decay, speculators' ttt_step_loss_decay)
CONVENTION_DECAY = {"specforge": 0.8, "speculators": 1.0}
