"""Training on several devices and machines: the public names of its four modules.

- rnnkit.training.cluster: `TF_CONFIG` from `--workers`/`--worker-index`, and back;
- rnnkit.training.strategies: the `tf.distribute` strategy `train.strategy` asks for;
- rnnkit.training.text_split: a model that reads strings, cut for `MirroredStrategy`;
- rnnkit.training.multi_worker: the training loop under `MultiWorkerMirroredStrategy`.

The command line reaches them through this module (`distributed.write_tf_config`);
rnnkit's own code imports them from where they live. docs/guides/distributed.md is the
user's side of it.
"""

from __future__ import annotations

from rnnkit.training.cluster import (
    TF_CONFIG,
    cluster_from_environment,
    write_tf_config,
)
from rnnkit.training.multi_worker import fit_multiworker, weights_fingerprint
from rnnkit.training.strategies import (
    describe_batch,
    is_chief,
    is_multiworker,
    make_strategy,
)
from rnnkit.training.text_split import TextSplit, split_text_model

__all__ = [
    "TF_CONFIG",
    "TextSplit",
    "cluster_from_environment",
    "describe_batch",
    "fit_multiworker",
    "is_chief",
    "is_multiworker",
    "make_strategy",
    "split_text_model",
    "weights_fingerprint",
    "write_tf_config",
]
