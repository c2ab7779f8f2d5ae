"""LEAP's two ideas as pure functions: difficulty-conditioned pruning of refinement turns (`dcp`) and the
rank-based reward with the baselines' returns and group advantages (`rewards`); no torch needed."""
