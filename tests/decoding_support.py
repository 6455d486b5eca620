"""Shared checks for the recipes that decode with a beam (translation, captioning)."""

from __future__ import annotations

from pathlib import Path

from rnnkit import config as config_lib
from rnnkit.recipe import Recipe
from rnnkit.training import runner


def assert_n_best_widens_the_beam(
    recipe: Recipe, run_dir: Path, inputs: list[str], n_best: int
) -> None:
    """`--beam 1 --n-best N` predicts what `--beam N --n-best N` does: a beam of N
    keeps N hypotheses, so a longer list widens the beam for that call, not greedy
    search with empty slots. Each input prints one line and then its N hypotheses."""
    config = config_lib.load_toml(recipe.Config, run_dir / runner.CONFIG_FILE)
    model = runner.load_model(run_dir / runner.MODEL_FILE)

    def predicted(beam_width: int) -> list[str]:
        options = {"evaluation.beam_width": beam_width, "evaluation.n_best": n_best}
        return recipe.predict(model, inputs, config.with_values(options))

    widened = predicted(1)
    assert len(widened) == len(inputs) * (1 + n_best), widened
    assert widened == predicted(n_best)
