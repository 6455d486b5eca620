"""`rnnkit export` refuses in one line and leaves nothing half-written."""

from __future__ import annotations

import errno
import json

import keras
import numpy as np
import pytest

from rnnkit.export import ExportError, export, writer
from tests.cli_support import invoke


def one_line_error(result, *words):
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for word in words:
        assert word in lines[0], lines[0]


def test_unknown_run_directory(tmp_path):
    result = invoke("export", str(tmp_path / "nowhere"), "--format", "onnx")
    one_line_error(result, "no run directory", "nowhere")


def test_a_folder_that_is_not_a_completed_run(tmp_path):
    result = invoke("export", str(tmp_path), "--format", "onnx")
    one_line_error(result, "not a completed rnnkit run")
    assert not (tmp_path / "export").exists()


def test_unknown_format(tmp_path):
    result = invoke("export", str(tmp_path), "--format", "coreml")
    assert result.exit_code == 2 and "coreml" in result.output
    with pytest.raises(ExportError, match="unknown export format 'coreml'"):
        export(tmp_path, format="coreml")


def test_quantization_of_another_format(tmp_path):
    with pytest.raises(ExportError, match="LiteRT files only"):
        export(tmp_path, format="onnx", quantize="dynamic")


def small_model(name="small"):
    inputs = keras.Input((4, 3), name="window")
    outputs = keras.layers.Dense(2, name="forecast")(inputs[:, -1])
    return keras.Model(inputs, outputs, name=name)


def test_existing_output_needs_force(tmp_path):
    output = tmp_path / "out"
    export(small_model(), format="saved_model", output=output)
    marker = output / "export.json"
    before = marker.read_text()
    with pytest.raises(ExportError, match="already exists.*--force"):
        export(small_model(), format="saved_model", output=output)
    assert marker.read_text() == before
    replaced = export(
        small_model("second"), format="saved_model", output=output, force=True
    )
    assert json.loads(marker.read_text())["model"] == "second"
    assert replaced.output == output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_format_that_cannot_carry_the_model_names_one_that_can(tmp_path):
    texts = keras.Input((), dtype="string", name="text")
    vectorizer = keras.layers.TextVectorization(max_tokens=10)
    vectorizer.adapt(np.array(["a b c", "b c d"]))
    model = keras.Model(texts, vectorizer(texts))
    for format in ("onnx", "tflite"):
        with pytest.raises(ExportError, match="reads strings.*--format saved_model"):
            export(model, format=format, output=tmp_path / format)
        assert not (tmp_path / format).exists()
    assert list(tmp_path.iterdir()) == []


def test_full_disk_leaves_nothing(tmp_path, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(writer, "write_bytes", full)
    with pytest.raises(ExportError, match="no space left.*nothing was written"):
        export(small_model(), format="saved_model", output=tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_conversion_that_changes_the_numbers_is_refused():
    """The probe check compares the converted file with the Keras artefact: the file
    of another model (other weights) is refused in one line."""
    import keras

    from rnnkit.export.plan import Artefact, Tensor
    from rnnkit.export.portable import check, convert

    def tiny(seed):
        keras.utils.set_random_seed(seed)
        inputs = keras.Input((3,), name="x")
        return keras.Model({"x": inputs}, {"y": keras.layers.Dense(2)(inputs)})

    spec = dict(inputs=[Tensor("x", "float32", (None, 3))])
    spec["outputs"] = [Tensor("y", "float32", (None, 2))]
    mine, other = Artefact("m", tiny(1), **spec), Artefact("m", tiny(2), **spec)
    check(mine, "onnx", convert(mine, "onnx"), "none")  # its own file passes
    with pytest.raises(ExportError, match="does not reproduce the Keras model"):
        check(mine, "onnx", convert(other, "onnx"), "none")
    # A quantized file that moves too far names the milder quantizations.
    with pytest.raises(ExportError, match="use --quantize float16 or --quantize none"):
        check(mine, "tflite", convert(other, "tflite", "dynamic"), "dynamic")


def test_the_probe_batch_takes_the_values_an_input_declares():
    """An input that declares its range (an image's pixel levels) is probed with
    values spread over it; others with values around zero, integers with ones."""
    from rnnkit.export.plan import Artefact, Tensor
    from rnnkit.export.portable import probe_inputs

    inputs = [
        Tensor("image", "float32", (None, 4, 4, 3), probe=(0.0, 255.0)),
        Tensor("x", "float32", (None, None, 2)),
        Tensor("ids", "int32", (None, None)),
    ]
    probe = probe_inputs(Artefact("m", None, inputs, []))
    image = probe["image"]
    assert image.shape == (2, 4, 4, 3) and image.dtype == np.float32
    assert image.min() >= 0 and image.max() <= 255 and image.std() > 50
    assert probe["x"].shape == (2, 5, 2) and np.abs(probe["x"]).max() < 5
    assert np.array_equal(probe["ids"], np.ones((2, 5), "int32"))
