"""Every teaching notebook runs top to bottom without an error, and the committed
copies hold the outputs of such a run."""

import os
import re
import signal
from pathlib import Path

import nbformat
import pytest
from jupyter_client.provisioning import local_provisioner
from nbclient import NotebookClient

from tests import preloaded
from tests.shared_data import SHARED_DATA, require

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# A line of TensorFlow's C++ log ("I0000 00:00:1795.. 8359 port.cc:153] ...") or
# absl's note before it.
TENSORFLOW_LOG = re.compile(
    r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]"
    r"|WARNING: All log messages before absl"
)
# Notebooks marked slow (a quick local pass leaves them out with -m "not slow"). None
# today: with QUICK below every notebook runs in well under a minute on a 2-core CPU.
SLOW: set[str] = set()
# Smaller values of the parameters of each notebook's first cell, set by a cell the
# test adds after it: the test checks that the notebook runs top to bottom (and the
# exact checks it asserts inside, which do not depend on these sizes), not the
# quality its committed outputs show, which come from a run with the notebook's own
# values (test_committed_notebook_was_run_top_to_bottom). The full values ran in
# 2 to 141 s a notebook in CI (Intel Xeon, 2 cores); these take a fraction of that.
QUICK: dict[str, dict[str, object]] = {
    "01_rnn_from_scratch": {
        "TRAIN_CHARACTERS": 12_000,
        "VALIDATION_CHARACTERS": 2_000,
        "EPOCHS": 1,
        "GENERATED_CHARACTERS": 20,
    },
    "02_bptt_and_gradients": {
        "DIAGNOSE_UNITS": 16,
        "DIAGNOSE_STEPS": 10,
        "FULL_BPTT": 128,
        "LM_CHARACTERS": 2_500,  # one batch of 16 x FULL_BPTT tokens
        "LM_EPOCHS": 1,
    },
    "03_lstm_and_gru": {
        "TRAIN_WINDOWS": 300,
        "EPOCHS": 1,
        "TIMING_BATCH": 16,
        "TIMING_STEPS": 20,
        "TIMING_UNITS": 32,
        "TIMING_REPEATS": 1,
    },
    "05_seq2seq_translation": {
        "TRAIN_PAIRS": 120,
        "EPOCHS": 1,
        "UNITS": 32,
        "TEST_SENTENCES": 8,
        "BEAM_WIDTH": 2,
        "N_BEST": 2,
    },
    "06_recipes_quickstart": {
        "SENTIMENT_REVIEWS": 200,
        "SENTIMENT_EPOCHS": 1,
        "TRANSLATION_PAIRS": 100,
        "TRANSLATION_EPOCHS": 1,
        "CAPTION_IMAGES": 16,
        "CAPTION_EPOCHS": 1,
        "LM_CHARACTERS": 5_000,
        "LM_EPOCHS": 1,
        "SAMPLE_CHARACTERS": 20,
        "TUNING_TRIALS": 1,
    },
    "07_from_attention_to_transformer": {
        "TRAIN_PAIRS": 120,
        "EPOCHS": 1,
        "RNN_UNITS": 32,
        "BEAM_WIDTH": 2,
    },
    "08_forecasting_many_series": {
        "M4_SERIES": 20,
        "M4_EPOCHS": 1,
        "TICKERS": 20,
        "STOCK_EPOCHS": 1,
    },
    "09_parallel_scan_recurrences": {
        "SCAN_STEPS": 64,
        "UNITS": 8,
        "TIMING_STEPS": 16,
        "TIMING_BATCH": 4,
        "TIMING_REPEATS": 1,
        "MEMORY_STEPS": 25,
    },
}


class _Kernel(preloaded.Popen):
    """The kernel process as jupyter_client's local provisioner handles it."""

    stdin = stdout = stderr = None  # the provisioner closes those it finds

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _kernel_launcher(log: Path):
    """jupyter_client's `launch_kernel`, forking the kernel from the test worker's
    preloaded interpreter (tests/preloaded.py) instead of starting `python` afresh: a
    kernel imports TensorFlow in its first cell, 7 to 8 s of CPU for each notebook.
    Its own session, as jupyter_client gives it; its output goes to `log`."""

    def launch(cmd, stdin=None, stdout=None, stderr=None, env=None, cwd=None, **_):
        assert Path(cmd[0]).name.startswith("python") and cmd[1] == "-m", cmd
        environment = dict(os.environ if env is None else env)
        environment["JPY_PARENT_PID"] = str(os.getpid())
        return _Kernel(
            cmd[1:],
            cwd=cwd,
            env=environment,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )

    return launch


def _errors(notebook) -> list:
    return [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


def test_the_course_is_there():
    names = [path.stem for path in NOTEBOOKS]
    assert names[:9] == [
        "01_rnn_from_scratch",
        "02_bptt_and_gradients",
        "03_lstm_and_gru",
        "04_attention",
        "05_seq2seq_translation",
        "06_recipes_quickstart",
        "07_from_attention_to_transformer",
        "08_forecasting_many_series",
        "09_parallel_scan_recurrences",
    ], names
    assert SLOW <= set(names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_was_run_top_to_bottom(path):
    notebook = nbformat.read(path, as_version=4)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    counts = [cell.get("execution_count") for cell in code_cells]
    # One run, every cell once, in order: 1, 2, ..., n.
    assert counts == list(range(1, len(code_cells) + 1)), counts
    assert not _errors(notebook), _errors(notebook)[0].get("evalue")
    assert any(cell.get("outputs") for cell in code_cells), "no outputs kept"
    # What a reader sees: no C++ start-up lines of TensorFlow (oneDNN, CUDA, XLA
    # service), which say nothing about the lesson; run with TF_CPP_MIN_LOG_LEVEL=2.
    noise = [
        line
        for cell in code_cells
        for output in cell.get("outputs", [])
        if output.get("name") == "stderr"
        for line in output.get("text", "").splitlines()
        if TENSORFLOW_LOG.match(line)
    ]
    assert not noise, noise[:2]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(path, id=path.stem, marks=[pytest.mark.slow] * (path.stem in SLOW))
        for path in NOTEBOOKS
    ],
)
def test_notebook_runs(path, tmp_path, monkeypatch):
    require(SHARED_DATA)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The notebooks run in tmp_path (their run folders land there) and find the
    # repository, and the shared data beside it, through RNNKIT_ROOT.
    monkeypatch.setenv("RNNKIT_ROOT", str(ROOT))
    log = tmp_path / "kernel.log"
    monkeypatch.setattr(local_provisioner, "launch_kernel", _kernel_launcher(log))
    notebook = nbformat.read(path, as_version=4)
    quick = QUICK.get(path.stem, {})
    if quick:
        first = next(
            i for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"
        )
        lines = [f"{name} = {value!r}" for name, value in quick.items()]
        notebook.cells.insert(first + 1, nbformat.v4.new_code_cell("\n".join(lines)))
    try:
        NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(tmp_path)}},
        ).execute()
    except Exception:
        if log.exists():
            print(log.read_text(errors="replace")[-3000:])
        raise
    assert not _errors(notebook)


def _assigned_names(source: str) -> list[str]:
    """The names a cell assigns at top level (`A = 1`, `A, B = 1, 2`)."""
    import ast

    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names += [e.id for e in elements if isinstance(e, ast.Name)]
    return names


def test_quick_parameters_name_first_cell_values():
    """QUICK sets only values the first cell has (a renamed one would be ignored)."""
    for path in NOTEBOOKS:
        if path.stem in QUICK:
            notebook = nbformat.read(path, as_version=4)
            first = next(c for c in notebook.cells if c.cell_type == "code")
            assert set(QUICK[path.stem]) <= set(_assigned_names(first.source))


def _sentiment_table() -> dict[str, float]:
    """Accuracy by system of the first results table of recipes/sentiment/README.md."""
    lines = (ROOT / "recipes" / "sentiment" / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        system, accuracy = [cell.strip() for cell in line.strip("|").split("|")][:2]
        rows[system] = float(accuracy.split()[0])
    return rows


def test_notebook_06_quotes_the_strongest_sentiment_baseline():
    """The course compares the model with the strongest baseline of the recipe's
    README table, not a weaker one."""
    rows = _sentiment_table()
    model = next(value for system, value in rows.items() if system.startswith("model"))
    baselines = {s: v for s, v in rows.items() if not s.startswith("model")}
    strongest = max(baselines.values())
    notebook = nbformat.read(ROOT / "notebooks" / "06_recipes_quickstart.ipynb", 4)
    text = " ".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    text = " ".join(text.split())
    assert f"reaches {model:.4f}" in text
    if strongest > model:
        assert "strongest baseline still beats it" in text
    assert f"scores {strongest:.4f}" in text, (strongest, baselines)
