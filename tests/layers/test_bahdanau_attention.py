import keras
import numpy as np
import pytest

from rnnkit.layers import BahdanauAttention, bahdanau_attention
from rnnkit.testing import attention as checks
from rnnkit.testing import references
from rnnkit.testing.recurrent import assert_close

B, TQ, TV = checks.BATCH, checks.QUERY_STEPS, checks.VALUE_STEPS
QUERY_DIM, VALUE_DIM, KEY_DIM, UNITS = 4, 3, 2, 5


def numpy_bahdanau(query, value, key, query_kernel, key_kernel, bias, v, mask=None):
    """e_ij = v^T tanh(W_q q_i + W_k k_j + b), a = softmax_j(e), c_i = sum_j a_ij v_j,
    written out one query and one key at a time."""
    scores = np.zeros((len(query), query.shape[1], key.shape[1]))
    for b in range(len(query)):
        for i in range(query.shape[1]):
            for j in range(key.shape[1]):
                hidden = np.tanh(
                    query[b, i] @ query_kernel + key[b, j] @ key_kernel + bias
                )
                scores[b, i, j] = v @ hidden
    weights = references.masked_softmax(scores, mask)
    return np.einsum("bqk,bkv->bqv", weights, value), weights


def inputs(seed=0):
    return {
        "query": checks.random_array((B, TQ, QUERY_DIM), seed),
        "value": checks.random_array((B, TV, VALUE_DIM), seed + 1),
        "key": checks.random_array((B, TV, KEY_DIM), seed + 2),
    }


def built_layer(use_bias=True, seed=0, jit_compile=None):
    """A layer with random weights, including a nonzero bias."""
    layer = BahdanauAttention(UNITS, use_bias=use_bias, jit_compile=jit_compile)
    layer.build((None, None, QUERY_DIM), (None, None, VALUE_DIM), (None, None, KEY_DIM))
    rng = np.random.RandomState(seed)
    for variable in layer.trainable_variables:
        variable.assign(rng.uniform(-0.8, 0.8, variable.shape))
    return layer


def numpy_weights(layer):
    weights = [np.asarray(w, np.float64) for w in layer.get_weights()]
    if not layer.use_bias:
        weights.insert(2, np.zeros(UNITS))
    return weights


MASK_CASES = {
    "none": {},
    "value_mask": {"value_mask": checks.padding_mask()},
    "key_mask_causal": {"key_mask": checks.padding_mask(), "use_causal_mask": True},
    "query_mask": {"query_mask": checks.padding_mask(steps=TQ)},
    "attention_mask": {
        "attention_mask": np.random.RandomState(5).rand(B, TQ, TV) > 0.3
    },
}


def test_weights_have_explicit_names_and_shapes():
    layer = built_layer()
    assert [(v.name, tuple(v.shape)) for v in layer.weights] == [
        ("query_kernel", (QUERY_DIM, UNITS)),
        ("key_kernel", (KEY_DIM, UNITS)),
        ("bias", (UNITS,)),
        ("score_vector", (UNITS,)),
    ]
    unbiased = BahdanauAttention(UNITS)
    unbiased(checks.random_array((B, TQ, QUERY_DIM), 0), inputs()["value"])
    assert [v.name for v in unbiased.weights] == [
        "query_kernel",
        "key_kernel",
        "score_vector",
    ]


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("masks", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_outputs_and_weights_match_numpy(use_bias, masks):
    data = inputs()
    layer = built_layer(use_bias)
    output, weights = layer(**data, return_attention_scores=True, **masks)
    mask = references.attention_mask(TQ, TV, **masks)
    expected, expected_weights = numpy_bahdanau(
        data["query"], data["value"], data["key"], *numpy_weights(layer), mask
    )
    assert_close(keras.ops.convert_to_numpy(output), expected, what="output")
    assert_close(keras.ops.convert_to_numpy(weights), expected_weights, what="weights")


# The two ways of scoring a sequence of queries: XLA-compiled with a hand-written
# backward pass (TensorFlow's default), and the keras.remat loop (everywhere else).
PATHS = {"default": None, "uncompiled": False}


@pytest.mark.parametrize("jit_compile", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("masks", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_gradients_match_numpy(masks, jit_compile):
    mask = references.attention_mask(TQ, TV, **masks)

    def forward(query_kernel, key_kernel, bias, v, query, value, key):
        weights = (query_kernel, key_kernel, bias, v)
        return numpy_bahdanau(query, value, key, *weights, mask)[0]

    layer = built_layer(jit_compile=jit_compile)
    checks.check_gradients_match_numpy(layer, inputs(1), forward, **masks)
    on_tensorflow = keras.backend.backend() == "tensorflow"
    if on_tensorflow and jit_compile is None:
        assert layer.execution_path == bahdanau_attention.XLA_PATH
    else:
        assert layer.execution_path.startswith(bahdanau_attention.REMAT_PATH)


def test_execution_path_names_why_the_loop_is_not_compiled():
    layer = built_layer(jit_compile=False)
    layer(**inputs())
    backend = keras.backend.backend()
    reason = "jit_compile=False" if backend == "tensorflow" else f"backend is {backend}"
    assert layer.execution_path == f"{bahdanau_attention.REMAT_PATH}: {reason}"
    layer(inputs()["query"][:, 0], inputs()["value"], inputs()["key"])
    assert layer.execution_path == bahdanau_attention.STEP_PATH


@pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="XLA is unavailable on torch only"
)
def test_jit_compile_true_that_cannot_be_honoured_is_a_clear_error():
    layer = built_layer(jit_compile=True)
    with pytest.raises(
        ValueError, match="jit_compile=True cannot be honoured: backend"
    ):
        layer(**inputs())


def test_single_step_gradients_match_numpy():
    data = inputs(2)
    data["query"] = data["query"][:, 0]
    value_mask = checks.padding_mask()
    mask = references.attention_mask(1, TV, value_mask=value_mask)

    def forward(query_kernel, key_kernel, bias, v, query, value, key):
        weights = (query_kernel, key_kernel, bias, v)
        return numpy_bahdanau(query[:, None], value, key, *weights, mask)[0][:, 0]

    checks.check_gradients_match_numpy(
        built_layer(), data, forward, value_mask=value_mask
    )


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="tf.function is TensorFlow's"
)
@pytest.mark.parametrize("jit_compile", PATHS.values(), ids=PATHS.keys())
def test_graph_mode_gradients_equal_eager_gradients(jit_compile):
    """In a tf.function (as in fit) the per-query loop and its recomputation on the
    backward pass give the same gradients as eager execution."""
    import tensorflow as tf

    data = {name: tf.constant(a) for name, a in inputs(3).items()}
    layer = built_layer(jit_compile=jit_compile)
    value_mask = tf.constant(checks.padding_mask())

    def gradients():
        with tf.GradientTape() as tape:
            tape.watch(list(data.values()))
            loss = tf.reduce_sum(layer(**data, value_mask=value_mask) ** 2)
        return tape.gradient(loss, [*layer.trainable_variables, *data.values()])

    eager = gradients()
    graph = tf.function(gradients)()
    for a, b in zip(graph, eager, strict=True):
        assert_close(a.numpy(), b.numpy(), 1e-6)


def test_padded_keys_get_zero_weight_and_do_not_move_outputs():
    data = inputs(4)
    layer = BahdanauAttention(UNITS)
    checks.check_padded_positions_do_not_move(layer, data["query"], data["value"])


def test_padded_queries_get_a_zero_context():
    data = inputs(5)
    query_mask = checks.padding_mask(steps=TQ)
    output = built_layer()(**data, query_mask=query_mask)
    assert np.all(keras.ops.convert_to_numpy(output)[~query_mask] == 0.0)


def test_decoding_step_by_step_with_precomputed_keys_equals_teacher_forcing():
    """A decoder projects the keys once and then feeds one (batch, dim) query per
    step; every step equals its row of the teacher-forced sequence."""
    data = inputs(6)
    value_mask = checks.padding_mask()
    layer = built_layer()
    sequence_output, sequence_weights = layer(
        **data, value_mask=value_mask, return_attention_scores=True
    )
    projected_key = layer.precompute_keys(data["key"])
    assert tuple(projected_key.shape) == (B, TV, UNITS)
    to_numpy = keras.ops.convert_to_numpy
    for t in range(TQ):
        step_output, step_weights = layer(
            data["query"][:, t],
            data["value"],
            value_mask=value_mask,
            projected_key=projected_key,
            return_attention_scores=True,
        )
        assert tuple(step_output.shape) == (B, VALUE_DIM)
        assert tuple(step_weights.shape) == (B, TV)
        assert_close(to_numpy(step_output), to_numpy(sequence_output)[:, t])
        assert_close(to_numpy(step_weights), to_numpy(sequence_weights)[:, t])


def test_precomputed_keys_replace_the_key_projection():
    """With `projected_key` the layer does not project (or even need) `key`."""
    data = inputs(7)
    layer = built_layer()
    expected = layer(**data)
    projected_key = layer.precompute_keys(data["key"])
    output = layer(data["query"], data["value"], projected_key=projected_key)
    to_numpy = keras.ops.convert_to_numpy
    assert_close(to_numpy(output), to_numpy(expected))


def test_precompute_keys_needs_a_built_layer():
    with pytest.raises(ValueError, match="not built"):
        BahdanauAttention(UNITS).precompute_keys(inputs()["key"])


def test_initial_kernels_differ():
    """Query and key kernels of the same shape get different initial values."""
    layer = BahdanauAttention(UNITS)
    layer.build((None, 4), (None, None, 4))
    query_kernel, key_kernel, _ = layer.get_weights()
    assert np.max(np.abs(query_kernel - key_kernel)) > 1e-3


def test_keras_masks_from_embedding_propagate():
    """Query and value masks from Embedding(mask_zero=True) are used, and the
    query's mask reaches the next layer (a masked average)."""
    query_ids = np.array([[3, 4, 0], [5, 0, 0]])
    value_ids = np.array([[1, 2, 3, 4, 0], [6, 7, 0, 0, 0]])
    query_in = keras.Input((None,), dtype="int32")
    value_in = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(10, QUERY_DIM, mask_zero=True)
    attention = BahdanauAttention(UNITS, use_bias=True)
    attended = attention(embedding(query_in), embedding(value_in))
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    model = keras.Model([query_in, value_in], pooled)
    result = keras.ops.convert_to_numpy(model([query_ids, value_ids]))

    table = keras.ops.convert_to_numpy(embedding.embeddings).astype(np.float64)
    query, value = table[query_ids], table[value_ids]
    query_mask, value_mask = query_ids != 0, value_ids != 0
    mask = references.attention_mask(3, 5, query_mask, value_mask)
    weights = [np.asarray(w, np.float64) for w in attention.get_weights()]
    context, _ = numpy_bahdanau(query, value, value, *weights, mask)
    expected = (context * query_mask[..., None]).sum(1) / query_mask.sum(1)[:, None]
    assert_close(result, expected)


def test_causal_mask_needs_a_sequence_of_queries():
    data = inputs(8)
    with pytest.raises(ValueError, match="use_causal_mask"):
        built_layer()(
            data["query"][:, 0], data["value"], data["key"], use_causal_mask=True
        )


@pytest.mark.parametrize(
    "arguments",
    [
        {"units": 0},
        {"units": 2.5},
        {"units": 4, "use_bias": "yes"},
        {"units": 4, "jit_compile": "auto"},
    ],
)
def test_invalid_arguments_are_rejected(arguments):
    with pytest.raises(ValueError, match=list(arguments)[-1]):
        BahdanauAttention(**arguments)


def test_config_round_trip():
    checks.check_config_round_trip(
        BahdanauAttention(7, use_bias=True, kernel_regularizer="l2", jit_compile=False)
    )


def attention_model():
    query = keras.Input((None, QUERY_DIM), name="query")
    value = keras.Input((None, VALUE_DIM), name="value")
    context = BahdanauAttention(UNITS, use_bias=True)(query, value)
    return keras.Model({"query": query, "value": value}, keras.layers.Dense(1)(context))


def test_save_and_reload_in_fresh_process(tmp_path):
    data = {
        "query": checks.random_array((B, TQ, QUERY_DIM), 9),
        "value": checks.random_array((B, TV, VALUE_DIM), 10),
    }
    checks.check_save_and_reload(attention_model(), data, tmp_path)


def test_training_step_reduces_loss():
    keras.utils.set_random_seed(0)
    data = {
        "query": checks.random_array((8, TQ, QUERY_DIM), 11),
        "value": checks.random_array((8, TV, VALUE_DIM), 12),
    }
    targets = checks.random_array((8, TQ, 1), 13)
    checks.check_training_step_reduces_loss(attention_model(), data, targets)


def test_mixed_precision_runs_in_float16():
    """Under mixed_float16 the layer computes in float16, stays close to float32,
    and padded keys still get exactly zero weight (a float16-sized large negative)."""
    data = inputs(14)
    value_mask = checks.padding_mask()
    reference = built_layer()
    expected = keras.ops.convert_to_numpy(reference(**data, value_mask=value_mask))
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        layer = BahdanauAttention(UNITS, use_bias=True)
        layer(**data)
        layer.set_weights(reference.get_weights())
        output, weights = layer(
            **data, value_mask=value_mask, return_attention_scores=True
        )
    finally:
        keras.config.set_dtype_policy(previous)
    assert keras.backend.standardize_dtype(output.dtype) == "float16"
    assert_close(keras.ops.convert_to_numpy(output).astype("float32"), expected, 1e-2)
    weights = keras.ops.convert_to_numpy(weights)
    assert np.all(weights[np.broadcast_to(~value_mask[:, None], weights.shape)] == 0)


def test_under_mixed_bfloat16_scores_and_output_come_back_in_bfloat16():
    """On a TensorFlow CPU the per-query loop and the softmax run in float32; what the
    layer returns is still in its compute dtype, padded keys at exactly zero."""
    data = inputs(16)
    value_mask = checks.padding_mask()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        layer = BahdanauAttention(UNITS)
        output, weights = layer(
            **data, value_mask=value_mask, return_attention_scores=True
        )
    finally:
        keras.config.set_dtype_policy(previous)
    for tensor in (output, weights):
        assert keras.backend.standardize_dtype(tensor.dtype) == "bfloat16"
    weights = keras.ops.convert_to_numpy(weights).astype("float32")
    assert np.all(weights[np.broadcast_to(~value_mask[:, None], weights.shape)] == 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=2e-2)


@pytest.mark.parametrize("policy", sorted(checks.MIXED_TOLERANCES))
def test_mixed_precision_outputs_and_gradients_match_float32(policy):
    data = inputs(15)
    layers = []

    def make_layer():
        layers.append(built_layer(seed=4))
        return layers[-1]

    checks.check_mixed_precision(
        make_layer, data, policy, value_mask=checks.padding_mask()
    )
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        in_float32 = policy == "mixed_bfloat16" and not tf.config.get_visible_devices(
            "GPU"
        )
        assert layers[-1].execution_path == bahdanau_attention.XLA_PATH + (
            ", in float32 under mixed_bfloat16" if in_float32 else ""
        )
