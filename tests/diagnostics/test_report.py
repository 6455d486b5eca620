"""Tests for rnnkit.diagnostics.report: the CSV and PNG files of `rnnkit diagnose`."""

import keras
import numpy as np

from rnnkit import diagnostics
from tests.diagnostics.support import tiny_model


def test_diagnose_writes_csv_and_png(tmp_path):
    model = tiny_model()
    probe = diagnostics.probe_windows(np.arange(60) % 6, count=3, length=9)
    batches = diagnostics.random_batches(np.arange(200) % 6, 4, 8, steps=4, seed=0)
    tracker = diagnostics.SpectralNormTracker(model.recurrent_layers, every=2)
    rows = diagnostics.train_with_clipping(
        model, batches, keras.optimizers.Adam(0.01), 1.0, tracker
    )
    written = diagnostics.diagnose_language_model(
        {"simple_rnn": (tiny_model(), model)},
        probe,
        tmp_path,
        clipping={"simple_rnn": rows},
        spectral={"simple_rnn": tracker.rows},
    )
    assert sorted(written) == sorted(
        f"{name}.{ext}"
        for name in ("gradient_norms", "clipping", "spectral_norms")
        for ext in ("csv", "png")
    )
    assert (tmp_path / "gradient_norms.png").read_bytes()[:4] == b"\x89PNG"
    lines = (tmp_path / "gradient_norms.csv").read_text().splitlines()
    assert lines[0].startswith("model,state,distance,mean_norm")
    assert len(lines) == 1 + 2 * 8
