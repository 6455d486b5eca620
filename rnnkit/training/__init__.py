"""Training: the runner (one training loop and the run directory) and its strategies."""
