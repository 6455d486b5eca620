import keras
import numpy as np
import pytest

from rnnkit.layers import PositionalEncoding
from rnnkit.testing import attention as checks
from rnnkit.testing.recurrent import assert_close


def numpy_positional_encoding(length, features, max_wavelength=10000.0, start=0):
    """PE(t, 2i) = sin(t / 10000^(2i/d)), PE(t, 2i+1) = cos(t / 10000^(2i/d))."""
    encoding = np.zeros((length, features))
    for t in range(length):
        position = start + t
        for i in range(0, features, 2):
            angle = position / max_wavelength ** (i / features)
            encoding[t, i] = np.sin(angle)
            if i + 1 < features:
                encoding[t, i + 1] = np.cos(angle)
    return encoding


@pytest.mark.parametrize("features", [8, 7])
@pytest.mark.parametrize("max_wavelength", [10000.0, 50.0])
def test_adds_the_sinusoids_of_the_paper(features, max_wavelength):
    x = checks.random_array((2, 40, features), 0)
    output = PositionalEncoding(max_wavelength)(x)
    expected = x + numpy_positional_encoding(40, features, max_wavelength)
    assert_close(keras.ops.convert_to_numpy(output), expected)


def test_start_index_continues_the_sequence_step_by_step():
    x = checks.random_array((2, 6, 8), 1)
    layer = PositionalEncoding()
    whole = keras.ops.convert_to_numpy(layer(x))
    for t in range(6):
        step = layer(x[:, t : t + 1], start_index=t)
        assert_close(keras.ops.convert_to_numpy(step), whole[:, t : t + 1])


def test_offsets_are_rotations_of_each_sinusoid_pair():
    """PE(t + k) is a fixed linear map of PE(t): each (sin, cos) pair is rotated by
    k times its frequency (why the paper expects relative positions to be easy)."""
    features, offset = 8, 3
    encoding = keras.ops.convert_to_numpy(
        PositionalEncoding()(np.zeros((1, 20, features), "float32"))
    )[0]
    frequencies = 1.0 / 10000.0 ** (np.arange(0, features, 2) / features)
    for pair, frequency in enumerate(frequencies):
        sin_cos = encoding[:, 2 * pair : 2 * pair + 2]  # (T, 2)
        c, s = np.cos(offset * frequency), np.sin(offset * frequency)
        rotation = np.array([[c, -s], [s, c]])  # acts on row vectors (sin, cos)
        assert_close(sin_cos[:-offset] @ rotation, sin_cos[offset:])


def test_gradient_is_the_identity():
    x = checks.random_array((2, 5, 4), 2)
    layer = PositionalEncoding()

    def forward(inputs):
        return inputs + numpy_positional_encoding(5, 4)

    checks.check_gradients_match_numpy(layer, {"inputs": x}, forward)


def test_keras_mask_passes_through():
    """After Embedding(mask_zero=True), a masked average ignores the padding."""
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(10, 4, mask_zero=True),
            PositionalEncoding(),
            keras.layers.GlobalAveragePooling1D(),
        ]
    )
    padded = keras.ops.convert_to_numpy(model(np.array([[3, 5, 0, 0]])))
    unpadded = keras.ops.convert_to_numpy(model(np.array([[3, 5]])))
    assert_close(padded, unpadded)


@pytest.mark.parametrize("max_wavelength", [1, 0.5, "10000", True])
def test_invalid_arguments_are_rejected(max_wavelength):
    with pytest.raises(ValueError, match="max_wavelength"):
        PositionalEncoding(max_wavelength)


def test_inputs_need_three_axes():
    with pytest.raises(ValueError, match="batch, T, d"):
        PositionalEncoding()(np.zeros((2, 4), "float32"))


def test_config_round_trip():
    checks.check_config_round_trip(PositionalEncoding(500.0))


def test_save_and_reload_in_fresh_process(tmp_path):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(12, 6)(tokens)
    encoded = PositionalEncoding()(embedded)
    model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(encoded))
    inputs = {"tokens": np.array([[1, 2, 3, 4], [5, 6, 7, 8]], "int32")}
    checks.check_save_and_reload(model, inputs, tmp_path)
