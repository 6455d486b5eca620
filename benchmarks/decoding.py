"""Translation decoding throughput: greedy and beam search, sentences per second, with
the decoder's gate weights split once per search (what rnnkit does) against split at
every step (what it did before: `decode_step` calling `gate_weights()` in the loop).

Decodes the 1,000 Multi30k test2016 sentences with the model of
recipes/translation/configs/multi30k_de_en.toml (bidirectional GRU 512 encoder, GRU 512
decoder with Bahdanau attention, 6,000-piece vocabularies), batched by length as the
recipe's evaluation does, in interleaved rounds in one process: both variants run the
same compiled-search code on the same weights, so the ratio is the hoist's effect.

    python benchmarks/decoding.py                   # untrained weights (see below)
    python benchmarks/decoding.py --run RUN_DIR     # a trained translation run
    python benchmarks/decoding.py --sentences 200 --rounds 2

Untrained weights rarely produce the end token, so every hypothesis runs to its length
limit: the same work per sentence for both variants, more steps than a trained model
takes. A trained run (`--run`) gives the throughput users see.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path

from timing import hardware

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parents[1]


class SplitEveryStep:
    """The model as the searches saw it before the hoist: no `decoder_weights`, so
    `decode_step` splits the gate weights itself at every step."""

    def __init__(self, model) -> None:
        self._model = model

    def __getattr__(self, name: str):
        if name == "decoder_weights":
            raise AttributeError(name)
        return getattr(self._model, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        default=str(ROOT / "recipes/translation/configs/multi30k_de_en.toml"),
    )
    parser.add_argument("--run", help="A trained translation run directory.")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beam", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.chdir(ROOT)  # the config's data paths are relative to the repository root

    import keras
    from rnnkit_recipes.translation.decode import search, source_tokens
    from rnnkit_recipes.translation.recipe import TranslationRecipe

    from rnnkit import config as config_lib
    from rnnkit import registry
    from rnnkit.training import runner

    if args.run:
        recipe, config, model = runner.load_run(Path(args.run), registry.load)
        weights = "trained (" + args.run + ")"
    else:
        recipe = TranslationRecipe()
        config = config_lib.resolve(recipe.Config, args.config, {})
        model = None
        weights = "untrained (every hypothesis runs to its length limit)"
    started = time.perf_counter()
    data = recipe.load_data(config)
    if model is None:
        keras.utils.set_random_seed(config.train.seed)
        model = recipe.build_model(config, data)
    print(f"data and model ready in {time.perf_counter() - started:.0f} s")
    sentences = [source for source, _ in data.test_pairs[: args.sentences]]
    source_ids = [
        data.source_vocabulary.encode(source_tokens(s, data.text_options))
        for s in sentences
    ]
    variants = {"split every step": SplitEveryStep(model), "split once": model}
    searches = {"greedy": 1, f"beam {args.beam}": args.beam}
    seconds = {(v, s): [] for v in variants for s in searches}
    for decoder in variants.values():  # compile every search once
        for width in searches.values():
            search(decoder, source_ids[:8], config, beam_width=width)
    for _ in range(args.rounds):
        for name, width in searches.items():
            for variant, decoder in variants.items():
                began = time.perf_counter()
                search(decoder, source_ids, config, beam_width=width)
                seconds[variant, name].append(time.perf_counter() - began)

    print(
        f"model:      {config.model.cell_type} {config.model.units}, weights {weights}"
    )
    print(
        f"sentences:  {len(source_ids)} (decode batch "
        f"{config.evaluation.decode_batch_size}), {args.rounds} interleaved rounds"
    )
    print(f"hardware:   {hardware()}")
    print()
    header = f"{'search':<10}" + "".join(f"{v:>20}" for v in variants) + "   ratio"
    print(header + "\n" + "-" * len(header))
    for name in searches:
        rates = [
            len(source_ids) / statistics.median(seconds[variant, name])
            for variant in variants
        ]
        cells = "".join(f"{rate:>14.1f} sent/s" for rate in rates)
        print(f"{name:<10}{cells}   {rates[1] / rates[0]:.2f}x")


if __name__ == "__main__":
    main()
