import keras
import numpy as np
import pytest

from rnnkit.layers import MultiHeadAttention
from rnnkit.testing import attention as checks
from rnnkit.testing import references
from rnnkit.testing.recurrent import assert_close

B, TQ, TV = checks.BATCH, checks.QUERY_STEPS, checks.VALUE_STEPS
QUERY_DIM, VALUE_DIM, KEY_DIM = 4, 3, 2
HEADS, HEAD_KEY_DIM = 2, 3


def numpy_multi_head_attention(
    query,
    value,
    key,
    query_kernel,
    query_bias,
    key_kernel,
    key_bias,
    value_kernel,
    value_bias,
    output_kernel,
    output_bias,
    mask=None,
):
    """Vaswani et al. (2017), one head at a time:
    head_h = softmax(Q_h K_h^T / sqrt(d_k)) V_h, output = concat(heads) W^O + b^O."""
    heads, key_dim = query_kernel.shape[1:]
    output = np.zeros(query.shape[:2] + output_bias.shape) + output_bias
    all_weights = []
    for h in range(heads):
        q = query @ query_kernel[:, h] + query_bias[h]  # (batch, Tq, key_dim)
        k = key @ key_kernel[:, h] + key_bias[h]  # (batch, Tv, key_dim)
        v = value @ value_kernel[:, h] + value_bias[h]  # (batch, Tv, value_dim)
        scores = q @ np.swapaxes(k, 1, 2) / np.sqrt(key_dim)  # (batch, Tq, Tv)
        weights = references.masked_softmax(scores, mask)
        output = output + (weights @ v) @ output_kernel[h]
        all_weights.append(weights)
    return output, np.stack(all_weights, axis=1)


def inputs(seed=0):
    return {
        "query": checks.random_array((B, TQ, QUERY_DIM), seed),
        "value": checks.random_array((B, TV, VALUE_DIM), seed + 1),
        "key": checks.random_array((B, TV, KEY_DIM), seed + 2),
    }


def randomize(layer, seed):
    rng = np.random.RandomState(seed)
    for variable in layer.trainable_variables:
        variable.assign(rng.uniform(-0.7, 0.7, variable.shape))


MASK_CASES = {
    "none": {},
    "value_mask": {"value_mask": checks.padding_mask()},
    "key_mask_causal": {"key_mask": checks.padding_mask(), "use_causal_mask": True},
    "query_mask": {"query_mask": checks.padding_mask(steps=TQ)},
    "attention_mask": {
        "attention_mask": np.random.RandomState(5).rand(B, TQ, TV) > 0.3
    },
}


def test_weight_names_shapes_and_order_match_keras():
    ours = MultiHeadAttention(HEADS, HEAD_KEY_DIM, value_dim=4, output_dim=6)
    builtin = keras.layers.MultiHeadAttention(
        HEADS, HEAD_KEY_DIM, value_dim=4, output_shape=6
    )
    data = inputs()
    ours(**data)
    builtin(**data, return_attention_scores=True)
    assert [tuple(v.shape) for v in ours.weights] == [
        tuple(v.shape) for v in builtin.weights
    ]
    assert [v.name for v in ours.weights] == [
        f"{part}_{kind}"
        for part in ("query", "key", "value", "output")
        for kind in ("kernel", "bias")
    ]


@pytest.mark.parametrize("masks", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_outputs_and_weights_match_numpy(masks):
    data = inputs()
    layer = MultiHeadAttention(HEADS, HEAD_KEY_DIM, value_dim=4, output_dim=5)
    layer(**data)
    randomize(layer, 1)
    output, weights = layer(**data, return_attention_scores=True, **masks)
    mask = references.attention_mask(TQ, TV, **masks)
    numpy_weights = [np.asarray(w, np.float64) for w in layer.get_weights()]
    expected, expected_weights = numpy_multi_head_attention(
        data["query"], data["value"], data["key"], *numpy_weights, mask
    )
    assert_close(keras.ops.convert_to_numpy(output), expected, what="output")
    assert_close(keras.ops.convert_to_numpy(weights), expected_weights, what="weights")


@pytest.mark.parametrize("masks", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_gradients_match_numpy(masks):
    mask = references.attention_mask(TQ, TV, **masks)
    data = inputs(2)
    layer = MultiHeadAttention(HEADS, HEAD_KEY_DIM)
    layer(**data)
    randomize(layer, 3)

    def forward(*arrays):
        *weights, query, value, key = arrays
        return numpy_multi_head_attention(query, value, key, *weights, mask)[0]

    checks.check_gradients_match_numpy(layer, data, forward, **masks)


# Keras' fused path (no scores returned) gives a padded query uniform weights where
# both layers' explicit path gives zero; padded query rows are compared on the
# explicit path only. On JAX, Keras' fused path fails when value_dim != key_dim.
PARITY_CASES = {
    "self_attention": ({}, {}),
    "cross_attention": ({"value_dim": 4, "output_dim": 5}, {}),
    "no_bias": ({"use_bias": False}, {"value_mask": checks.padding_mask()}),
    "value_mask": ({}, {"value_mask": checks.padding_mask()}),
    "key_mask_causal": (
        {},
        {"key_mask": checks.padding_mask(), "use_causal_mask": True},
    ),
    "attention_mask": (
        {"value_dim": 4},
        {"attention_mask": np.random.RandomState(6).rand(B, TQ, TV) > 0.3},
    ),
    "causal": ({}, {"use_causal_mask": True}),
}


@pytest.mark.parametrize("return_scores", [False, True], ids=["fused", "scores"])
@pytest.mark.parametrize(
    "options, masks", PARITY_CASES.values(), ids=PARITY_CASES.keys()
)
def test_matches_keras_both_ways(options, masks, return_scores):
    """Weights copied either way give the same outputs, scores and gradients."""
    keras_options = dict(options)
    if "output_dim" in keras_options:
        keras_options["output_shape"] = keras_options.pop("output_dim")
    if (
        keras.backend.backend() == "jax"
        and not return_scores
        and options.get("value_dim", HEAD_KEY_DIM) != HEAD_KEY_DIM
    ):
        pytest.skip("keras' fused path fails on JAX when value_dim != key_dim")
    data = inputs(4)
    if masks.get("use_causal_mask"):
        data["value"] = checks.random_array((B, TQ, VALUE_DIM), 5)
        data["key"] = checks.random_array((B, TQ, KEY_DIM), 6)
        masks = {
            name: mask[:, :TQ] if name.endswith("key_mask") else mask
            for name, mask in masks.items()
        }
    ours = MultiHeadAttention(HEADS, HEAD_KEY_DIM, **options)
    builtin = keras.layers.MultiHeadAttention(HEADS, HEAD_KEY_DIM, **keras_options)
    ours(**data)
    builtin(**data, return_attention_scores=True)
    call = {"return_attention_scores": return_scores, **masks}
    for seed, (source, target) in enumerate([(builtin, ours), (ours, builtin)]):
        randomize(source, seed)
        target.set_weights(source.get_weights())
        out_a, grads_a, dx_a, cotangent = checks.outputs_and_gradients(
            ours, data, **call
        )
        out_b, grads_b, dx_b, _ = checks.outputs_and_gradients(
            builtin, data, cotangent, **call
        )
        assert_close(out_a, out_b, what="output")
        for variable, a, b in zip(ours.weights, grads_a, grads_b, strict=True):
            assert_close(a, b, what=f"gradient of {variable.name}")
        for name in data:
            assert_close(dx_a[name], dx_b[name], what=f"gradient of {name}")
        if return_scores:
            _, scores_a = ours(**data, **call)
            _, scores_b = builtin(**data, **call)
            to_numpy = keras.ops.convert_to_numpy
            assert_close(to_numpy(scores_a), to_numpy(scores_b), what="scores")


@pytest.mark.parametrize("return_scores", [False, True], ids=["fused", "scores"])
def test_matches_keras_with_keras_masks_from_embedding(return_scores):
    """Masks carried by the tensors (Embedding(mask_zero=True)) give Keras' outputs
    on every real (unpadded) query and the same gradients, and the output carries
    the query's mask to the next layer (a masked average over real queries)."""
    ids = [
        np.array([[3, 4, 0], [5, 0, 0]]),
        np.array([[1, 2, 3, 4, 0], [6, 7, 0, 0, 0]]),
    ]

    def model(attention):
        query_in = keras.Input((None,), dtype="int32")
        value_in = keras.Input((None,), dtype="int32")
        embedding = keras.layers.Embedding(10, QUERY_DIM, mask_zero=True)
        attended = attention(
            embedding(query_in),
            embedding(value_in),
            return_attention_scores=return_scores,
        )
        attended = attended[0] if return_scores else attended
        pooled = keras.layers.GlobalAveragePooling1D()(attended)
        return keras.Model([query_in, value_in], [pooled, attended])

    ours = model(MultiHeadAttention(HEADS, HEAD_KEY_DIM))
    builtin = model(keras.layers.MultiHeadAttention(HEADS, HEAD_KEY_DIM))
    real = ids[0] != 0
    for seed, (source, target) in enumerate([(builtin, ours), (ours, builtin)]):
        randomize(source, seed)
        target.set_weights(source.get_weights())
        pooled_a, grads_a, _, cotangent = checks.outputs_and_gradients(
            ours, {}, inputs=ids
        )
        pooled_b, grads_b, _, _ = checks.outputs_and_gradients(
            builtin, {}, cotangent, inputs=ids
        )
        assert_close(pooled_a, pooled_b, what="masked average")
        for variable, a, b in zip(
            ours.trainable_variables, grads_a, grads_b, strict=True
        ):
            assert_close(a, b, what=f"gradient of {variable.path}")
        to_numpy = keras.ops.convert_to_numpy
        attended_a, attended_b = to_numpy(ours(ids)[1]), to_numpy(builtin(ids)[1])
        assert_close(attended_a[real], attended_b[real], what="real queries")


def test_explicit_query_mask_is_honoured():
    """Keras reads only the query's Keras mask; an explicit query_mask counts here."""
    data = inputs(7)
    query_mask = checks.padding_mask(steps=TQ)
    layer = MultiHeadAttention(HEADS, HEAD_KEY_DIM)
    layer(**data)
    randomize(layer, 8)
    output, weights = layer(**data, query_mask=query_mask, return_attention_scores=True)
    output_bias = keras.ops.convert_to_numpy(layer.output_bias)
    weights = keras.ops.convert_to_numpy(weights)
    assert np.all(np.swapaxes(weights, 1, 2)[~query_mask] == 0.0)
    assert_close(keras.ops.convert_to_numpy(output)[~query_mask][0], output_bias)


def test_padded_keys_get_zero_weight_and_do_not_move_outputs():
    data = inputs(9)
    layer = MultiHeadAttention(HEADS, HEAD_KEY_DIM)
    checks.check_padded_positions_do_not_move(layer, data["query"], data["value"])


def test_dropout_matches_keras_with_the_same_seed():
    """Dropout acts on the attention weights, like Keras' (same seed, same mask)."""
    data = inputs(10)
    ours = MultiHeadAttention(HEADS, HEAD_KEY_DIM, dropout=0.5, seed=3)
    builtin = keras.layers.MultiHeadAttention(HEADS, HEAD_KEY_DIM, dropout=0.5, seed=3)
    ours(**data)
    builtin(**data)
    ours.set_weights(builtin.get_weights())
    to_numpy = keras.ops.convert_to_numpy
    inference = to_numpy(ours(**data))
    training = to_numpy(ours(**data, training=True))
    assert np.max(np.abs(training - inference)) > 1e-3
    assert_close(to_numpy(ours(**data, training=False)), inference)
    assert_close(training, to_numpy(builtin(**data, training=True)))


@pytest.mark.parametrize(
    "arguments, invalid",
    [
        ({"num_heads": 0, "key_dim": 2}, "num_heads"),
        ({"num_heads": 2, "key_dim": 2.0}, "key_dim"),
        ({"num_heads": 2, "key_dim": 2, "value_dim": -1}, "value_dim"),
        ({"num_heads": 2, "key_dim": 2, "output_dim": "8"}, "output_dim"),
        ({"num_heads": 2, "key_dim": 2, "dropout": 1.5}, "dropout"),
        ({"num_heads": 2, "key_dim": 2, "use_bias": 1}, "use_bias"),
    ],
)
def test_invalid_arguments_are_rejected(arguments, invalid):
    with pytest.raises(ValueError, match=invalid):
        MultiHeadAttention(**arguments)


def test_rank_4_queries_are_rejected():
    with pytest.raises(ValueError, match="query"):
        MultiHeadAttention(2, 2)(np.ones((2, 3, 3, 4)), np.ones((2, 5, 4)))


def test_config_round_trip():
    checks.check_config_round_trip(
        MultiHeadAttention(4, 8, value_dim=6, output_dim=10, dropout=0.1, seed=2)
    )


def attention_model():
    tokens = keras.Input((None, QUERY_DIM), name="tokens")
    memory = keras.Input((None, VALUE_DIM), name="memory")
    attended = MultiHeadAttention(HEADS, HEAD_KEY_DIM)(
        tokens, tokens, use_causal_mask=True
    )
    attended = MultiHeadAttention(HEADS, HEAD_KEY_DIM, output_dim=2)(attended, memory)
    return keras.Model(
        {"tokens": tokens, "memory": memory}, keras.layers.Dense(1)(attended)
    )


def test_save_and_reload_in_fresh_process(tmp_path):
    data = {
        "tokens": checks.random_array((B, TQ, QUERY_DIM), 11),
        "memory": checks.random_array((B, TV, VALUE_DIM), 12),
    }
    checks.check_save_and_reload(attention_model(), data, tmp_path)


def test_training_step_reduces_loss():
    keras.utils.set_random_seed(0)
    data = {
        "tokens": checks.random_array((8, TQ, QUERY_DIM), 13),
        "memory": checks.random_array((8, TV, VALUE_DIM), 14),
    }
    targets = checks.random_array((8, TQ, 1), 15)
    checks.check_training_step_reduces_loss(attention_model(), data, targets)


@pytest.mark.parametrize("policy", sorted(checks.MIXED_TOLERANCES))
def test_mixed_precision_outputs_and_gradients_match_float32(policy):
    data = inputs(4)

    def make_layer():
        layer = MultiHeadAttention(HEADS, HEAD_KEY_DIM)
        layer(**data)
        randomize(layer, 5)
        return layer

    checks.check_mixed_precision(
        make_layer, data, policy, value_mask=checks.padding_mask()
    )
