"""The benchmarks' own logic: the selection protocol the quality benchmarks share
(benchmarks/selection.py: chosen on validation only, the choice repeated per seed,
finished runs never trained twice, interrupted ones continued from their backup, a
ledger of other settings refused), the epoch times a resumed run keeps
(benchmarks/timing.py), and the captioning attention statistics
(benchmarks/captioning_attention.py)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import captioning_attention  # noqa: E402
import captioning_flickr8k  # noqa: E402
import selection  # noqa: E402
import sentiment_imdb  # noqa: E402
import timing  # noqa: E402
import translation_multi30k  # noqa: E402

from rnnkit import config as config_lib  # noqa: E402
from rnnkit import registry  # noqa: E402
from rnnkit.training import run_dir as run_dir_lib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# name: (validation score, validation loss, test score). The test scores rank the
# candidates the other way round, so a choice made on test would differ.
SCORES = {"a": (30.0, 2.0, 99.0), "b": (31.0, 2.1, 1.0), "c": (31.0, 1.9, 0.0)}


def trainer(calls):
    def train(name, overrides, seed, run_dir):
        calls.append((name, seed))
        run_dir.mkdir(parents=True, exist_ok=True)
        score, loss, test = SCORES[name]
        return {"validation": {"bleu": score, "loss": loss}, "test": {"bleu": test}}

    return train


def settings(*names, units=8):
    return {"overrides": {"x": 1}, "configs": {n: {"units": units} for n in names}}


def test_chosen_on_validation_ties_to_the_lower_loss_then_the_seeds(tmp_path):
    calls = []
    ledger = selection.select_then_seeds(
        {"a": {}, "b": {}, "c": {}},
        trainer(calls),
        [1337, 1, 2],
        tmp_path,
        criterion="bleu",
        settings=settings("a", "b", "c"),
    )
    assert ledger["chosen"] == "c"
    assert calls == [("a", 1337), ("b", 1337), ("c", 1337), ("c", 1), ("c", 2)]
    assert [seed for seed, _ in selection.chosen_runs(ledger)] == [1337, 1, 2]


def test_finished_runs_are_not_trained_again_and_candidates_may_be_added(tmp_path):
    calls = []
    selection.select_then_seeds(
        {"a": {}}, trainer(calls), [1337], tmp_path, "bleu", settings=settings("a")
    )
    calls.clear()
    ledger = selection.select_then_seeds(
        {"a": {}, "b": {}},
        trainer(calls),
        [1337, 1],
        tmp_path,
        "bleu",
        settings=settings("a", "b"),
    )
    assert calls == [("b", 1337), ("b", 1)]
    assert ledger["chosen"] == "b"
    assert set(ledger["settings"]["configs"]) == {"a", "b"}


@pytest.mark.parametrize(
    "other",
    [
        settings("a", units=16),  # a recorded candidate under another config
        {"overrides": {"x": 2}, "configs": {"a": {"units": 8}}},  # other overrides
    ],
)
def test_a_ledger_of_other_settings_is_refused(tmp_path, other):
    selection.select_then_seeds(
        {"a": {}}, trainer([]), [1337], tmp_path, "bleu", settings=settings("a")
    )
    with pytest.raises(SystemExit, match="recorded with other settings"):
        selection.select_then_seeds(
            {"a": {}}, trainer([]), [1337], tmp_path, "bleu", settings=other
        )


def test_an_interrupted_run_starts_again_in_a_fresh_directory(tmp_path):
    stale = tmp_path / "a-seed1337"
    stale.mkdir()
    (stale / "half-written").write_text("")
    selection.select_then_seeds(
        {"a": {}}, trainer([]), [1337], tmp_path, "bleu", settings=settings("a")
    )
    assert not (stale / "half-written").exists()


def test_an_interrupted_run_that_can_resume_keeps_its_directory(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}-seed1337").mkdir()
        (tmp_path / f"{name}-seed1337" / "backup").mkdir()
    asked = []

    def resumable(name, overrides, seed, run_dir):
        asked.append((name, seed, run_dir.name))
        return name == "a"

    calls = []
    selection.select_then_seeds(
        {"a": {}, "b": {}},
        trainer(calls),
        [1337],
        tmp_path,
        "bleu",
        settings=settings("a", "b"),
        resumable=resumable,
    )
    assert asked == [("a", 1337, "a-seed1337"), ("b", 1337, "b-seed1337")]
    assert (tmp_path / "a-seed1337" / "backup").is_dir()  # continued
    assert not (tmp_path / "b-seed1337" / "backup").exists()  # started afresh
    assert calls == [("a", 1337), ("b", 1337)]


def test_interrupted_run_needs_a_backup_the_same_config_and_no_end(tmp_path):
    recipe = registry.load("stock")
    config = config_lib.resolve(
        recipe.Config, ROOT / "recipes/stock/configs/smoke.toml", {}
    )
    run_dir = run_dir_lib.open_run_dir(recipe.name, config, tmp_path / "r", "", False)
    assert not selection.interrupted_run(recipe, config, run_dir)  # no backup
    (run_dir / run_dir_lib.BACKUP_DIR).mkdir()
    assert selection.interrupted_run(recipe, config, run_dir)
    other = config.with_values({"train.seed": config.train.seed + 1})
    assert not selection.interrupted_run(recipe, other, run_dir)
    (run_dir / run_dir_lib.RUN_FILE).write_text("{}")  # finished
    assert not selection.interrupted_run(recipe, config, run_dir)


def test_epoch_times_of_a_resumed_run_include_the_earlier_process(tmp_path):
    record = tmp_path / timing.EPOCH_SECONDS

    def epochs(timer, first, last):
        for epoch in range(first, last):
            timer.on_epoch_begin(epoch)
            timer.on_epoch_end(epoch)

    first = timing.epoch_timer(record=record)
    first.on_train_begin()
    epochs(first, 0, 3)  # killed during epoch 3; epoch 2's backup never written
    assert len(first.seconds) == 3
    resumed = timing.epoch_timer(record=record)
    resumed.on_train_begin()
    assert resumed.seconds == first.seconds
    epochs(resumed, 2, 5)  # the backup restores epoch 2's start
    assert resumed.seconds[:2] == first.seconds[:2]
    assert len(resumed.seconds) == 5
    assert timing.read_epoch_record(record) == (resumed.seconds, resumed.cpus)
    assert resumed.cpus == [timing.cpu_model()] * 5


def test_the_cpu_line_names_the_vector_extensions_a_figure_depends_on():
    xeon = {"fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    assert timing.cpu_flags(xeon) == "AVX-512, AVX512_BF16, AMX"
    assert timing.cpu_flags({"avx2", "avx512f"}) == "AVX-512, no AVX512_BF16, no AMX"
    # This machine's line carries its flags, read from /proc/cpuinfo, or says it
    # could not read them.
    flags = timing.cpu_line().rsplit("; ", 1)[1]
    assert flags.endswith("AMX)") or flags == "flags unknown)", flags


def test_each_run_records_the_cpus_its_epochs_ran_on(tmp_path, monkeypatch):
    """A run resumed on another machine records both CPUs, in the order used; a
    record written before the CPUs were reads them as unknown."""

    def train(name, overrides, seed, run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        record = run_dir / timing.EPOCH_SECONDS
        for cpu, epochs in (("Intel Xeon", (0, 1)), ("AMD EPYC", (2, 3))):
            monkeypatch.setattr(timing, "cpu_model", lambda cpu=cpu: cpu)
            timer = timing.epoch_timer(record=record)
            timer.on_train_begin()
            for epoch in epochs:
                timer.on_epoch_begin(epoch)
                timer.on_epoch_end(epoch)
        return {"validation": {"bleu": 1.0}, "test": {"bleu": 1.0}}

    ledger = selection.select_then_seeds(
        {"a": {}}, train, [1337], tmp_path, "bleu", settings=settings("a")
    )
    assert ledger["runs"]["a/seed1337"]["cpus"] == ["Intel Xeon", "AMD EPYC"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps([1.5, 2.5]))
    assert timing.read_epoch_record(old) == ([1.5, 2.5], ["unknown", "unknown"])


CAPTIONING_LEDGERS = ROOT / "benchmarks/ledgers/captioning"
# The README's row label of each captioning candidate, and the ledger that holds it.
CAPTIONING_ROWS = {
    "mobilenet_attention": ("mobilenet_attention", "attention, lambda 0.1"),
    "mobilenet_attention_penalty1": ("mobilenet_attention", "attention, lambda 1"),
    "mobilenet_attention_no_penalty": ("mobilenet_attention", "attention, lambda 0"),
    "mobilenet_mean": ("mobilenet_mean", "no attention"),
    "small_cnn_attention": ("small_cnn_attention", "small CNN, attention"),
    "small_cnn_mean": ("small_cnn_mean", "small CNN, no attention"),
}
# Each captioning system's test table (by the header that starts it) and the line that
# lists its test BLEU-4 per seed.
CAPTIONING_TABLES = {
    "mobilenet": (
        "| system | BLEU-1 | BLEU-2 | BLEU-3 | BLEU-4 | BLEU-4 greedy |",
        "Test BLEU-4 per seed, beam 3:",
    ),
    "small_cnn": (
        "| from scratch | BLEU-1 | BLEU-2 | BLEU-3 | BLEU-4 | BLEU-4 greedy |",
        "Test BLEU-4 per seed of the small CNN, beam 3:",
    ),
}


def _best_on_validation(validation: dict[str, dict], criterion: str) -> str:
    """The candidate the protocol chooses, worked out here from the records: the
    best validation `criterion`, an exact tie to the lower validation loss."""
    return max(
        validation,
        key=lambda name: (
            validation[name][criterion],
            -validation[name].get("loss", float("inf")),
        ),
    )


def _captioning_ledger(system: str) -> dict:
    return json.loads((CAPTIONING_LEDGERS / system / "selection.json").read_text())


def _table(header: str, recipe: str = "captioning") -> str:
    """The one table of the recipe's README that starts with `header`."""
    readme = (ROOT / "recipes" / recipe / "README.md").read_text("utf-8")
    assert readme.count(header) == 1, header
    return readme[readme.index(header) :].split("\n\n")[0]


def _row(table: str, label: str) -> list[str]:
    """The cells of the one row of `table` whose first cell starts with `label`."""
    rows = [line for line in table.splitlines() if line.startswith(f"| {label} ")]
    assert len(rows) == 1, (label, rows)
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


NEAREST_ROWS = {
    "mobilenet_attention": "nearest neighbour",
    "mobilenet_mean": "nearest neighbour",
    "small_cnn_attention": "nearest neighbour, the attention runs' CNN",
    "small_cnn_mean": "nearest neighbour, the attention-free runs' CNN",
}


def _baseline_cell(values: list[float]) -> str:
    """A baseline's figure: one number where every seed's is the same (the consensus
    caption, features that no run trains), else their mean and deviation."""
    return _mean_cell(values[:1] if len(set(values)) == 1 else values)


def _mean_cell(values: list[float], spec: str = ".2f") -> str:
    mean, std = selection.mean_std(values)
    if len(values) == 1:
        return format(mean, spec)
    return f"{format(mean, spec)} ± {format(std, spec)}"


@pytest.mark.parametrize(
    "system",
    ["mobilenet_attention", "mobilenet_mean", "small_cnn_attention", "small_cnn_mean"],
)
def test_captioning_readme_quotes_the_committed_ledger(system):
    """Every figure of the README's test table for each system is its committed
    selection ledger's: mean (and standard deviation) over the chosen candidate's
    seeds of BLEU-1..4 with beam search, BLEU-4 greedy and dev, and the epochs; the
    baselines' rows too, and the seed count the row names."""
    ledger = _captioning_ledger(system)
    runs = [  # every seed recorded, whichever command recorded it
        run
        for key, run in ledger["runs"].items()
        if key.split("/")[0] == ledger["chosen"]
    ]
    header, per_seed_start = CAPTIONING_TABLES[system.rsplit("_", 1)[0]]
    readme = _table(header)
    label = CAPTIONING_ROWS[ledger["chosen"]][1]
    seeds = f"({len(runs)} seeds)" if len(runs) > 1 else "(seed 1337"
    label_cell, *cells = _row(readme, label)
    assert seeds in label_cell, (label, seeds)
    expected = [
        _mean_cell([run["test"][f"bleu{n}"] for run in runs]) for n in (1, 2, 3, 4)
    ]
    expected[3] = f"**{expected[3]}**"
    expected.append(_mean_cell([run["test"]["bleu4_greedy"] for run in runs]))
    expected.append(_mean_cell([run["validation"]["bleu4"] for run in runs]))
    epochs = sorted(run["epochs"] for run in runs)
    epochs_cell = (
        f"{epochs[0]}-{epochs[-1]}" if epochs[0] != epochs[-1] else str(epochs[0])
    )
    assert cells == [*expected, epochs_cell], system
    readme_text = (ROOT / "recipes/captioning/README.md").read_text("utf-8")
    per_seed = [ln for ln in readme_text.splitlines() if ln.startswith(per_seed_start)]
    assert len(per_seed) == 1, per_seed_start
    for key, run in ledger["runs"].items():
        name, seed = key.split("/seed")
        if name == ledger["chosen"]:
            assert f"{run['test']['bleu4']:.2f} (seed {seed})" in per_seed[0], key
    # Nearest neighbour compares the encoder's features: one row for the frozen
    # MobileNet, a row per run for the small CNN (whose features each run learns).
    for baseline, key in (("consensus caption", "consensus"),
                          (NEAREST_ROWS[system], "nearest_neighbour")):  # fmt: skip
        figures = [
            _baseline_cell([run["test"][f"{key}_bleu{n}"] for run in runs])
            for n in (1, 2, 3, 4)
        ]
        assert _row(readme, baseline)[1:5] == figures, baseline


def test_captioning_readme_selection_table_is_the_ledgers_seed_1337():
    """The dev table that chose the configuration: each candidate's seed-1337 dev
    beam BLEU-4, dev cross-entropy and epochs (kept) as the ledgers recorded them;
    the bold one is the best on dev and the one the attention ledger chose."""
    table = _table("| candidate | dev BLEU-4 | dev cross-entropy |")
    attention = _captioning_ledger("mobilenet_attention")
    best = _best_on_validation(
        {
            name: attention["runs"][f"{name}/seed1337"]["validation"]
            for name, (system, _) in CAPTIONING_ROWS.items()
            if system == "mobilenet_attention"
        },
        attention["criterion"],
    )
    assert attention["chosen"] == best
    for name, (system, label) in CAPTIONING_ROWS.items():
        if not system.startswith("mobilenet"):  # chose nothing: one candidate each
            continue
        run = _captioning_ledger(system)["runs"][f"{name}/seed1337"]
        figure = f"{run['validation']['bleu4']:.2f}"
        cells = _row(table, label)[1:]
        assert cells[0] == (f"**{figure}**" if name == best else figure), name
        assert cells[1] == f"{run['validation_crossentropy']:.3f}", name
        assert cells[2] == f"{run['epochs']} ({run['kept_epoch']})", name


TRANSLATION_LEDGERS = ROOT / "benchmarks/ledgers/translation"
# The README's column of each architecture, and its label of each candidate.
TRANSLATION_COLUMNS = {"rnn": "attentive GRU", "transformer": "Transformer"}
TRANSLATION_CANDIDATES = {
    "rnn": {"smoothing0.1": "label smoothing 0.1", "smoothing0": "no label smoothing"},
    "transformer": {
        "tutorial": "the tutorial's size",
        "dropout0.2": "dropout 0.2",
        "ff512": "feed-forward 512",
        "warmup2000": "warm-up 2,000 steps",
    },
}
# Figures of a run's test2016 translations; the others are the run's own.
TRANSLATION_TEST_FIGURES = ("bleu", "bleu_greedy", "chrf")


def _translation_ledger(architecture: str) -> dict:
    path = TRANSLATION_LEDGERS / architecture / "selection.json"
    return json.loads(path.read_text())


def _chosen(ledger: dict) -> tuple[str, dict[int, dict]]:
    """The chosen candidate and {seed: run} of it, every seed recorded, in the order
    of the ledger's seeds. A selection still running has chosen nothing yet: then
    its one finished candidate."""
    names = {key.split("/seed")[0] for key in ledger["runs"]}
    chosen = ledger.get("chosen")
    if chosen is None:
        assert len(names) == 1, f"a selection still running, no choice yet: {names}"
        chosen = names.pop()
    runs = {
        int(key.split("/seed")[1]): run
        for key, run in ledger["runs"].items()
        if key.split("/seed")[0] == chosen
    }
    order = ledger.get("seeds", [])
    seeds = sorted(
        runs, key=lambda s: (order.index(s) if s in order else len(order), s)
    )
    return chosen, {seed: runs[seed] for seed in seeds}


def _mean_over(runs: dict[int, dict], key: str, spec: str = ".2f") -> str:
    """A test or side-by-side figure of the runs as the README writes it: the one
    run's, or mean ± standard deviation."""
    values = [
        run["test"][key] if key in TRANSLATION_TEST_FIGURES else run[key]
        for run in runs.values()
    ]
    return _mean_cell(values, spec)


def test_translation_readme_side_by_side_quotes_the_committed_ledgers():
    """Every cell of the translation README's side-by-side table is its
    architecture's committed selection ledger: the candidate chosen on val, its
    seeds, and each figure as the mean (and standard deviation) over them."""
    table = _table("| test2016 | attentive GRU | Transformer |", "translation")
    header = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    for architecture, column in TRANSLATION_COLUMNS.items():
        ledger = _translation_ledger(architecture)
        chosen, runs = _chosen(ledger)
        if "chosen" in ledger:
            first = ledger["seeds"][0]
            validation = {
                key.split("/seed")[0]: run["validation"]
                for key, run in ledger["runs"].items()
                if key.endswith(f"/seed{first}")
            }
            assert chosen == _best_on_validation(validation, ledger["criterion"])
        label = TRANSLATION_CANDIDATES[architecture][chosen]
        if "chosen" not in ledger:
            label += " (the only candidate run yet)"
        val = [run["validation"]["bleu"] for run in runs.values()]
        expected = {
            "configuration chosen on val": label,
            "seeds": ", ".join(str(seed) for seed in runs),
            "val BLEU, beam 5": _mean_cell(val),
            "test BLEU, beam 5": f"**{_mean_over(runs, 'bleu')}**",
            "test chrF, beam 5": _mean_over(runs, "chrf"),
            "test BLEU, greedy": _mean_over(runs, "bleu_greedy"),
            "parameters": f"{next(iter(runs.values()))['parameters']:,}",
            "epochs (best)": ", ".join(
                f"{run['epochs']} ({run['best_epoch']})" for run in runs.values()
            ),
            "minutes to the best val loss": _mean_over(runs, "minutes_to_best", ".1f"),
            "greedy sentences/s": _mean_over(
                runs, "greedy_sentences_per_second", ".1f"
            ),
            "beam sentences/s": _mean_over(runs, "beam_sentences_per_second", ".1f"),
        }
        index = header.index(column)
        for row, cell in expected.items():
            assert _row(table, row)[index] == cell, (architecture, row)


def test_translation_readme_selection_table_is_the_ledgers_first_seed():
    """The val table that chose each architecture's configuration: every candidate
    of the benchmark, its seed-1337 val BLEU (bold: the chosen one), test BLEU and
    epochs as the ledger holds them, or "not run"."""
    header = "| candidate | val BLEU, beam 5 | test BLEU, beam 5 |"
    table = _table(header, "translation")
    for architecture, labels in TRANSLATION_CANDIDATES.items():
        assert labels.keys() == translation_multi30k.CANDIDATES[architecture].keys()
        ledger = _translation_ledger(architecture)
        runs = {
            key.split("/seed")[0]: run
            for key, run in ledger["runs"].items()
            if key.endswith("/seed1337")
        }
        for name, label in labels.items():
            cells = _row(table, f"{TRANSLATION_COLUMNS[architecture]}, {label}")[1:]
            if name not in runs:
                assert cells[0] == "not run", name
                continue
            run = runs[name]
            figure = f"{run['validation']['bleu']:.2f}"
            bold = name == ledger.get("chosen")
            assert cells[0] == (f"**{figure}**" if bold else figure), name
            assert cells[1] == f"{run['test']['bleu']:.2f}", name
            assert cells[2] == str(run["epochs"]), name


def test_attention_statistics_of_uniform_and_hard_attention():
    locations, words = 49, 11
    uniform = np.full((2, 20, locations), 1.0 / locations)
    figures = captioning_attention.attention_statistics(uniform, np.array([words] * 2))
    assert figures["entropy_share"] == pytest.approx(1.0)
    assert figures["locations"] == pytest.approx(locations)
    assert figures["peak"] == pytest.approx(1.0 / locations)
    # The regulariser's floor for T words over L locations: (L - T)^2 / (L T).
    floor = (locations - words) ** 2 / (locations * words)
    assert figures["coverage"] == pytest.approx(floor)
    hard = np.zeros((1, 20, locations))
    hard[0, np.arange(words), np.arange(words)] = 1.0
    hard[0, words:] = 0.5  # after the caption ends: never read
    figures = captioning_attention.attention_statistics(hard, np.array([words]))
    assert figures["entropy"] == pytest.approx(0.0, abs=1e-9)
    assert figures["locations"] == pytest.approx(1.0)
    assert figures["peak"] == 1.0
    assert figures["coverage"] == pytest.approx((locations - words) / words)


def test_side_by_side_means_name_the_seeds_a_figure_lacks(capsys):
    """A chosen run recorded before the side-by-side figures existed: its test
    figures count in the means, and the figures it lacks say which seeds they are."""
    side = {"parameters": 100, "minutes_to_best": 30.0}
    ledger = {
        "chosen": "a",
        "seeds": [1337, 2],
        "runs": {
            "a/seed1337": {"test": {"bleu": 30.0, "chrf": 50.0}},
            "a/seed2": {"test": {"bleu": 32.0, "chrf": 52.0}, **side},
            "b/seed1337": {"test": {"bleu": 0.0}, "parameters": 1},
        },
    }
    figures = translation_multi30k.mean_figures(ledger)
    assert figures["bleu"] == pytest.approx(31.0)
    assert figures["chrf"] == pytest.approx(51.0)
    assert figures["parameters"] == 100
    assert figures["seeds"]["parameters"] == [2]
    assert figures["seeds"]["bleu_greedy"] == []
    assert "bleu" not in figures["seeds"]
    translation_multi30k.print_side_by_side({"rnn": figures}, "means")
    printed = capsys.readouterr().out
    assert "rnn: parameters from seeds [2] only" in printed
    assert "rnn: greedy BLEU from seeds none only" in printed


# -- A shipped config is the configuration its README figure came from (issue 57.8) --

LEDGERS = sorted((ROOT / "benchmarks" / "ledgers").glob("*/*/selection.json"))
# Keys a ledger's runs set per run, not part of the configuration a file ships, and
# where a download comes from (the same archive over http then, https now).
PER_RUN = {"train.seed", "data.limit", "data.url"}


def _flat(sections: dict) -> dict:
    return {
        f"{section}.{key}": tuple(value) if isinstance(value, list) else value
        for section, values in sections.items()
        for key, value in values.items()
    }


def _chosen_configuration(
    ledger: dict, recipe: str, system: str
) -> tuple[dict, Path, dict]:
    """The configuration the ledger chose, as it trained ({key: value}), the shipped
    file the benchmark names for it, and the changes the benchmark states it makes
    to that file (an ablation's, such as captioning's attention-free decoder)."""
    name = ledger["chosen"]
    if recipe == "translation":  # its ledgers: the base config and CANDIDATES
        overrides = translation_multi30k.CANDIDATES[system][name]
        trained = {**_flat(ledger["settings"]), **overrides}
        return trained, ROOT / translation_multi30k.ARCHITECTURES[system], {}
    if recipe == "sentiment":  # its ledgers: a task's config and its candidates
        file, candidates = sentiment_imdb.TASKS[system]
        trained = {**_flat(ledger["settings"]), **candidates[name]}
        return trained, ROOT / file, {}
    assert recipe == "captioning", recipe
    _, file, stated = captioning_flickr8k.CANDIDATES[name]
    trained = _flat(ledger["settings"][selection.CANDIDATE_CONFIGS][name])
    return trained, Path(file), stated


@pytest.mark.parametrize(
    "path", LEDGERS, ids=[f"{p.parts[-3]}-{p.parts[-2]}" for p in LEDGERS]
)
def test_the_configuration_chosen_on_validation_is_the_shipped_config(path):
    """Each committed selection's choice is its benchmark's config file, value for
    value (the seed and a size limit set per run aside; an ablation's stated change
    applied), so a user who runs that file trains what the README reports."""
    recipe_name, system = path.parts[-3], path.parts[-2]
    ledger = json.loads(path.read_text())
    trained, file, stated = _chosen_configuration(ledger, recipe_name, system)
    recipe = registry.load(recipe_name)
    shipped = config_lib.load_toml(recipe.Config, file).with_values(stated).flat()
    differ = {
        key: {"shipped": shipped.get(key), "chosen": value}
        for key, value in trained.items()
        if key not in PER_RUN and shipped.get(key) != value
    }
    assert not differ, f"{file.name} is not {ledger['chosen']}: {differ}"


def test_pytorch_is_compared_with_subnormals_flushed_as_tensorflow_does():
    """TensorFlow flushes subnormal floats to zero; PyTorch, by default, computes
    with them (many times slower on x86), which made its LSTM's training at 500 steps
    look 8 times slower than it need be. The benchmarks' PyTorch columns flush them."""
    torch = pytest.importorskip("torch")
    subnormal = 1e-40  # below float32's smallest normal number, 1.18e-38
    try:
        torch.set_flush_denormal(False)
        assert torch.tensor([subnormal]).mul(1.0).item() != 0.0
        timing.torch_as_tensorflow()
        assert torch.tensor([subnormal]).mul(1.0).item() == 0.0
    finally:
        torch.set_flush_denormal(False)
