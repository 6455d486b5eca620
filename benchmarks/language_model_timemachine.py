"""The Time Machine, character level: bits per character on the held-out contiguous
tail next to the unigram and bigram baselines, a generated sample, and truncated BPTT
against independent windows (recipes/language_model/configs/default.toml).

Two trainings of the same model on the same windows: "truncated" reads 32 contiguous
streams in order and carries the LSTM state from batch to batch; "independent" reads
the same windows in the same order (the default config leaves train.shuffle
false), each from a zero state. Printed per mode: training
milliseconds per 1,000 tokens (fit time without validation) and test perplexity with
the state carried through the test text and reset at every window. Target (issue 12):
truncated BPTT at least as fast per token as independent windows.

    python benchmarks/language_model_timemachine.py
    python benchmarks/language_model_timemachine.py --epochs 2 --set model.units=64
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from timing import cpu_line

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "the time traveller"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=str(ROOT / "recipes/language_model/configs/default.toml")
    )
    parser.add_argument("--epochs", type=int, help="Override train.epochs.")
    parser.add_argument("--runs-root", default="runs/benchmarks")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="assignments"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.chdir(ROOT)

    import keras
    from rnnkit_recipes.language_model.recipe import LanguageModelRecipe

    from rnnkit import config as config_lib
    from rnnkit.metrics import format_table
    from rnnkit.training import runner

    recipe = LanguageModelRecipe()
    overrides = config_lib.parse_assignments(recipe.Config, args.assignments)
    if args.epochs is not None:
        overrides["train.epochs"] = args.epochs

    class FitTimer(keras.callbacks.Callback):
        """Seconds of training per epoch, validation excluded."""

        def on_train_begin(self, logs=None):
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_test_begin(self, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    results = {}
    for mode in ("truncated", "independent"):
        config = config_lib.resolve(
            recipe.Config, args.config, {**overrides, "train.mode": mode}
        )
        timer = FitTimer()
        run_dir = Path(args.runs_root) / f"timemachine_{mode}"
        result = runner.run(recipe, config, run_dir, verbose=2, callbacks=[timer])
        data = recipe.load_data(config)
        steps = ((len(data.train_ids) - 1) // config.train.batch_size) // (
            config.train.bptt
        )
        tokens = steps * config.train.batch_size * config.train.bptt
        # The first epoch includes tracing; the later ones are the steady state.
        steady = timer.seconds[1:] or timer.seconds
        results[mode] = (result, 1e6 * sum(steady) / len(steady) / tokens, timer)

    for mode, (result, _, _) in results.items():
        print(f"\n{mode}: {result.run_dir}")
        print(format_table(result.metrics["test"]))
    print()
    print(f"{'mode':<12} {'ms/1k tokens':>12} {'ppl carried':>12} {'ppl reset':>10}"
          f" {'bpc':>6} {'epochs':>6}")  # fmt: skip
    for mode, (result, speed, timer) in results.items():
        row = result.metrics["test"]["model"]
        print(
            f"{mode:<12} {speed:>12.1f} {row['perplexity']:>12.3f} "
            f"{row['perplexity_state_reset']:>10.3f} {row['bits_per_char']:>6.3f} "
            f"{len(timer.seconds):>6}"
        )
    truncated, independent = results["truncated"][1], results["independent"][1]
    print(
        f"truncated / independent time per token: {truncated / independent:.3f} "
        + ("(target <= 1: MET)" if truncated <= independent else "(target NOT MET)")
    )
    print(f"CPU: {cpu_line()}")

    best = runner.load_run(results["truncated"][0].run_dir, lambda _: recipe)
    _, config, model = best
    sample_config = config.with_values(
        {"evaluation.temperature": 0.8, "evaluation.length": 300, "evaluation.seed": 1}
    )
    print("\nSample (temperature 0.8, seed 1):")
    print(recipe.predict(model, [PROMPT], sample_config)[0])


if __name__ == "__main__":
    main()
