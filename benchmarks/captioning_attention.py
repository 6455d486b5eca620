"""Where the captioning decoder looks: statistics of its attention on the dev split.

For each completed captioning run given (attention decoders only), captions the first
`--images` dev images with greedy search and measures, over the generated words
(the end token included):

- entropy: mean entropy of alpha_t over the L image locations, in nats and as a share
  of log L (1.0: uniform attention, spread evenly over the image);
- locations: exp(entropy), the number of locations a word attends to "in effect"
  (1 for a hard choice of one location, L for uniform);
- peak: mean largest weight max_i alpha_ti (1 / L for uniform);
- coverage: the doubly stochastic regulariser's term per word,
  sum_i (1 - sum_t alpha_ti)^2 / (words), which `model.attention_penalty` weighs in
  training; the smallest it can be for a caption of T words over L locations is
  (L - T)^2 / (L T) when T < L (every location's total pulled toward 1 equally).

These say whether a run's attention chooses among the image's regions or averages
them, the question behind issue 29's "does attention pay" (the regulariser's weight is
the knob measured in recipes/captioning/README.md).

    python benchmarks/captioning_attention.py RUN_DIR [RUN_DIR ...] --images 500
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def attention_statistics(attention, lengths) -> dict[str, float]:
    """The figures of the module docstring from `attention` (images, steps, L) and
    `lengths` (images,): generated tokens per image, the end token included."""
    import numpy as np

    locations = attention.shape[-1]
    entropies, peaks, coverage = [], [], []
    for weights, length in zip(attention, lengths, strict=True):
        weights = np.asarray(weights[:length], "float64")  # (words, L)
        entropies += list(-np.sum(weights * np.log(np.maximum(weights, 1e-12)), -1))
        peaks += list(weights.max(-1))
        coverage.append(np.sum((1.0 - weights.sum(0)) ** 2) / length)
    entropy = float(np.mean(entropies))
    return {
        "entropy": entropy,
        "entropy_share": entropy / float(np.log(locations)),
        "locations": float(np.exp(np.mean(entropies))),
        "peak": float(np.mean(peaks)),
        "coverage": float(np.mean(coverage)),
        "words": float(np.mean(lengths)),
        "L": float(locations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="completed run directories")
    parser.add_argument("--images", type=int, default=500, help="dev images to caption")
    args = parser.parse_args()

    from rnnkit_recipes.captioning.decode import search

    from rnnkit import registry
    from rnnkit.training import runner

    print(
        f"{'run':<48} {'penalty':>7} {'entropy':>8} {'of log L':>8} "
        f"{'locations':>9} {'peak':>6} {'coverage':>8} {'words':>5}"
    )
    for run_dir in args.runs:
        recipe, config, model = runner.load_run(run_dir, registry.load)
        if model.attention == "none":
            print(f"{run_dir.name:<48} attention-free: no weights to measure")
            continue
        dev = recipe.load_data(config).splits["validation"]
        count = min(args.images, len(dev.names))
        result = search(model, dev.inputs[:count], config, beam_width=1)
        figures = attention_statistics(result.attention, result.lengths[:, 0])
        print(
            f"{run_dir.name:<48} {config.model.attention_penalty:7.2f} "
            f"{figures['entropy']:8.3f} {figures['entropy_share']:8.3f} "
            f"{figures['locations']:9.1f} {figures['peak']:6.3f} "
            f"{figures['coverage']:8.3f} {figures['words']:5.1f}"
        )
    print(f"({count} dev images, greedy captions; L = {figures['L']:.0f} locations)")


if __name__ == "__main__":
    main()
