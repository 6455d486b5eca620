"""The benchmarks' own logic: the selection protocol the quality benchmarks share
(benchmarks/selection.py: chosen on validation only, the choice repeated per seed,
finished runs never trained twice, a ledger of other settings refused), and the
captioning attention statistics (benchmarks/captioning_attention.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import captioning_attention  # noqa: E402
import selection  # noqa: E402

# name: (validation score, validation loss, test score). The test scores rank the
# candidates the other way round, so a choice made on test would differ.
SCORES = {"a": (30.0, 2.0, 99.0), "b": (31.0, 2.1, 1.0), "c": (31.0, 1.9, 0.0)}


def trainer(calls):
    def train(name, overrides, seed, run_dir):
        calls.append((name, seed))
        run_dir.mkdir(parents=True)
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
