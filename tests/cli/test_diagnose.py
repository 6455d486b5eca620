"""`rnnkit diagnose`: the command over rnnkit.diagnostics."""

import csv
import math

import pytest
from click.testing import CliRunner

from rnnkit.cli import main
from tests.cli_support import error_line


def test_diagnose_command_compares_fresh_cells_on_real_text(tmp_path):
    output = tmp_path / "diagnostics"
    result = CliRunner().invoke(
        main,
        ["diagnose", "--cell", "simple_rnn", "--cell", "gru", "--steps", "3",
         "--window", "12", "--units", "8", "--output", str(output)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    rows = (output / "gradient_norms.csv").read_text().splitlines()[1:]
    assert {tuple(row.split(",")[:2]) for row in rows} == {
        (cell, state)
        for cell in ("simple_rnn", "gru")
        for state in ("fresh", "trained")
    }
    clipping = (output / "clipping.csv").read_text().splitlines()
    assert len(clipping) == 1 + 2 * 3
    assert (output / "spectral_norms.png").is_file()


def test_the_memory_tasks_take_a_small_transformer_and_stacked_layers(tmp_path):
    """`--cells transformer`: a causal Transformer trained on recall beside two
    stacked GRU layers (`--layers 2`): their rows (no W_hh for the Transformer; the
    GRUs' parameters those of two layers and the read-out) and the gradient of the
    last query's loss at every step, for the Transformer at its input."""
    output = tmp_path / "memory"
    result = CliRunner().invoke(
        main,
        ["diagnose", "--task", "mqar", "--quick", "--cells", "gru,transformer",
         "--layers", "2", "--clip", "on", "--lengths", "4", "--steps", "25",
         "--output", str(output)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    with open(output / "memory_results.csv") as file:
        rows = {row["cell"]: row for row in csv.DictReader(file)}
    assert rows["gru"]["layers"] == rows["transformer"]["layers"] == "2"
    units, classes = 32, 33  # --quick's width; keys, values and the blank

    def gru(inputs):  # kernel, recurrent kernel, and two bias rows (reset_after)
        return 3 * (inputs * units + units * units + 2 * units)

    expected = gru(classes) + gru(units) + units * classes + classes
    assert int(rows["gru"]["parameters"]) == expected
    assert rows["transformer"]["sigma_max_W_hh"] == "nan"
    assert float(rows["gru"]["sigma_max_W_hh"]) > 0
    with open(output / "memory_gradients.csv") as file:
        norms = {"gru": [], "transformer": []}
        for row in csv.DictReader(file):
            norms[row["cell"]].append(float(row["mean_norm"]))
    for values in norms.values():
        assert len(values) == 12 and all(math.isfinite(n) and n > 0 for n in values)


@pytest.mark.parametrize(
    "options, expected",
    [
        # --set reaches the text's config: 50 characters leave too few to measure.
        (["--set", "data.limit=50"], "the test part of the text has 50 tokens"),
        (["--window", "100000"], "use --window"),
    ],
)
def test_diagnose_on_too_little_text_is_a_one_line_error(tmp_path, options, expected):
    result = CliRunner().invoke(
        main,
        ["diagnose", "--cell", "gru", "--steps", "1", "--units", "4",
         "--output", str(tmp_path / "out"), *options],
    )  # fmt: skip
    message = error_line(result)
    assert expected in message and "too few" in message
    assert "longer text" in message
    assert not (tmp_path / "out").exists()


def test_diagnose_refuses_an_unknown_setting(tmp_path):
    result = CliRunner().invoke(main, ["diagnose", "--set", "data.levle=word"])
    assert "unknown config key 'data.levle'" in error_line(result)


def test_memory_tasks_quick_lstm_solves_what_the_simple_rnn_cannot(tmp_path):
    # The "done when": fixed seed, the --quick setting (adding problem, T=20).
    output = tmp_path / "memory"
    result = CliRunner().invoke(
        main,
        ["diagnose", "--task", "adding", "--quick", "--cells", "simple_rnn,lstm",
         "--clip", "on", "--output", str(output)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    with open(output / "memory_summary.csv") as file:
        summary = {row["cell"]: row for row in csv.DictReader(file)}
    assert summary["lstm"]["longest_solved"] == "20"
    assert summary["simple_rnn"]["longest_solved"] == ""
    assert summary["simple_rnn"]["first_not_solved"] == "20"
    with open(output / "memory_results.csv") as file:
        results = {row["cell"]: row for row in csv.DictReader(file)}
    assert float(results["lstm"]["error_vs_baseline"]) <= 0.05
    assert float(results["simple_rnn"]["error_vs_baseline"]) > 0.5
    gradients = (output / "memory_gradients.csv").read_text().splitlines()
    assert len(gradients) == 1 + 2 * 20  # every distance of both models
    for name in ("memory_errors.png", "memory_gradients.png"):
        assert (output / name).read_bytes()[:4] == b"\x89PNG"


def test_selective_copying_trains_a_cell_without_a_recurrent_kernel(tmp_path):
    """The selective-copying task end to end for the LRU, which has no W_hh: a
    row, its gradients at every distance, and no sigma_max to report."""
    output = tmp_path / "memory"
    result = CliRunner().invoke(
        main,
        ["diagnose", "--task", "selective_copy", "--quick", "--cells", "lru",
         "--clip", "on", "--lengths", "10", "--steps", "50", "--output", str(output)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    assert "sigma_max(W_hh) none (no W_hh)" in result.output
    with open(output / "memory_results.csv") as file:
        (row,) = csv.DictReader(file)
    assert row["task"] == "selective_copy" and row["length"] == "10"
    assert row["steps_trained"] == "50"
    # The baseline: blanks, then uniform guesses over 8 symbols, on T + 11 steps.
    assert float(row["baseline"]) == pytest.approx(10 * math.log(8) / 21)
    gradients = (output / "memory_gradients.csv").read_text().splitlines()
    assert len(gradients) == 1 + 21


@pytest.mark.parametrize(
    "options, expected",
    [
        (["--task", "adding,copyy"], "--task 'adding,copyy': unknown 'copyy'"),
        (["--task", "copy", "--cells", "lstm,lstn"], "give a comma-separated list"),
        (["--task", "copy", "--lengths", "0,10"], "whole numbers of 2 or more"),
        (["--task", "copy", "--output", "FILE/out"], "choose another --output"),
        (["--task", "copy", "--clipnorm", "0"], "--clipnorm 0 with --task"),
    ],
)
def test_memory_tasks_bad_input_is_a_one_line_error(tmp_path, options, expected):
    (tmp_path / "FILE").write_text("a file, not a folder")
    options = [str(tmp_path / o) if o.startswith("FILE") else o for o in options]
    result = CliRunner().invoke(main, ["diagnose", "--quick", *options])
    assert expected in error_line(result)


def test_memory_options_without_a_memory_task_are_a_usage_error():
    result = CliRunner().invoke(main, ["diagnose", "--lengths", "10"])
    assert result.exit_code == 2
    assert "--lengths is for the memory tasks: add --task adding,copy" in result.output
