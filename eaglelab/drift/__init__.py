"""How the old drafter's acceptance survives a target that moves: drift families, measures, the sweep, predictors."""
