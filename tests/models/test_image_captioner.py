"""ImageCaptioner: the attention and its regulariser against numpy, decoding through
rnnkit.decoding against a step-by-step reference, and reload in a fresh process."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from rnnkit import decoding
from rnnkit.models.image_captioner import (
    EncoderScaledAdam,
    ImageCaptioner,
    TokenCrossEntropy,
)
from tests import preloaded

VOCABULARY = ["", "<unk>", "<start>", "<end>", *(f"w{i}" for i in range(16))]
FEATURES = np.random.default_rng(0).normal(size=(3, 4, 6)).astype("float32")


def tiny_model(**overrides):
    keras.utils.set_random_seed(3)
    options = dict(
        encoder="small_cnn",
        image_size=32,  # four 2x2 poolings: 2 x 2 = 4 annotation vectors of 8
        encoder_width=1,
        embedding_dim=5,
        units=7,
        attention_units=3,
        attention_penalty=2.0,
    )
    options.update(overrides)
    model = ImageCaptioner(VOCABULARY, **options)
    model.build()
    return model


def features_for(model, batch=3):
    rng = np.random.default_rng(1)
    return rng.normal(size=(batch, model.num_locations, model.feature_dim)).astype(
        "float32"
    )


def captions(batch, length, seed=2):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, len(VOCABULARY), size=(batch, length))
    ids[:, 0] = 2  # <start>
    ids[0, length - 2 :] = 0  # a shorter caption, padded
    return ids.astype("int32")


def numpy_regularizer(weights, mask, penalty):
    per_location = (weights * mask[:, :, None]).sum(axis=1)  # (captions, L)
    return penalty * ((1.0 - per_location) ** 2).sum() / mask.sum()


def test_regularizer_matches_a_hand_computation():
    model = tiny_model()
    # Two captions over L = 2 locations, alpha = 0.5 everywhere. Caption 0 has two
    # real tokens: sum_t alpha = 1 at each location, penalty 0. Caption 1 has three:
    # sum_t alpha = 1.5, penalty (1 - 1.5)^2 * 2 = 0.5. Over 5 tokens: 0.1, times
    # lambda 2.
    weights = np.full((2, 3, 2), 0.5, "float32")
    mask = np.array([[True, True, False], [True, True, True]])
    value = model.attention_regularizer(ops.convert_to_tensor(weights), mask)
    assert float(value) == pytest.approx(0.2, abs=1e-6)


def test_regularizer_and_its_gradient_match_numpy_on_model_weights():
    model = tiny_model()
    inputs = {"features": features_for(model), "caption_in": captions(3, 6)}
    _, weights, mask = model.teacher_forced(inputs)
    weights, mask = ops.convert_to_numpy(weights), ops.convert_to_numpy(mask)
    assert weights.shape == (3, 6, model.num_locations)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    expected = numpy_regularizer(weights, mask, 2.0)
    model(inputs)
    assert len(model.losses) == 1
    assert float(model.losses[0]) == pytest.approx(expected, rel=1e-5)
    # d/d alpha_cti = lambda / N * 2 (sum_t m alpha - 1) m_ct, N real tokens
    alpha = tf.Variable(weights)
    with tf.GradientTape() as tape:
        value = model.attention_regularizer(alpha, mask)
    gradient = tape.gradient(value, alpha).numpy()
    per_location = (weights * mask[:, :, None]).sum(axis=1)
    expected_gradient = (
        2.0 / mask.sum() * 2 * (per_location[:, None, :] - 1.0) * mask[:, :, None]
    )
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-5, atol=1e-7)
    # No regulariser without attention or with lambda = 0.
    for overrides in ({"attention": "none"}, {"attention_penalty": 0.0}):
        other = tiny_model(**overrides)
        other(inputs)
        assert not other.losses


def test_first_attention_step_is_the_bahdanau_equation():
    """alpha_1 = softmax(v^T tanh(W_q h_0 + W_k a_i)), h_0 = tanh(W_init mean a)."""
    model = tiny_model(gating=False)
    annotations = features_for(model)
    _, weights, _ = model.teacher_forced(
        {"features": annotations, "caption_in": captions(3, 4)}
    )
    initial_kernel, initial_bias = model.initial_state_layer.get_weights()
    state = np.tanh(annotations.mean(1) @ initial_kernel + initial_bias)
    h_0 = state[:, : model.units]  # LSTM: [h_0, c_0]
    attention = {w.name: w.numpy() for w in model.attention_layer.weights}
    scores = np.tanh(
        (h_0 @ attention["query_kernel"])[:, None, :]
        + annotations @ attention["key_kernel"]
    ) @ attention["score_vector"].reshape(-1)
    expected = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    np.testing.assert_allclose(weights[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_grouped_captions_share_one_encoding():
    model = tiny_model(encoder_width=2)
    images = np.random.default_rng(4).uniform(0, 255, (2, 32, 32, 3))
    grouped = captions(2 * 3, 5).reshape(2, 3, 5)
    logits = model({"image": images, "caption_in": grouped})
    assert tuple(logits.shape) == (2, 3, 5, len(VOCABULARY))
    flat = model(
        {"image": np.repeat(images, 3, axis=0), "caption_in": grouped.reshape(6, 5)}
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(logits).reshape(6, 5, -1),
        ops.convert_to_numpy(flat),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("cell_type", ["lstm", "gru"])
def test_greedy_search_matches_a_step_by_step_reference(cell_type):
    model = tiny_model(cell_type=cell_type)
    annotations = features_for(model, batch=2)
    result = decoding.greedy_search(
        model, annotations, start_id=2, end_id=3, suppress_ids=(0, 2), max_length=6
    )
    # The reference: teacher forcing on the tokens chosen so far, argmax of the
    # last position's logits (the full model call, not the decoding interface).
    for row in range(len(annotations)):
        tokens = [2]
        for _ in range(6):
            logits = ops.convert_to_numpy(
                model(
                    {
                        "features": annotations[row : row + 1],
                        "caption_in": np.array([tokens], "int32"),
                    }
                )
            )[0, -1]
            logits[[0, 2]] = -np.inf
            tokens.append(int(logits.argmax()))
            if tokens[-1] == 3:
                break
        generated = tokens[1:]
        assert int(result.lengths[row, 0]) == len(generated)
        assert list(result.tokens[row, 0, : len(generated)]) == generated
    assert result.attention.shape == (2, 6, model.num_locations)
    lengths = result.lengths[:, 0]
    np.testing.assert_allclose(
        result.attention.sum(-1), np.arange(6)[None, :] < lengths[:, None], atol=1e-5
    )
    beam = decoding.beam_search(
        model, annotations, start_id=2, end_id=3, beam_width=1,
        suppress_ids=(0, 2), max_length=6, length_penalty_alpha=0.0,
    )  # fmt: skip
    np.testing.assert_array_equal(beam.tokens, result.tokens)
    wide = decoding.beam_search(
        model, annotations, start_id=2, end_id=3, beam_width=4, n_best=4,
        suppress_ids=(0, 2), max_length=6, length_penalty_alpha=0.0,
    )  # fmt: skip
    assert np.all(np.diff(wide.scores, axis=1) <= 1e-6)
    assert np.all(wide.scores[:, 0] >= result.scores[:, 0] - 1e-5)


def test_decoding_from_images_equals_decoding_from_their_features():
    model = tiny_model(encoder_width=2)
    images = np.random.default_rng(5).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    features = ops.convert_to_numpy(model.encoder(images))
    common = dict(start_id=2, end_id=3, max_length=5, beam_width=2)
    from_images = decoding.beam_search(model, images, **common)
    from_features = decoding.beam_search(model, features, **common)
    np.testing.assert_array_equal(from_images.tokens, from_features.tokens)
    np.testing.assert_allclose(from_images.scores, from_features.scores, rtol=1e-4)


def test_reloads_in_safe_mode_in_a_fresh_process(tmp_path):
    model = tiny_model(encoder_width=2, dropout=0.2)
    images = np.random.default_rng(6).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    inputs = {"image": images, "caption_in": captions(2, 5)}
    path = tmp_path / "captioner.keras"
    model.save(path)
    np.savez(tmp_path / "inputs.npz", **inputs)
    np.save(tmp_path / "expected.npy", ops.convert_to_numpy(model(inputs)))
    script = f"""
import numpy as np, keras, rnnkit.models

from tests import preloaded
model = keras.saving.load_model({str(path)!r}, safe_mode=True)
inputs = dict(np.load({str(tmp_path / "inputs.npz")!r}))
np.testing.assert_allclose(
    keras.ops.convert_to_numpy(model(inputs)),
    np.load({str(tmp_path / "expected.npy")!r}), rtol=1e-5, atol=1e-5)
assert model.tokens == {VOCABULARY!r} and model.dropout == 0.2
print("reloaded")
"""
    result = preloaded.run(
        ["-c", script], env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "reloaded" in result.stdout


def test_token_cross_entropy_leaves_out_padding_and_the_regulariser():
    model = tiny_model()
    inputs = {"features": features_for(model), "caption_in": captions(3, 6)}
    targets = np.roll(inputs["caption_in"], -1, axis=1)
    targets[:, -1] = 3
    targets[inputs["caption_in"] == 0] = 0
    logits = ops.convert_to_numpy(model(inputs))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    expected = -picked[targets != 0].mean()
    metric = TokenCrossEntropy()
    metric.update_state(targets[:2], logits[:2])
    metric.update_state(targets[2:], logits[2:])
    assert float(metric.result()) == pytest.approx(expected, rel=1e-5)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    assert float(loss(targets, logits)) == pytest.approx(expected, rel=1e-5)


def test_encoder_scaled_adam_takes_smaller_steps_for_the_encoder():
    """Adam's first step is learning_rate * sign(gradient) (|m / sqrt(v)| = 1)."""
    encoder_weight, decoder_weight = (
        keras.Variable(np.ones(3)),
        keras.Variable(np.ones(3)),
    )
    optimizer = EncoderScaledAdam(encoder_rate=0.1, learning_rate=0.01, epsilon=1e-12)
    optimizer.scale_variables([encoder_weight])
    gradient = np.array([0.5, -2.0, 3.0])
    optimizer.apply_gradients([(gradient, encoder_weight), (gradient, decoder_weight)])
    np.testing.assert_allclose(
        ops.convert_to_numpy(decoder_weight), 1 - 0.01 * np.sign(gradient), rtol=1e-6
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(encoder_weight), 1 - 0.001 * np.sign(gradient), rtol=1e-6
    )
    assert EncoderScaledAdam.from_config(optimizer.get_config()).encoder_rate == 0.1


def test_argument_errors():
    with pytest.raises(ValueError, match="encoder"):
        ImageCaptioner(VOCABULARY, encoder="vgg16")
    with pytest.raises(ValueError, match="attention_penalty"):
        ImageCaptioner(VOCABULARY, attention_penalty=-1.0)
    with pytest.raises(ValueError, match="attention"):
        ImageCaptioner(VOCABULARY, attention="dot")
    with pytest.raises(ValueError, match="dropout"):
        ImageCaptioner(VOCABULARY, dropout=1.0)
    with pytest.raises(ValueError, match="vocabulary"):
        ImageCaptioner("abc")
