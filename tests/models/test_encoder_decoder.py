"""Tests for rnnkit.models.EncoderDecoder."""

import keras
import numpy as np
import pytest

from rnnkit.models.encoder_decoder import EncoderDecoder
from tests.models.encoder_decoder_support import (
    SOURCE,
    SOURCE_TOKENS,
    TARGET_IN,
    TARGET_TOKENS,
    assert_reloads_in_a_fresh_process,
    logits_of,
)


def tiny_model(seed=1, **kwargs):
    keras.utils.set_random_seed(seed)
    arguments = dict(embedding_dim=6, units=8)
    model = EncoderDecoder(20, 12, **{**arguments, **kwargs})
    model.build()
    return model


def stepwise_logits(model, source=SOURCE, target_in=TARGET_IN):
    """The decoder run one `decode_step` at a time, as the searches run it."""
    memory = model.encode(source)
    state = model.initial_decoder_state(memory)
    steps = []
    for t in range(target_in.shape[1]):
        logits, state, _ = model.decode_step(target_in[:, t], state, memory)
        steps.append(keras.ops.convert_to_numpy(logits))
    return np.stack(steps, axis=1)


CONFIGURATIONS = [
    dict(attention="bahdanau"),
    dict(attention="bahdanau", input_feeding=False),
    dict(attention="dot", cell_type="lstm"),
    dict(attention="multihead", num_heads=2, decoder_layers=2),
    dict(attention="none", bidirectional=False, encoder_layers=2),
    dict(attention="bahdanau", cell_type="lstm", reverse_source=True, dropout=0.2),
]


@pytest.mark.parametrize("kwargs", CONFIGURATIONS, ids=str)
def test_teacher_forcing_equals_step_by_step_decoding(kwargs):
    model = tiny_model(**kwargs)
    logits = logits_of(model)
    assert logits.shape == (2, 5, 12) and logits.dtype == np.float32
    np.testing.assert_allclose(stepwise_logits(model), logits, atol=1e-5)


@pytest.mark.parametrize("kwargs", CONFIGURATIONS[:4], ids=str)
def test_source_padding_is_invisible(kwargs):
    model = tiny_model(**kwargs)
    longer = np.pad(SOURCE, ((0, 0), (0, 3)))
    np.testing.assert_allclose(logits_of(model, longer), logits_of(model), atol=1e-5)


def test_attention_weights_are_a_distribution_over_real_tokens():
    model = tiny_model()
    memory = model.encode(SOURCE)
    state = model.initial_decoder_state(memory)
    _, _, weights = model.decode_step(TARGET_IN[:, 0], state, memory)
    weights = keras.ops.convert_to_numpy(weights)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
    assert np.all(weights[SOURCE == 0] == 0)


def test_reverse_source_reads_the_tokens_backwards():
    reversed_model = tiny_model(reverse_source=True)
    plain = tiny_model(seed=2)
    plain.set_weights(reversed_model.get_weights())
    backwards = np.array([[8, 7, 6, 5, 0, 0], [11, 10, 9, 0, 0, 0]])
    np.testing.assert_allclose(
        logits_of(reversed_model), logits_of(plain, backwards), atol=1e-5
    )
    # Its attention weights come back in the order of the source as given.
    weights = []
    for model, source in ((reversed_model, SOURCE), (plain, backwards)):
        memory = model.encode(source)
        state = model.initial_decoder_state(memory)
        weights.append(
            keras.ops.convert_to_numpy(
                model.decode_step(TARGET_IN[:, 0], state, memory)[2]
            )
        )
    np.testing.assert_allclose(weights[0][0, :4], weights[1][0, 3::-1], atol=1e-6)


def test_saved_model_keeps_vocabularies_and_outputs(tmp_path):
    keras.utils.set_random_seed(4)
    model = EncoderDecoder(
        SOURCE_TOKENS, TARGET_TOKENS, embedding_dim=6, units=8, attention="dot"
    )
    model.build()
    assert_reloads_in_a_fresh_process(model, tmp_path)


def test_a_few_steps_of_training_reduce_the_loss():
    model = tiny_model(dropout=0.1)
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        ),
    )
    target_out = np.array([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]])
    inputs = {"source": SOURCE, "target_in": TARGET_IN}
    history = model.fit(inputs, target_out, epochs=15, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(units=0), "units"),
        (dict(cell_type="rnn"), "cell_type"),
        (dict(attention="luong"), "attention"),
        (dict(attention="multihead", units=8, num_heads=3), "num_heads"),
        (dict(dropout=1.0), "dropout"),
        (dict(source_vocabulary="abc"), "source_vocabulary"),
    ],
)
def test_argument_errors(kwargs, message):
    arguments = dict(source_vocabulary=20, target_vocabulary=12)
    with pytest.raises(ValueError, match=message):
        EncoderDecoder(**{**arguments, **kwargs})


@pytest.mark.parametrize("cell_type", ["gru", "lstm"])
def test_mixed_precision_keeps_decoder_states_in_float32(cell_type):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = tiny_model(cell_type=cell_type, decoder_layers=2)
        assert logits_of(model).dtype == np.float32
        memory = model.encode(SOURCE)
        state = model.initial_decoder_state(memory)
        _, state, _ = model.decode_step(TARGET_IN[:, 0], state, memory)
        assert all(s.dtype == "float32" for s in state["cells"])
        if cell_type == "gru":
            # A training step is traced once, with the LSTM's (h, c) states: its
            # trace under loss scaling is a quarter of a minute on a 2-core CPU.
            return
        model.compile(
            optimizer="adam",
            loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, ignore_class=0
            ),
        )
        inputs = {"source": SOURCE, "target_in": TARGET_IN}
        model.fit(inputs, np.array([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]]), verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
