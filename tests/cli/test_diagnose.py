"""`rnnkit diagnose`: the command over rnnkit.diagnostics."""

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
