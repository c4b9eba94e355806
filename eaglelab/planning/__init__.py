"""The user's decision: provenance of every number, how τ scales with data, and the decision table."""
