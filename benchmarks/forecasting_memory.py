"""Peak memory of the forecasting recipe as the panel grows from 1,000 to 100,000
series (issue 52, point 7).

For each size it writes a wide Parquet file (M4's layout: an id column, then the
values, left-aligned) of that many series: M4 Hourly's 414 training series repeated in
order, every value of a copy multiplied by (1 + 0.05 z), z standard normal (seeded),
so that no two series are equal. Then, each in a fresh subprocess, whose peak resident
set size (`resource.getrusage(...).ru_maxrss`) is the figure:

- `floor`: importing TensorFlow and Keras and building the M4 configuration's model,
  no data;
- `load`: reading the file into the recipe's grid and the rows (series, origin) of
  every training, validation and test window;
- `train`: loading, then `--steps` training steps of the M4 configuration
  (`recipes/forecasting/configs/m4_hourly.toml`, a new order of all the training
  windows each epoch) and a forecast of every series' test window.

Beside the peak: the panel's values as float32 (what any in-memory reader holds) and
the training windows as float32 if they were copied out one by one (input and
horizon steps each), which is what the recipe does not do: `Windows` gathers each
batch from the grid. Seconds are wall time of the phase (the data writing of the
parent is not counted).

    python benchmarks/forecasting_memory.py
    python benchmarks/forecasting_memory.py --sizes 1000,10000 --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "forecasting" / "m4_hourly_train.csv.gz"
CONFIG = ROOT / "recipes" / "forecasting" / "configs" / "m4_hourly.toml"
CHUNK = 5_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="Series counts.")
    parser.add_argument("--data", default=str(SHARED), help="M4 Hourly-train.csv(.gz).")
    parser.add_argument("--steps", type=int, default=100, help="Training steps.")
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    from timing import cpu_line

    sizes = [int(size) for size in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        floor = run_child(args, "floor", Path(scratch) / "none.parquet")
        print(f"floor (imports and the model, no data): {floor['peak_mib']:.0f} MiB")
        print(HEADER, flush=True)
        for size in sizes:
            path = write_panel(Path(args.data), Path(scratch), size, args)
            for phase in ("load", "train"):
                result = run_child(args, phase, path)
                rows.append((size, phase, result))
                print(format_row(size, phase, result), flush=True)
            path.unlink()
    print()
    print(f"training steps: {args.steps} of the M4 configuration's batch")
    print(f"noise {args.noise}")
    print(f"seed {args.seed}")
    print(f"floor (imports and the model, no data): {floor['peak_mib']:.0f} MiB")
    print(HEADER)
    for size, phase, result in rows:
        print(format_row(size, phase, result))
    print(f"CPU: {cpu_line()}")


HEADER = (
    "| series | phase | values | training windows | peak RSS MiB | seconds "
    "| panel float32 MiB | windows if copied, MiB |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- |"
)


def format_row(size: int, phase: str, result: dict) -> str:
    return (
        f"| {size:,} | {phase} | {result['values']:,} | {result['windows']:,} | "
        f"{result['peak_mib']:,.0f} | {result['seconds']:.0f} | "
        f"{result['values'] * 4 / 2**20:,.0f} | "
        f"{result['windows'] * result['window_steps'] * 4 / 2**20:,.0f} |"
    )


def write_panel(source: Path, folder: Path, size: int, args) -> Path:
    """A wide Parquet file of `size` noisy copies of the M4 series (docstring)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = pd.read_csv(source, index_col=0)
    values = frame.to_numpy(np.float64)
    rng = np.random.default_rng(args.seed)
    path = folder / f"panel-{size}.parquet"
    columns = [str(c) for c in frame.columns]
    with pq.ParquetWriter(path, _schema(columns)) as writer:
        for start in range(0, size, CHUNK):
            index = np.arange(start, min(size, start + CHUNK))
            base = values[index % len(values)]
            noisy = base * (1.0 + args.noise * rng.standard_normal(base.shape))
            data = {"id": [f"S{i}" for i in index]}
            data.update({name: noisy[:, j] for j, name in enumerate(columns)})
            writer.write_table(pa.table(data, schema=_schema(columns)))
    return path


def _schema(columns):
    import pyarrow as pa

    return pa.schema([("id", pa.string())] + [(name, pa.float64()) for name in columns])


def run_child(args, phase: str, path: Path) -> dict:
    from timing import run_phase

    options = [
        "--file",
        str(path),
        "--steps",
        str(args.steps),
        "--seed",
        str(args.seed),
    ]
    return run_phase(__file__, phase, options, ROOT)


def child(args) -> dict:
    """One phase in this (fresh) process; its peak RSS and what it read."""
    import logging

    import numpy as np
    from rnnkit_recipes.forecasting.recipe import ForecastingRecipe

    from rnnkit import config as config_lib

    logging.getLogger("rnnkit").setLevel(logging.WARNING)
    recipe = ForecastingRecipe()
    config = config_lib.resolve(
        recipe.Config,
        CONFIG,
        {"data.path": args.file, "data.layout": "wide", "train.seed": args.seed},
    )
    started = time.perf_counter()
    values = windows = 0
    d = config.data
    if args.child == "floor":
        from rnnkit.models.forecaster import build_forecaster

        build_forecaster(
            input_length=d.input_length,
            horizon=d.horizon,
            segment_length=config.model.segment_length,
            time_periods=(float(d.seasonality),),
        )
    else:
        import keras

        data = recipe.load_data(config)
        if args.child == "train":
            keras.utils.set_random_seed(args.seed)
            model = recipe.build_model(config, data)
            model.fit(data.train, epochs=1, steps_per_epoch=args.steps, verbose=0)
            forecast = model.predict(data.test, verbose=0)
            assert len(forecast) == len(data.test_rows)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.child != "floor":  # counted after the peak is read
        from rnnkit_recipes.forecasting.data import window_origins

        grid = data.grid
        values = int(np.isfinite(grid.values).sum())
        windows = len(
            window_origins(
                grid, 1, grid.train_end - d.horizon, d.input_length, d.horizon,
                min_observed=max(1, d.input_length // 2),
            )
        )  # fmt: skip
    return {
        "peak_mib": peak,
        "seconds": seconds,
        "values": values,
        "windows": windows,
        "window_steps": d.input_length + d.horizon,
    }


if __name__ == "__main__":
    main()
