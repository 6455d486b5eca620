"""Draws the pictures of the docs and the README from small real runs.

    python docs/make_images.py             # docs/images/*.png, about 45 CPU-minutes
    python docs/make_images.py --captioning-run RUN_DIR   # captioning: a trained run
    python docs/make_images.py --small --output images-check   # seconds (the test)

`--translation-run RUN_DIR` and `--captioning-run RUN_DIR` draw those two pictures
from runs already trained (the test gives it the session's smoke runs).

Nothing here is drawn by hand: each picture comes from rnnkit's own runs and plotting
functions on real data.

- `stock_forecast.png`: `rnnkit run stock` (default config; MSFT from pmdarima), the
  recipe's own plot of the last 60 test days: model, persistence and the actual close.
- `attention_heatmap.png`: the translation recipe trained on Multi30k German-English
  (`../shared/data`), the recipe's heatmap of its beam-search translation of the first
  test sentence.
- `lstm_gates.png`: the gates of the stock model's first LSTM layer, stepped with
  `LSTMCell.gate_activations` over the last 60 days of MSFT returns the model saw.
- `vanishing_gradients.png`: `rnnkit diagnose` on The Time Machine: how much gradient
  reaches h_t from the loss at step T, for SimpleRNN, LSTM and GRU.
- `captioning_attention.png`: the captioning recipe with frozen ImageNet MobileNet v1
  features (`configs/flickr8k_mobilenet.toml`, Flickr8k in `../shared/data`), the
  recipe's attention overlay of its beam-search caption of the first test image:
  where each word looked. `--captioning-run RUN_DIR` draws it from a run already
  trained with that config (the quality benchmark's) instead of training one (about
  30 minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
GATE_DAYS = 60

# --small: seconds per picture, for the test; the pictures are real but untrained.
STOCK = {
    "full": {},
    "small": {
        "data.start": "2016-01-01",
        "data.window": 10,
        "model.units": 4,
        "model.layers": 1,
        "train.epochs": 1,
    },
}
TRANSLATION = {
    "full": {
        "data.limit": 6000,
        "data.subword_vocabulary_size": 2000,
        "model.units": 128,
        "train.epochs": 8,
        "train.batch_size": 32,
    },
    "small": {"data.limit": 64, "model.units": 8, "train.epochs": 1},
}
CAPTIONING = {"full": "flickr8k_mobilenet.toml", "small": "smoke.toml"}
MOBILENET_WEIGHTS = "mobilenet_7_5_224_tf_no_top.h5"
DIAGNOSE = {
    "full": ["--steps", "300", "--units", "64", "--window", "60"],
    "small": ["--steps", "2", "--units", "4", "--window", "8"],
}


def run_recipe(name: str, config_file: Path | None, values: dict, run_dir: Path):
    """Trains recipe `name` through the runner; returns (recipe, config, model)."""
    from rnnkit import config as config_lib
    from rnnkit import registry
    from rnnkit.training import runner

    recipe = registry.load(name)
    config = config_lib.resolve(recipe.Config, config_file, values)
    runner.run(recipe, config, run_dir, verbose=0)
    recipe, config, model = runner.load_run(run_dir, registry.load)
    return recipe, config, model


def stock_pictures(size: str, output: Path, work: Path) -> list[Path]:
    """The forecast against persistence, and the LSTM gates on the same days."""
    recipe, config, model = run_recipe(
        "stock",
        ROOT / "recipes" / "stock" / "configs" / "default.toml",
        STOCK[size],
        work / "stock",
    )
    forecast = shutil.copyfile(
        work / "stock" / "plots" / f"forecast_last_{GATE_DAYS}_days.png",
        output / "stock_forecast.png",
    )
    data = recipe.load_data(config)
    return [forecast, lstm_gates(model, data, output / "lstm_gates.png")]


def lstm_gates(model, data, path: Path) -> Path:
    """Steps the first LSTM layer of `model` over the last test window, day by day,
    and draws its input, forget and output gates and its cell state per unit."""
    import keras
    import numpy as np

    import rnnkit.layers
    from rnnkit import plots

    normalize = next(
        layer for layer in model.layers if isinstance(layer, keras.layers.Normalization)
    )
    lstm = next(
        layer for layer in model.layers if isinstance(layer, rnnkit.layers.LSTM)
    )
    split = data.splits["test"]
    days = min(GATE_DAYS, len(split.anchors))
    # The last row of each test window is its anchor day: the last `days` windows
    # give the features of `days` consecutive trading days.
    rows = split.inputs[-days:, -1]  # (days, features)
    inputs = np.asarray(normalize(rows[None]))  # (1, days, features)
    states = [np.zeros((1, lstm.cell.units), "float32")] * 2
    traces: dict[str, list[np.ndarray]] = {}
    for t in range(inputs.shape[1]):
        gates = lstm.cell.gate_activations(inputs[:, t], states)
        states = [gates["hidden"], gates["cell"]]
        for name in ("input", "forget", "output", "cell"):
            traces.setdefault(name, []).append(np.asarray(gates[name])[0])
    dates = data.prices["date"].to_numpy()[split.anchors[-days:]]
    figure, axes = plots.plt.subplots(4, 1, figsize=(9, 7.5), sharex=True)
    for axis, (name, values) in zip(axes, traces.items(), strict=True):
        values = np.stack(values).T  # (units, days)
        limits = (0.0, 1.0) if name != "cell" else (-np.abs(values).max(), None)
        if name == "cell":
            limits = (limits[0], -limits[0])
        image = axis.imshow(
            values,
            aspect="auto",
            cmap="viridis" if name != "cell" else "RdBu_r",
            vmin=limits[0],
            vmax=limits[1],
            interpolation="nearest",
        )
        axis.set_ylabel(f"{name}\nunit")
        figure.colorbar(image, ax=axis, pad=0.01)
    ticks = np.linspace(0, len(dates) - 1, 6).astype(int)
    axes[-1].set_xticks(ticks, labels=[str(dates[i])[:10] for i in ticks])
    axes[0].set_title(
        f"The stock model's first LSTM layer stepped over the last {days} test days "
        f"of {data.source}:\ngates (0 closed, 1 open) and cell state, one row per unit"
    )
    return plots.save_figure(figure, path)


def translation_picture(
    size: str, output: Path, work: Path, run_dir: Path | None = None
) -> Path:
    """The recipe's attention heatmap of its first test translation: from `run_dir`
    (a completed run that drew one) or from a run trained here."""
    if run_dir is None:
        run_dir = work / "translation"
        recipe_dir = ROOT / "recipes" / "translation" / "configs"
        run_recipe(
            "translation",
            recipe_dir / "smoke.toml",
            {
                "data.path": str(
                    SHARED_DATA / "translation" / "multi30k_{split}.{lang}.gz"
                ),
                "evaluation.heatmaps": 1,
                **TRANSLATION[size],
            },
            run_dir,
        )
    return Path(
        shutil.copyfile(
            run_dir / "plots" / "attention_1.png", output / "attention_heatmap.png"
        )
    )


def captioning_picture(
    size: str, output: Path, work: Path, run_dir: Path | None = None
) -> Path:
    """The attention overlay of the first test image: the recipe's own plot, from
    `run_dir` (a trained run) or from a run trained here."""
    from rnnkit import registry
    from rnnkit.training import runner

    if run_dir is None:
        run_dir = work / "captioning"
        # The feature store in the scratch folder, not the user's home.
        values = {
            "data.path": str(SHARED_DATA / "captioning"),
            "data.cache_dir": str(work / "captioning_features"),
        }
        if size == "full":
            values["model.encoder_weights"] = str(
                SHARED_DATA / "captioning" / "weights" / MOBILENET_WEIGHTS
            )
        config_file = ROOT / "recipes" / "captioning" / "configs" / CAPTIONING[size]
        run_recipe("captioning", config_file, values, run_dir)
    recipe, config, model = runner.load_run(run_dir, registry.load)
    config = config.with_values({"evaluation.overlays": 1})
    data = recipe.load_data(config)
    recipe.write_plots(model, data, config, work)
    # A photograph a dozen times over: 85 % of the size in 256 colours keeps it
    # legible at a third of the bytes.
    from PIL import Image

    path = output / "captioning_attention.png"
    with Image.open(work / "attention_1.png") as image:
        scaled = (round(image.width * 0.85), round(image.height * 0.85))
        small = image.convert("RGB").resize(scaled, Image.Resampling.LANCZOS)
        small.quantize(256, dither=Image.Dither.NONE).save(path)
    return path


def gradient_picture(size: str, output: Path, work: Path) -> Path:
    from click.testing import CliRunner

    from rnnkit.cli import main

    folder = work / "diagnose"
    result = CliRunner().invoke(
        main, ["diagnose", *DIAGNOSE[size], "--output", str(folder)]
    )
    if result.exit_code != 0:
        raise SystemExit(f"rnnkit diagnose failed:\n{result.output}")
    return Path(
        shutil.copyfile(
            folder / "gradient_norms.png", output / "vanishing_gradients.png"
        )
    )


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument(
        "--small", action="store_true", help="tiny runs (seconds), for the test"
    )
    parser.add_argument(
        "--translation-run",
        type=Path,
        help="a completed translation run that drew a heatmap, to draw from",
    )
    parser.add_argument(
        "--captioning-run",
        type=Path,
        help="a completed run of configs/flickr8k_mobilenet.toml to draw from",
    )
    args = parser.parse_args(argv)
    size = "small" if args.small else "full"
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        written = [
            *stock_pictures(size, args.output, work),
            translation_picture(size, args.output, work, args.translation_run),
            gradient_picture(size, args.output, work),
            captioning_picture(size, args.output, work, args.captioning_run),
        ]
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
