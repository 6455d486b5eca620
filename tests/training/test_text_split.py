"""rnnkit.training.text_split: a model that reads strings, cut for `MirroredStrategy`.

The cut itself trains in tests/training/test_runner.py (two logical CPUs); here, the
models it refuses and those it leaves whole."""

from __future__ import annotations

import pytest

from rnnkit.errors import ConfigError
from rnnkit.training.text_split import split_text_model


class _TwoReplicas:
    """Stands in for a MirroredStrategy of two replicas (refusals need no devices)."""

    num_replicas_in_sync = 2


def test_a_text_model_that_cannot_be_cut_is_a_one_line_error():
    import keras

    texts = keras.Input(shape=(), dtype="string", name="text")
    short = keras.layers.StringLookup(vocabulary=["a", "b"], name="short")(texts)
    other = keras.layers.StringLookup(vocabulary=["c"], name="other")(texts)
    model = keras.Model(
        texts, keras.layers.Concatenate()([short[:, None], other[:, None]])
    )
    with pytest.raises(
        ConfigError, match=r"cannot be moved into the input pipeline.*--strategy one"
    ):
        split_text_model(model, _TwoReplicas())
    # Numbers in, or one replica: nothing to cut.
    numbers = keras.Input(shape=(3,))
    assert split_text_model(keras.Model(numbers, numbers * 2), _TwoReplicas()) is None
    assert split_text_model(model, None) is None
