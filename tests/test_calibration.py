"""`rnnkit calibrate` and rnnkit.layers.calibration: XLA-or-plain measured per machine.

Each test here has a cache folder of its own, empty at first, and leaves no
calibration loaded (`_own_cache`). Elsewhere no fixture is needed: the layers follow
a calibration only once it is loaded (`calibration.load`), which no test outside
this file does.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rnnkit.layers import GRU, LSTM, SimpleRNN, calibration
from tests.cli_support import error_line, invoke

XLA = "XLA-compiled"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """The cache in a folder of this test's (made when the test writes to it), and
    nothing loaded before or after."""
    monkeypatch.setenv("RNNKIT_CACHE_DIR", str(tmp_path / "cache"))
    # The LSTM's default here: never compiled alone in one loop (its default for a
    # large step), so that a measurement saying otherwise shows.
    monkeypatch.setattr(LSTM.cell_class, "SMALL_STEP", 0)
    calibration.unload()
    yield
    calibration.unload()


def measured(layer_cls, mode, steps, units, compile, batch=8):
    """A cached measurement as `calibrate` writes it, with a chosen outcome."""
    cell = layer_cls(units).cell
    return calibration.Measurement(
        cell=f"{type(cell).__module__}.{type(cell).__qualname__}",
        mode=mode,
        steps=steps,
        units=units,
        batch=batch,
        features=4,
        xla_rate=2.0 if compile else 1.0,
        plain_rate=1.0 if compile else 2.0,
        ratio=2.0 if compile else 0.5,
        low=0.5,
        high=2.0,
        rounds=3,
        compile=compile,
    )


def traced_path(layer, steps=6, batch=8, training=False):
    """The execution path of a traced call (fit and predict trace their calls)."""
    import tensorflow as tf

    x = np.random.default_rng(0).standard_normal((batch, steps, 4)).astype("float32")
    outputs = tf.function(lambda inputs: layer(inputs, training=training))(x)
    return layer.execution_path, outputs


def test_calibrate_times_both_loops_and_caches_each_choice():
    reported = []
    found = calibration.calibrate(
        ["GRU", "SimpleRNN"],
        [(6, 8)],
        batch=4,
        features=3,
        rounds=2,
        report=reported.append,
    )
    assert reported == found
    assert [(m.family, m.mode) for m in found] == [
        ("GRU", "training"),
        ("GRU", "inference"),
        ("SimpleRNN", "training"),
        ("SimpleRNN", "inference"),
    ]
    for item in found:
        assert (item.steps, item.units, item.batch, item.features) == (6, 8, 4, 3)
        assert item.xla_rate > 0 and item.plain_rate > 0
        assert item.ratio == pytest.approx(item.xla_rate / item.plain_rate, rel=1e-3)
        assert item.low <= item.ratio * 1.0001 and item.ratio <= item.high * 1.0001
        assert item.compile == (item.ratio >= 1 + calibration.MIN_GAIN)
    assert calibration.measurements() == found
    content = json.loads(calibration.cache_file().read_text())
    entry = content["machines"][calibration.machine_key()]
    assert entry["machine"]["cores"] >= 1
    assert len(entry["measurements"]) == 4


def test_the_choice_follows_the_recorded_ratio_at_the_threshold(monkeypatch):
    """A raw ratio of 1.02996 is recorded as 1.03; the choice must read "compile" as
    the recorded ratio says (it read "plain" once in CI: `False == (1.03 >= 1.03)`)."""
    medians = iter([102.996, 100.0])  # the XLA loop's sequences/s, then the plain's
    monkeypatch.setattr(calibration.statistics, "median", lambda rates: next(medians))
    found = calibration.measure(
        "GRU", 6, 8, "inference", batch=4, features=3, rounds=1, round_seconds=0.001
    )
    assert found.ratio == 1 + calibration.MIN_GAIN
    assert found.compile


def test_a_new_measurement_replaces_the_same_slot_and_keeps_the_others():
    first = measured(GRU, "training", 6, 8, True)
    other = measured(LSTM, "inference", 6, 8, False)
    calibration.record([first, other])
    again = dataclasses.replace(first, compile=False, ratio=0.9)
    calibration.record([again])
    assert calibration.measurements() == [again, other]


def test_layers_follow_the_machines_measurement_over_their_default():
    # The defaults (for a large step): the LSTM does not compile, the GRU does.
    assert not LSTM(8).cell.xla_pays(True, batch=8) and GRU(8).cell.xla_pays(False)
    calibration.record(
        [
            measured(LSTM, "inference", 6, 8, True),
            measured(GRU, "inference", 6, 8, False),
        ]
    )
    assert len(calibration.load()) == 2
    for layer_cls, compiled in ((LSTM, True), (GRU, False)):
        layer = layer_cls(8)
        path, outputs = traced_path(layer)
        assert (XLA in path) == compiled, path
        plain = layer_cls(8, jit_compile=False)
        plain(np.zeros((8, 6, 4), "float32"))
        plain.set_weights(layer.get_weights())
        x = np.random.default_rng(0).standard_normal((8, 6, 4)).astype("float32")
        np.testing.assert_allclose(plain(x), outputs, rtol=1e-5, atol=1e-6)
    # Only the measured mode changes: LSTM training keeps its default.
    assert XLA not in traced_path(LSTM(8), training=True)[0]
    # Explicit jit_compile wins over the measurement.
    assert XLA not in traced_path(LSTM(8, jit_compile=False))[0]
    assert XLA in traced_path(GRU(8, jit_compile=True))[0]


def test_the_nearest_measured_shape_decides():
    calibration.record(
        [
            measured(SimpleRNN, "inference", 50, 16, True),
            measured(SimpleRNN, "inference", 50, 512, False),
            measured(SimpleRNN, "inference", 10, 128, True),
            measured(SimpleRNN, "inference", 400, 128, False),
        ]
    )
    calibration.load()
    choice = calibration.measured_choice
    assert choice(SimpleRNN(24).cell, False, 50, 8) is True  # units nearest 16
    assert choice(SimpleRNN(300).cell, False, 50, 8) is False  # nearest 512
    assert choice(SimpleRNN(128).cell, False, 20, 8) is True  # then steps
    assert choice(SimpleRNN(128).cell, False, 300, 8) is False
    assert choice(SimpleRNN(128).cell, True, 300, 8) is None  # mode not measured
    assert choice(GRU(128).cell, False, 300, 8) is None  # cell not measured
    assert XLA in traced_path(SimpleRNN(24))[0]
    assert XLA not in traced_path(SimpleRNN(300))[0]


def test_a_measurement_decides_only_near_its_batch(monkeypatch):
    """`rnnkit calibrate` measures at 64 rows by default; a call of one row is
    another regime (the LSTM compiles its small steps by default), which a batch-64
    measurement must not overrule; a batch within 4 times the measured one follows
    it, and so does a batch unknown when traced."""
    # The LSTM's own rule back, with a threshold that compiles 1 and 32 rows of 8
    # units by default: the measurement (do not compile) must win at 32, not at 1.
    monkeypatch.setattr(LSTM.cell_class, "SMALL_STEP", 64 * 8)
    calibration.record([measured(LSTM, "inference", 6, 8, False, batch=64)])
    calibration.load()
    choice = calibration.measured_choice
    assert choice(LSTM(8).cell, False, 6, 16) is False
    assert choice(LSTM(8).cell, False, 6, 256) is False
    assert choice(LSTM(8).cell, False, 6, None) is False
    assert choice(LSTM(8).cell, False, 6, 8) is None
    assert choice(LSTM(8).cell, False, 6, 1) is None
    # So a batch of one runs the LSTM's own rule: one small step, compiled.
    assert LSTM(8).cell.xla_pays(False, batch=1)
    assert LSTM(8).cell.xla_pays(False, batch=32)
    assert XLA in traced_path(LSTM(8), batch=1)[0]
    assert XLA not in traced_path(LSTM(8), batch=32)[0]


def test_another_machines_measurements_are_not_used(monkeypatch):
    calibration.record([measured(LSTM, "inference", 6, 8, True)])
    calibration.load()
    assert XLA in traced_path(LSTM(8))[0]
    monkeypatch.setattr(calibration, "machine_key", lambda: "another CPU, 4 cores")
    assert calibration.measurements() == []
    assert calibration.load() == []
    assert XLA not in traced_path(LSTM(8))[0]


@pytest.mark.parametrize(
    "flags, isa, bfloat16",
    [
        ("avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "AMX", "AMX"),  # Xeon, AMX
        ("avx2 avx512f avx512_bf16", "AVX-512", "AVX512_BF16"),  # EPYC, Zen 4
        ("avx2 avx512f", "AVX-512", None),
        ("avx2", "AVX2", None),
    ],
)
def test_the_machine_names_its_bfloat16_matrix_instructions_outside_the_key(
    flags, isa, bfloat16, monkeypatch
):
    """What `_kernels.bfloat16_loop` asks of the CPU, read from /proc/cpuinfo's flags;
    the cache's key (`machine_key`) does not hold it, so caches written before it
    still match."""

    class CpuInfo:
        def __init__(self, path):
            pass

        def read_text(self, **kwargs):
            return f"model name\t: Some CPU\ncpu family\t: 25\nflags\t\t: {flags}\n"

    monkeypatch.setattr(calibration, "Path", CpuInfo)
    calibration.machine.cache_clear()
    try:
        found = calibration.machine()
        key = calibration.machine_key()
    finally:
        calibration.machine.cache_clear()
    assert (found["isa"], found["bfloat16"]) == (isa, bfloat16)
    assert key.startswith(f"Some CPU (family 25 model ?), {isa}, ")
    assert "BF16" not in key


def test_layers_follow_only_a_loaded_calibration(tmp_path):
    """The cache file alone changes nothing: a process loads it where it chooses
    (`load`, or `loaded` for a block), from the default place or from another."""
    calibration.record([measured(LSTM, "inference", 6, 8, True)])
    assert XLA not in traced_path(LSTM(8))[0]
    with calibration.loaded() as found:
        assert len(found) == 1
        assert XLA in traced_path(LSTM(8))[0]
    assert XLA not in traced_path(LSTM(8))[0]
    elsewhere = tmp_path / "elsewhere.json"
    calibration.cache_file().rename(elsewhere)
    assert calibration.measurements() == []
    assert len(calibration.load(elsewhere)) == 1
    assert XLA in traced_path(LSTM(8))[0]
    calibration.unload()
    assert XLA not in traced_path(LSTM(8))[0]


def test_an_unreadable_cache_warns_once_and_the_defaults_decide():
    path = calibration.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.warns(RuntimeWarning, match="unreadable.*calibrate --forget"):
        assert calibration.load() == []
    assert XLA not in traced_path(LSTM(8))[0]
    with pytest.raises(calibration.CalibrationError, match=str(path)):
        calibration.measurements()
    # A file of the wrong structure is as unreadable as broken JSON.
    path.write_text(
        json.dumps(
            {
                "format": calibration._FORMAT,
                "machines": {"x": {"measurements": [{"cell": "GRUCell"}]}},
            }
        )
    )
    with pytest.raises(calibration.CalibrationError, match="unreadable"):
        calibration.measurements()
    # Measured when the layers ran the whole batch in one loop: not used.
    path.write_text(json.dumps({"format": 1, "machines": {}}))
    with pytest.raises(calibration.CalibrationError, match="one loop per core"):
        calibration.measurements()
    # So is a measurement with a field of the wrong type.
    item = dataclasses.asdict(measured(LSTM, "inference", 6, 8, True))
    path.write_text(
        json.dumps(
            {
                "format": calibration._FORMAT,
                "machines": {
                    calibration.machine_key(): {
                        "measurements": [{**item, "units": "8"}]
                    }
                },
            }
        )
    )
    with pytest.raises(calibration.CalibrationError, match="malformed measurement"):
        calibration.measurements()
    with pytest.warns(RuntimeWarning, match="malformed measurement"):
        assert calibration.load() == []
    assert XLA not in traced_path(LSTM(8))[0]
    assert calibration.forget() is True
    assert not path.exists()
    assert calibration.measurements() == []


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"families": ["LSTMs"]}, "unknown or no family: LSTMs .choose from GRU"),
        ({"families": []}, "unknown or no family: none given"),
        ({"modes": ["train"]}, "unknown or no mode: train"),
        ({"shapes": [(0, 8)]}, "shapes must be .steps, units. pairs"),
        ({"rounds": 0}, "rounds must be at least 1"),
    ],
)
def test_bad_arguments_are_clear_errors(arguments, message):
    options = {"families": ["GRU"], "shapes": [(4, 4)], "rounds": 1, **arguments}
    with pytest.raises(calibration.CalibrationError, match=message):
        calibration.calibrate(options.pop("families"), options.pop("shapes"), **options)
    assert not calibration.cache_file().exists()


def test_nothing_to_calibrate_off_the_tensorflow_backend_or_on_a_gpu(monkeypatch):
    import keras
    import tensorflow as tf

    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    with pytest.raises(calibration.CalibrationError, match="backend is torch"):
        calibration.calibrate(["GRU"], [(4, 4)])
    monkeypatch.undo()
    real = tf.config.list_logical_devices

    def with_gpu(kind=None):
        return ["GPU:0"] if kind == "GPU" else real(kind)

    monkeypatch.setattr(tf.config, "list_logical_devices", with_gpu)
    with pytest.raises(calibration.CalibrationError, match="CUDA_VISIBLE_DEVICES="):
        calibration.calibrate(["GRU"], [(4, 4)])


def test_the_cli_measures_shows_and_forgets():
    result = invoke("calibrate", "--show")
    assert result.exit_code == 0, result.output
    assert "No measurements for this machine" in result.output
    assert calibration.machine_key() in result.output

    result = invoke(
        "calibrate", "--cell", "lstm", "--shape", "5x8", "--mode", "inference",
        "--batch", "4", "--rounds", "2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [item] = calibration.measurements()
    assert (item.family, item.mode, item.steps, item.units, item.batch) == (
        "LSTM", "inference", 5, 8, 4,
    )  # fmt: skip
    assert item.line() in result.output
    assert "Cached 1 measurement in" in result.output

    shown = invoke("calibrate", "--show")
    assert shown.exit_code == 0 and item.line() in shown.output
    info = invoke("info")
    assert "xla loops    1 measurements for this machine" in info.output

    # --forget with what to measure forgets, then measures.
    result = invoke(
        "calibrate", "--forget", "--cell", "gru", "--shape", "5x8", "--mode",
        "training", "--batch", "4", "--rounds", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Dropped measurements" in result.output
    assert [(m.family, m.mode) for m in calibration.measurements()] == [
        ("GRU", "training")
    ]
    result = invoke("calibrate", "--forget")  # alone: forgets only
    assert result.exit_code == 0 and "Dropped measurements" in result.output
    assert "Cached" not in result.output
    assert calibration.measurements() == []
    assert "xla loops    defaults" in invoke("info").output


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--shape", "100by256"], "'100by256' is not STEPSxUNITS"),
        (["--shape", "0x256"], "'0x256' is not STEPSxUNITS"),
        (
            ["--cell", "GRU"],
            "'GRU' is not one of 'gru', 'lru', 'lstm', 'mingru', 'minlstm', 'rglru', "
            "'simple_rnn'",
        ),
        (["--rounds", "0"], "0 is not in the range x>=1"),
    ],
)
def test_the_cli_rejects_bad_options(arguments, message):
    result = invoke("calibrate", *arguments)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_cli_says_what_is_wrong_with_the_cache_and_how_to_mend_it():
    path = calibration.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    for arguments in (["--show"], ["--cell", "gru", "--shape", "4x4"]):
        line = error_line(invoke("calibrate", *arguments))
        assert str(path) in line and "calibrate --forget" in line
    assert path.read_text() == "[]"  # nothing measured, nothing written
    assert "xla loops    defaults: the XLA calibration cache" in invoke("info").output
    for other in (["--forget"], ["--rounds", "2"]):
        assert error_line(invoke("calibrate", "--show", *other)).endswith(
            "--show only prints: leave out the other options"
        )
