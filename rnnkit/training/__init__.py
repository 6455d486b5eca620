"""Training: the one training loop and everything it stands on.

- runner: `run` (train, evaluate, write the run directory), `fit`, `backtest`;
- run_dir: the run directory's files, claiming, resuming and reading it back;
- runtime: seeds, device, precision, and which strategy (`configure_runtime`);
- cluster, strategies, text_split, multi_worker: several devices and machines
  (docs/guides/distributed.md).
"""
