"""`rnnkit diagnose`: the command over rnnkit.diagnostics."""

from click.testing import CliRunner

from rnnkit.cli import main


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
