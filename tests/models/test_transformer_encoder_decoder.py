"""Tests for rnnkit.models.TransformerEncoderDecoder (the cached decoding against full
recomputation is in tests/decoding/test_transformer_cache.py)."""

import keras
import numpy as np
import pytest

from rnnkit.models.transformer_encoder_decoder import TransformerEncoderDecoder
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
    arguments = dict(model_dim=16, num_heads=4, feedforward_dim=32, dropout=0.0)
    model = TransformerEncoderDecoder(20, 12, **{**arguments, **kwargs})
    model.build()
    return model


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"norm_first": False, "positional_encoding": "learned"}],
)
def test_padding_and_the_future_are_invisible(kwargs):
    model = tiny_model(**kwargs)
    logits = logits_of(model)
    # More source padding: nothing changes.
    padded = np.concatenate([SOURCE, np.zeros((2, 3), "int64")], axis=1)
    np.testing.assert_allclose(logits_of(model, source=padded), logits, atol=1e-5)
    # Changing target token t changes the logits of positions >= t only.
    changed = TARGET_IN.copy()
    changed[0, 3] = 11
    other = logits_of(model, target_in=changed)
    np.testing.assert_allclose(other[:, :3], logits[:, :3], atol=1e-5)
    assert np.abs(other[0, 3:] - logits[0, 3:]).max() > 1e-3


def test_cross_attention_heads_are_distributions_over_real_source_tokens():
    model = tiny_model()
    weights = keras.ops.convert_to_numpy(
        model.cross_attention_weights(SOURCE, TARGET_IN)
    )
    assert weights.shape == (2, 4, 5, 6)  # (batch, heads, target, source)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[0, :, :, 4:] == 0.0) and np.all(weights[1, :, :, 3:] == 0.0)
    # The heads look at the source differently.
    assert np.abs(weights[:, 0] - weights[:, 1]).max() > 1e-3


def test_tied_embeddings_share_the_output_weights():
    tied, untied = tiny_model(), tiny_model(tie_embeddings=False)
    # The untied model has a (16, 12) kernel where the tied one reuses the
    # target embedding; both have a (12,) bias.
    assert untied.count_params() - tied.count_params() == 16 * 12


def test_saved_model_keeps_vocabularies_and_outputs(tmp_path):
    keras.utils.set_random_seed(4)
    model = TransformerEncoderDecoder(
        SOURCE_TOKENS, TARGET_TOKENS, model_dim=16, num_heads=2, feedforward_dim=32,
        positional_encoding="learned", max_positions=64,
    )  # fmt: skip
    model.build()
    assert_reloads_in_a_fresh_process(model, tmp_path)


def test_a_few_steps_of_training_reduce_the_loss():
    model = tiny_model(dropout=0.1)
    # Eager steps: tracing the train step costs ten times more than these few steps.
    model.compile(
        optimizer=keras.optimizers.Adam(0.03),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0
        ),
        run_eagerly=True,
    )
    target_out = np.array([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]])
    inputs = {"source": SOURCE, "target_in": TARGET_IN}
    # train_on_batch returns the loss of the weights before its update: the last
    # follows seven steps.
    losses = [float(model.train_on_batch(inputs, target_out)) for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model_dim=10, num_heads=4), "num_heads"),
        (dict(feedforward_dim=0), "feedforward_dim"),
        (dict(positional_encoding="rotary"), "positional_encoding"),
        (dict(dropout=1.0), "dropout"),
        (dict(encoder_layers=0), "encoder_layers"),
    ],
)
def test_argument_errors(kwargs, message):
    arguments = dict(source_vocabulary=20, target_vocabulary=12)
    with pytest.raises(ValueError, match=message):
        TransformerEncoderDecoder(**{**arguments, **kwargs})
