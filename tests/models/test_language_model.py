"""Tests for rnnkit.models.LanguageModel: carried state, resets, tying, saving."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from rnnkit.data.token_stream import stream_batches
from rnnkit.models.language_model import LanguageModel

TOKENS = [f"t{i}" for i in range(11)]


def tiny(cell_type="lstm", **kwargs):
    keras.utils.set_random_seed(3)
    options = dict(embedding_dim=6, units=6, num_layers=2)
    model = LanguageModel(TOKENS, cell_type=cell_type, **{**options, **kwargs})
    model.build()
    return model


@pytest.mark.parametrize(
    "cell_type, block",
    [("lstm", "none"), ("gru", "none"), ("simple_rnn", "none"), ("rglru", "hawk")],
)
def test_state_carried_across_windows_equals_one_pass_over_the_stream(cell_type, block):
    ids = np.random.default_rng(0).integers(0, 11, size=3 * 16 + 1)
    whole = tiny(cell_type, block=block)
    stateful = whole.with_batch_size(3, stateful=True)
    # Windows of 5 steps of 3 streams of 16 tokens (the last window is 1 step long).
    batches = stream_batches(ids, 3, 5, keep_partial=True)
    carried = np.concatenate([stateful(x) for x, _ in batches], axis=1)
    streams = ids[:48].reshape(3, 16)
    np.testing.assert_allclose(carried, whole(streams), rtol=1e-5, atol=1e-5)
    # After a reset the next window starts again from the zero state.
    stateful.reset_states()
    np.testing.assert_allclose(
        stateful(batches[0][0]), whole(batches[0][0]), rtol=1e-5, atol=1e-5
    )


def test_gradients_stop_at_the_window_boundary():
    """The loss of window 2 does not reach the embeddings of tokens seen only in
    window 1 when the state is carried, but does when both are one sequence."""
    model = tiny(num_layers=1).with_batch_size(1, stateful=True)
    first, second = np.array([[1, 2, 1, 2]]), np.array([[3, 4, 3, 4]])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model(first)
    with tf.GradientTape() as tape:
        value = loss(np.array([[4, 3, 4, 3]]), model(second, training=True))
    gradient = tf.convert_to_tensor(tape.gradient(value, model.embedding.embeddings))
    assert np.abs(gradient.numpy()[[1, 2]]).max() == 0.0
    assert np.abs(gradient.numpy()[[3, 4]]).max() > 0.0
    joined = model.with_batch_size(None, stateful=False)
    with tf.GradientTape() as tape:
        logits = joined(np.concatenate([first, second], axis=1), training=True)
        value = loss(np.array([[4, 3, 4, 3]]), logits[:, 4:])
    gradient = tf.convert_to_tensor(tape.gradient(value, joined.embedding.embeddings))
    assert np.abs(gradient.numpy()[[1, 2]]).max() > 0.0


def test_tied_output_is_the_transposed_embedding_plus_bias():
    model = tiny(num_layers=1, tie_weights=True)
    assert model.output_projection is None
    ids = np.array([[1, 5, 7]])
    hidden = model.recurrent_layers[0](model.embedding(ids))
    expected = hidden.numpy() @ model.embedding.embeddings.numpy().T
    expected += model.output_bias.numpy()
    np.testing.assert_allclose(model(ids), expected, rtol=1e-5, atol=1e-6)
    names = [w.path for w in model.weights]
    assert sum("embedding" in name for name in names) == 1


def test_uniform_initialisation_stays_in_range_and_differs_per_weight():
    model = tiny(init_scale=0.1)
    weights = model.get_weights()
    assert all(np.abs(w).max() <= 0.1 for w in weights)
    kernels = [w for w in weights if w.ndim == 2]
    assert len({float(w.ravel()[0]) for w in kernels}) == len(kernels)


@pytest.mark.parametrize("tie_weights", [False, True])
def test_set_output_bias_sets_the_projection_bias(tie_weights):
    model = tiny(num_layers=1, tie_weights=tie_weights)
    ids = np.array([[1, 5, 7]])
    before = keras.ops.convert_to_numpy(model(ids))
    bias = np.linspace(-3.0, 2.0, len(TOKENS))
    model.set_output_bias(bias)
    variable = model.output_bias if tie_weights else model.output_projection.bias
    np.testing.assert_allclose(variable.numpy(), bias, rtol=1e-6)
    # Only the bias changed: the logits moved by exactly the new bias.
    np.testing.assert_allclose(model(ids), before + bias, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"one value per token, shape \(11,\)"):
        model.set_output_bias(np.zeros(10))


def test_save_and_reload_in_safe_mode(tmp_path):
    model = tiny(dropout=0.3, tie_weights=True).with_batch_size(2, stateful=True)
    model.save(tmp_path / "lm.keras")
    reloaded = keras.saving.load_model(tmp_path / "lm.keras", safe_mode=True)
    assert reloaded.tokens == TOKENS and reloaded.stateful
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    model.reset_states()
    np.testing.assert_allclose(reloaded(ids), model(ids), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tie_weights": True, "units": 8}, "tie_weights"),
        ({"stateful": True}, "batch_size"),
        ({"cell_type": "rnn"}, "cell_type"),
        ({"dropout": 1.0}, "dropout"),
        ({"block": "griffin"}, "`block` must be one of"),
        ({"block": "hawk", "init_scale": 0.1}, "init_scale applies to the plain"),
        ({"weight_dropout": 1.0}, "`weight_dropout` must be in"),
        ({"block": "hawk", "weight_dropout": 0.1}, "pass weight_dropout=0 with"),
    ],
)
def test_bad_arguments_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        LanguageModel(TOKENS, **{"embedding_dim": 6, "units": 6, **options})


def test_hawk_blocks_keep_the_embeddings_width_and_reload(tmp_path):
    """Hawk's blocks run on the embeddings' width whatever `units` is, so the tied
    output needs no equal widths; the model reloads in safe mode, blocks and all."""
    model = tiny("mingru", block="hawk", units=9, tie_weights=True, dropout=0.2)
    assert [type(layer).__name__ for layer in model.recurrent_layers] == [
        "HawkBlock",
        "HawkBlock",
    ]
    assert model.recurrent_layers[0].recurrent.units == 9
    ids = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert tuple(model(ids).shape) == (2, 4, len(TOKENS))
    model.save(tmp_path / "hawk.keras")
    reloaded = keras.saving.load_model(tmp_path / "hawk.keras", safe_mode=True)
    assert reloaded.block == "hawk"
    np.testing.assert_allclose(reloaded(ids), model(ids), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cell_type", ["rglru", "lstm"])
def test_the_step_of_hawk_blocks_is_the_model_one_token_at_a_time(cell_type):
    """The exported step of a model of Hawk's blocks carries each block's
    convolution inputs and recurrent states: fed a text token by token from zeros,
    its logits are the model's on the whole text."""
    from rnnkit.export.steps import language_model_step

    model = tiny(cell_type, block="hawk", units=9)
    step, inputs, outputs = language_model_step(model)
    per_block = ["h_{i}", "c_{i}"] if cell_type == "lstm" else ["h_{i}"]
    per_block.append("conv_{i}")
    names = [name.format(i=i) for i in range(2) for name in per_block]
    assert [t.name for t in inputs] == ["token", *names]
    assert [t.name for t in outputs] == ["logits", *("next_" + n for n in names)]
    ids = np.random.default_rng(0).integers(0, len(TOKENS), (2, 6))
    state = {t.name: np.zeros((2, *t.shape[1:]), "float32") for t in inputs[1:]}
    logits = []
    for t in range(ids.shape[1]):
        result = step({"token": ids[:, t].astype("int32"), **state})
        logits.append(np.asarray(result["logits"]))
        state = {name: np.asarray(result["next_" + name]) for name in state}
    np.testing.assert_allclose(
        np.stack(logits, 1), np.asarray(model(ids)), rtol=1e-5, atol=1e-5
    )


def test_a_model_of_hawk_blocks_is_refused_where_only_layers_fit():
    from rnnkit.models.transfer import initialize_from_language_model

    model = tiny("rglru", block="hawk")
    with pytest.raises(ValueError, match="pre-train with model.block=none"):
        initialize_from_language_model(None, model)


def test_embedding_dropout_drops_whole_tokens_in_training_only():
    """One draw per vocabulary entry and call: every position of a token is dropped
    or kept (and scaled by 1 / (1 - rate)) together; about `rate` of the tokens
    go; nothing changes outside training."""
    tokens = [f"w{i}" for i in range(400)]
    keras.utils.set_random_seed(3)
    model = LanguageModel(
        tokens, embedding_dim=4, units=4, num_layers=1, embedding_dropout=0.25, seed=7
    )
    model.build()
    ids = np.tile(np.arange(400), (2, 3))  # every token 6 times, in both rows
    plain = np.asarray(model.embedding(ids))
    np.testing.assert_array_equal(np.asarray(model.embed(ids)), plain)
    ratio = np.asarray(model.embed(ids, training=True)) / plain  # (2, 1200, 4)
    per_token = ratio[..., 0].reshape(-1, 400)  # each token's 6 positions
    assert np.allclose(per_token, per_token[:1])  # dropped or kept together
    assert np.allclose(ratio, ratio[..., :1])  # the whole embedding
    kept = np.isclose(per_token[0], 1 / 0.75, rtol=1e-5)
    assert np.all(kept | (per_token[0] == 0))
    assert 0.15 < 1 - kept.mean() < 0.35
    again = np.asarray(model.embed(ids, training=True))[0, :400, 0] / plain[0, :400, 0]
    assert not np.array_equal(again == 0, per_token[0] == 0)  # a new draw per call
    copy = model.with_batch_size(None, stateful=False)
    assert copy.embedding_dropout == 0.25


@pytest.mark.parametrize("block", ["none", "hawk"])
def test_locked_dropout_keeps_one_mask_for_every_step(block):
    """With locked_dropout each sequence's dropped features are the same at every
    step (variational dropout); without it they differ from step to step."""
    ids = np.tile(np.arange(1, 9), (3, 4))  # (3, 32)
    for locked in (True, False):
        model = tiny(dropout=0.5, locked_dropout=locked, block=block, seed=1)
        dropped = np.asarray(model.embed(ids, training=True)) == 0  # (3, 32, 6)
        same = np.all(dropped == dropped[:, :1], axis=1)
        assert same.all() == locked
        assert dropped.any() and not dropped.all()
        assert LanguageModel.from_config(model.get_config()).locked_dropout == locked


def test_weight_dropout_reaches_every_layer_and_acts_in_training_only():
    model = tiny("gru", weight_dropout=0.5)
    plain = tiny("gru")
    plain.set_weights(model.get_weights())
    assert [layer.weight_dropout for layer in model.recurrent_layers] == [0.5, 0.5]
    ids = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    np.testing.assert_allclose(model(ids), plain(ids), rtol=1e-6, atol=1e-6)
    trained = np.asarray(model(ids, training=True))
    assert not np.allclose(trained, np.asarray(plain(ids, training=True)))
    copy = model.with_batch_size(2)
    assert copy.weight_dropout == 0.5
