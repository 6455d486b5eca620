"""`rnnkit ARGS` that sends itself a signal at a named point of the run.

    python -m tests.training.kill_launcher POINT SIGNAL rnnkit-arguments...

POINT is one of KILL_POINTS, SIGNAL one of INT, TERM, KILL. The points are reached by
wrapping what the runner calls (the stock recipe's methods, the runner's writers) in
this process only, so the library carries no test hook. A write is killed halfway:
half its bytes are in the temporary file when the signal arrives.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

KILL_POINTS = ("data", "epoch", "model", "metrics", "evaluate")


def _kill(name: str) -> None:
    os.kill(os.getpid(), getattr(signal, f"SIG{name}"))
    # SIGINT and SIGTERM raise KeyboardInterrupt at the next bytecode; never go on.
    time.sleep(30)
    raise AssertionError(f"SIG{name} did not stop the run")


def _truncate_half(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def install(point: str, name: str) -> None:
    import keras
    from rnnkit_recipes.stock.recipe import StockRecipe

    from rnnkit.files import atomic_path
    from rnnkit.training import runner

    if point == "data":
        load_data = StockRecipe.load_data

        def killed_load_data(self, config):
            load_data(self, config)
            _kill(name)

        StockRecipe.load_data = killed_load_data
    elif point == "epoch":

        class KillMidEpoch(keras.callbacks.Callback):
            """In the second epoch, after the first epoch's backup was written."""

            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                if self.epoch == 1 and batch == 3:
                    _kill(name)

        StockRecipe.callbacks = lambda self, config, data: [KillMidEpoch()]
    elif point == "model":

        def killed_save_model(model, path):
            with atomic_path(path) as temporary:
                model.save(temporary)
                _truncate_half(temporary)
                _kill(name)

        runner.save_model = killed_save_model
    elif point == "metrics":
        write_json = runner.write_json

        def killed_write_json(path, value):
            if Path(path).name != runner.METRICS_FILE:
                return write_json(path, value)
            with atomic_path(path) as temporary:
                text = json.dumps(value, indent=2)
                temporary.write_text(text[: len(text) // 2], encoding="utf-8")
                _kill(name)

        runner.write_json = killed_write_json
    elif point == "evaluate":

        def killed_evaluate(self, model, data, config):
            _kill(name)

        StockRecipe.evaluate = killed_evaluate
    else:
        raise SystemExit(f"unknown kill point {point!r}; one of {KILL_POINTS}")


if __name__ == "__main__":
    from rnnkit.cli import main

    point, name, *arguments = sys.argv[1:]
    # Ctrl-C as in a terminal: a process whose parent ignores SIGINT (a pytest-xdist
    # worker, a `cmd &` in a script) starts with it ignored, and Python then installs
    # no KeyboardInterrupt handler; the self-sent SIGINT must still reach the run.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    install(point, name)
    main(arguments, prog_name="rnnkit")
