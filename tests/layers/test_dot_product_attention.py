import keras
import numpy as np
import pytest

from rnnkit.layers import DotProductAttention
from rnnkit.testing import attention as checks
from rnnkit.testing import references
from rnnkit.testing.recurrent import assert_close

B, TQ, TV, DIM, VALUE_DIM = checks.BATCH, checks.QUERY_STEPS, checks.VALUE_STEPS, 4, 3


def numpy_dot_product_attention(query, value, key, scaled=True, mask=None):
    """score_ij = q_i . k_j (/ sqrt(d)); a = softmax_j; c_i = sum_j a_ij v_j."""
    scores = np.einsum("bqd,bkd->bqk", query, key)
    if scaled:
        scores = scores / np.sqrt(query.shape[-1])
    weights = references.masked_softmax(scores, mask)
    return np.einsum("bqk,bkv->bqv", weights, value), weights


def inputs(seed=0):
    return {
        "query": checks.random_array((B, TQ, DIM), seed),
        "value": checks.random_array((B, TV, VALUE_DIM), seed + 1),
        "key": checks.random_array((B, TV, DIM), seed + 2),
    }


MASK_CASES = {
    "none": {},
    "value_mask": {"value_mask": checks.padding_mask()},
    "key_mask_causal": {"key_mask": checks.padding_mask(), "use_causal_mask": True},
    "query_mask": {"query_mask": checks.padding_mask(steps=TQ)},
    "attention_mask": {
        "attention_mask": np.random.RandomState(5).rand(B, TQ, TV) > 0.3
    },
}


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("masks", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_outputs_and_weights_match_numpy(scaled, masks):
    data = inputs()
    output, weights = DotProductAttention(scaled=scaled)(
        **data, return_attention_scores=True, **masks
    )
    mask = references.attention_mask(TQ, TV, **masks)
    expected, expected_weights = numpy_dot_product_attention(
        data["query"], data["value"], data["key"], scaled, mask
    )
    assert_close(keras.ops.convert_to_numpy(output), expected, what="output")
    assert_close(keras.ops.convert_to_numpy(weights), expected_weights, what="weights")


@pytest.mark.parametrize("masks", MASK_CASES.values(), ids=MASK_CASES.keys())
def test_gradients_match_numpy(masks):
    mask = references.attention_mask(TQ, TV, **masks)

    def forward(query, value, key):
        return numpy_dot_product_attention(query, value, key, True, mask)[0]

    checks.check_gradients_match_numpy(
        DotProductAttention(), inputs(1), forward, **masks
    )


def test_padded_keys_get_zero_weight_and_do_not_move_outputs():
    data = inputs(2)
    checks.check_padded_positions_do_not_move(
        DotProductAttention(), data["query"], data["key"]
    )


def test_padded_queries_get_a_zero_context():
    data = inputs(3)
    query_mask = checks.padding_mask(steps=TQ)
    output = DotProductAttention()(**data, query_mask=query_mask)
    output = keras.ops.convert_to_numpy(output)
    assert np.all(output[~query_mask] == 0.0)


def test_single_step_query_equals_its_row_of_the_sequence():
    data = inputs(4)
    value_mask = checks.padding_mask()
    sequence_output, sequence_weights = DotProductAttention()(
        **data, value_mask=value_mask, return_attention_scores=True
    )
    step_output, step_weights = DotProductAttention()(
        data["query"][:, 1],
        data["value"],
        data["key"],
        value_mask=value_mask,
        return_attention_scores=True,
    )
    assert tuple(step_output.shape) == (B, VALUE_DIM)
    assert tuple(step_weights.shape) == (B, TV)
    to_numpy = keras.ops.convert_to_numpy
    assert_close(to_numpy(step_output), to_numpy(sequence_output)[:, 1])
    assert_close(to_numpy(step_weights), to_numpy(sequence_weights)[:, 1])


def test_key_defaults_to_value():
    data = inputs(5)
    layer = DotProductAttention()
    with_key = layer(data["query"], data["key"], data["key"])
    without_key = layer(data["query"], data["key"])
    assert_close(
        keras.ops.convert_to_numpy(without_key), keras.ops.convert_to_numpy(with_key)
    )


def test_keras_masks_from_embedding_propagate():
    """Query and value masks from Embedding(mask_zero=True) are used, and the
    query's mask reaches the next layer (a masked average)."""
    query_ids = np.array([[3, 4, 0], [5, 0, 0]])
    value_ids = np.array([[1, 2, 3, 4, 0], [6, 7, 0, 0, 0]])
    query_in = keras.Input((None,), dtype="int32", name="query_ids")
    value_in = keras.Input((None,), dtype="int32", name="value_ids")
    embedding = keras.layers.Embedding(10, DIM, mask_zero=True)
    attention = DotProductAttention()
    attended = attention(embedding(query_in), embedding(value_in))
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    model = keras.Model([query_in, value_in], pooled)
    result = keras.ops.convert_to_numpy(model([query_ids, value_ids]))

    table = keras.ops.convert_to_numpy(embedding.embeddings).astype(np.float64)
    query, value = table[query_ids], table[value_ids]
    query_mask, value_mask = query_ids != 0, value_ids != 0
    mask = references.attention_mask(3, 5, query_mask, value_mask)
    context, _ = numpy_dot_product_attention(query, value, value, True, mask)
    expected = (context * query_mask[..., None]).sum(1) / query_mask.sum(1)[:, None]
    assert_close(result, expected)


def test_causal_mask_needs_a_sequence_of_queries():
    data = inputs(6)
    with pytest.raises(ValueError, match="use_causal_mask"):
        DotProductAttention()(data["query"][:, 0], data["key"], use_causal_mask=True)


def test_dropout_only_in_training():
    data = inputs(7)
    layer = DotProductAttention(dropout=0.5, seed=1)
    inference = keras.ops.convert_to_numpy(layer(**data))
    again = keras.ops.convert_to_numpy(layer(**data, training=False))
    training = keras.ops.convert_to_numpy(layer(**data, training=True))
    assert_close(again, inference)
    assert np.max(np.abs(training - inference)) > 1e-3


def test_query_and_key_sizes_must_match():
    with pytest.raises(ValueError, match="query"):
        DotProductAttention()(np.ones((2, 3, 5)), np.ones((2, 4, 6)))


@pytest.mark.parametrize(
    "arguments", [{"scaled": 1}, {"dropout": 1.0}, {"dropout": -0.1}]
)
def test_invalid_arguments_are_rejected(arguments):
    with pytest.raises(ValueError, match=next(iter(arguments))):
        DotProductAttention(**arguments)


def test_config_round_trip():
    checks.check_config_round_trip(DotProductAttention(scaled=False, dropout=0.2))


def attention_model():
    query = keras.Input((None, DIM), name="query")
    value = keras.Input((None, DIM), name="value")
    context = DotProductAttention(scaled=False)(query, value, use_causal_mask=True)
    return keras.Model({"query": query, "value": value}, keras.layers.Dense(1)(context))


def test_save_and_reload_in_fresh_process(tmp_path):
    data = {
        "query": checks.random_array((B, TV, DIM), 8),
        "value": checks.random_array((B, TV, DIM), 9),
    }
    checks.check_save_and_reload(attention_model(), data, tmp_path)


def test_training_step_reduces_loss():
    keras.utils.set_random_seed(0)
    data = {
        "query": checks.random_array((8, TV, DIM), 10),
        "value": checks.random_array((8, TV, DIM), 11),
    }
    targets = checks.random_array((8, TV, 1), 12)
    checks.check_training_step_reduces_loss(attention_model(), data, targets)


@pytest.mark.parametrize("policy", sorted(checks.MIXED_TOLERANCES))
def test_mixed_precision_outputs_and_gradients_match_float32(policy):
    masks = MASK_CASES["key_mask_causal"]
    checks.check_mixed_precision(DotProductAttention, inputs(3), policy, **masks)
