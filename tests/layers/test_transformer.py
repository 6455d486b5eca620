import keras
import numpy as np
import pytest

from rnnkit.layers import (
    PositionalEncoding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from rnnkit.testing import attention as checks
from rnnkit.testing.recurrent import assert_close
from tests.layers import transformer_checks as tc

B, T, S = tc.BATCH, tc.TARGET_STEPS, tc.SOURCE_STEPS
to_numpy = keras.ops.convert_to_numpy

# Both norm placements; the activation option rides along with pre-norm.
PLACEMENTS = {
    "post_norm": {"norm_first": False, "activation": "relu"},
    "pre_norm": {"norm_first": True, "activation": "tanh"},
}


@pytest.mark.parametrize("use_causal_mask", [False, True], ids=["padding", "causal"])
@pytest.mark.parametrize("options", PLACEMENTS.values(), ids=PLACEMENTS.keys())
def test_encoder_outputs_and_gradients_match_numpy(options, use_causal_mask):
    layer = tc.built_encoder(1, **options)
    padding = checks.padding_mask(B, T)

    def forward(*arrays):
        *weights, inputs = arrays
        return tc.numpy_encoder_block(
            tc.named_weights(layer, weights),
            inputs,
            padding,
            use_causal_mask,
            **options,
        )

    checks.check_gradients_match_numpy(
        layer,
        {"inputs": tc.target(2)},
        forward,
        padding_mask=padding,
        use_causal_mask=use_causal_mask,
    )


@pytest.mark.parametrize("options", PLACEMENTS.values(), ids=PLACEMENTS.keys())
def test_decoder_outputs_and_gradients_match_numpy(options):
    layer = tc.built_decoder(3, **options)
    padding, source_padding = checks.padding_mask(B, T), checks.padding_mask(B, S)

    def forward(*arrays):
        *weights, inputs, encoder_outputs = arrays
        return tc.numpy_decoder_block(
            tc.named_weights(layer, weights),
            inputs,
            encoder_outputs,
            padding,
            source_padding,
            **options,
        )

    checks.check_gradients_match_numpy(
        layer,
        {"inputs": tc.target(4), "encoder_outputs": tc.source(5)},
        forward,
        padding_mask=padding,
        encoder_padding_mask=source_padding,
    )


def test_decoder_without_cross_attention_matches_numpy():
    layer = tc.built_decoder(6, use_cross_attention=False)
    inputs = tc.target(7)
    expected = tc.numpy_decoder_block(
        tc.named_weights(layer, [np.float64(w) for w in layer.get_weights()]), inputs
    )
    assert_close(to_numpy(layer(inputs)), expected)
    assert not any("cross" in v.path for v in layer.weights)


def _gradients_wrt_inputs(layer, inputs, cotangent, **call_kwargs):
    return checks.outputs_and_gradients(layer, inputs, cotangent, **call_kwargs)[2]


def test_no_information_flows_from_padding():
    """Changing padded positions (target or source) changes no real position's
    output, and the real outputs' gradients w.r.t. padded positions are zero."""
    padding, source_padding = checks.padding_mask(B, T), checks.padding_mask(B, S)
    inputs, encoder_outputs = tc.target(8), tc.source(9)
    garbage_target = np.where(padding[..., None], inputs, 100 * tc.target(10))
    garbage_source = np.where(
        source_padding[..., None], encoder_outputs, 100 * tc.source(11)
    )
    real_rows = padding[..., None].astype("float32")
    cotangent = real_rows * checks.random_array((B, T, tc.MODEL_DIM), 12)
    for options in PLACEMENTS.values():
        encoder = tc.built_encoder(13, **options)
        expected = to_numpy(encoder(inputs, padding_mask=padding))
        changed = to_numpy(encoder(garbage_target, padding_mask=padding))
        assert_close(changed[padding], expected[padding], 1e-5, "encoder output")
        gradients = _gradients_wrt_inputs(
            encoder, {"inputs": inputs}, cotangent, padding_mask=padding
        )
        assert np.abs(gradients["inputs"][~padding]).max() <= 1e-7

        decoder = tc.built_decoder(14, **options)
        masks = {"padding_mask": padding, "encoder_padding_mask": source_padding}
        expected = to_numpy(decoder(inputs, encoder_outputs, **masks))
        changed = to_numpy(decoder(garbage_target, garbage_source, **masks))
        assert_close(changed[padding], expected[padding], 1e-5, "decoder output")
        gradients = _gradients_wrt_inputs(
            decoder,
            {"inputs": inputs, "encoder_outputs": encoder_outputs},
            cotangent,
            **masks,
        )
        assert np.abs(gradients["inputs"][~padding]).max() <= 1e-7
        assert np.abs(gradients["encoder_outputs"][~source_padding]).max() <= 1e-7


@pytest.mark.parametrize("block", ["encoder", "decoder"])
def test_no_information_flows_from_the_future(block):
    """With the causal mask, output i does not move when positions j > i change,
    and its gradient w.r.t. them is zero."""
    inputs = tc.target(15)
    for options in PLACEMENTS.values():
        if block == "encoder":
            layer, extra, call = tc.built_encoder(16, **options), {}, {}
            call["use_causal_mask"] = True
        else:
            layer, extra, call = tc.built_decoder(17, **options), {}, {}
            extra["encoder_outputs"] = tc.source(18)
        expected = to_numpy(layer(inputs, *extra.values(), **call))
        for i in range(T):
            changed = inputs.copy()
            changed[:, i + 1 :] += 10 * tc.target(19)[:, i + 1 :]
            output = to_numpy(layer(changed, *extra.values(), **call))
            assert_close(output[:, : i + 1], expected[:, : i + 1], 1e-5, "past")
            cotangent = np.zeros((B, T, tc.MODEL_DIM), "float32")
            cotangent[:, i] = 1.0
            gradients = _gradients_wrt_inputs(
                layer, {"inputs": inputs, **extra}, cotangent, **call
            )
            assert np.abs(gradients["inputs"][:, i + 1 :]).max(initial=0) <= 1e-7


def test_keras_masks_from_embedding_are_used_and_passed_on():
    """Embedding(mask_zero=True) masks give the outputs of explicit padding masks,
    and the blocks pass the target's mask on (a masked average over real tokens)."""
    target_ids = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    source_ids = np.array([[1, 2, 3, 4, 0], [5, 6, 0, 0, 0]])
    target_in = keras.Input((None,), dtype="int32")
    source_in = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(10, tc.MODEL_DIM, mask_zero=True)
    encoder = TransformerEncoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM)
    decoder = TransformerDecoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM)
    encoded = encoder(embedding(source_in))
    decoded = decoder(embedding(target_in), encoded)
    pooled = keras.layers.GlobalAveragePooling1D()(decoded)
    model = keras.Model([target_in, source_in], [decoded, pooled])
    decoded, pooled = (to_numpy(x) for x in model([target_ids, source_ids]))

    target_mask, source_mask = target_ids != 0, source_ids != 0
    table = to_numpy(embedding.embeddings)
    encoded = encoder(table[source_ids], padding_mask=source_mask)
    expected = to_numpy(
        decoder(
            table[target_ids],
            encoded,
            padding_mask=target_mask,
            encoder_padding_mask=source_mask,
        )
    )
    assert_close(decoded[target_mask], expected[target_mask], what="real tokens")
    masked_average = (expected * target_mask[..., None]).sum(1) / target_mask.sum(
        1, keepdims=True
    )
    assert_close(pooled, masked_average, what="masked average")


CACHE_CASES = {
    "post_norm": ({"norm_first": False}, True),
    "pre_norm": ({"norm_first": True}, True),
    "pre_norm_precomputed_source": ({"norm_first": True}, "precompute"),
    "decoder_only": ({"use_cross_attention": False}, False),
}


@pytest.mark.parametrize("options, cross", CACHE_CASES.values(), ids=CACHE_CASES)
@pytest.mark.parametrize("chunks", [[1] * T, [2, 1, 1]], ids=["steps", "chunks"])
def test_incremental_decoding_equals_full_causal_recomputation(options, cross, chunks):
    """Token by token (or a few at a time) with the key/value cache: the outputs
    and self-attention weights of the full causal pass, position by position."""
    layer = tc.built_decoder(20, **options)
    encoder_outputs = [tc.source(21)] if cross else []
    source_padding = checks.padding_mask(B, S)
    masks = {"encoder_padding_mask": source_padding} if cross else {}
    inputs = PositionalEncoding()(tc.target(22))
    full, weights = layer(
        inputs, *encoder_outputs, return_attention_scores=True, **masks
    )
    full, self_weights = to_numpy(full), to_numpy(weights["self_attention"])
    cache = layer.initial_cache(
        B, T, encoder_outputs[0] if cross == "precompute" else None
    )
    step = 0
    for size in chunks:
        output, cache, weights = layer(
            inputs[:, step : step + size],
            *encoder_outputs,
            cache=cache,
            step=step,
            return_attention_scores=True,
            **masks,
        )
        assert_close(to_numpy(output), full[:, step : step + size], what="outputs")
        assert_close(
            to_numpy(weights["self_attention"]),
            self_weights[:, :, step : step + size],
            what="self-attention weights",
        )
        step += size


def test_incremental_decoding_with_positions_added_per_step():
    """PositionalEncoding(start_index=step) on each new token, then the block, gives
    the full pass over the encoded sequence: the caller owns the positions."""
    layer = tc.built_decoder(23, use_cross_attention=False)
    embeddings = tc.target(24)
    positions = PositionalEncoding()
    full = to_numpy(layer(positions(embeddings)))
    cache = layer.initial_cache(B, T + 2)  # room to spare: unwritten slots unseen
    for step in range(T):
        token = positions(embeddings[:, step : step + 1], start_index=step)
        output, cache = layer(token, cache=cache, step=step)
        assert_close(to_numpy(output)[:, 0], full[:, step], what=f"step {step}")


def test_dropout_only_in_training_and_each_kind_acts():
    inputs, encoder_outputs = tc.target(25), tc.source(26)
    plain = tc.built_decoder(27)
    expected = to_numpy(plain(inputs, encoder_outputs))
    for rate in ("dropout", "attention_dropout", "feedforward_dropout"):
        layer = TransformerDecoderBlock(
            tc.HEADS, tc.FEEDFORWARD_DIM, seed=4, **{rate: 0.5}
        )
        layer(inputs, encoder_outputs)
        layer.set_weights(plain.get_weights())
        assert_close(to_numpy(layer(inputs, encoder_outputs)), expected, what=rate)
        training = to_numpy(layer(inputs, encoder_outputs, training=True))
        assert np.abs(training - expected).max() > 1e-3, rate


@pytest.mark.parametrize(
    "arguments, invalid",
    [
        ({"num_heads": 0, "feedforward_dim": 8}, "num_heads"),
        ({"num_heads": 2, "feedforward_dim": 8.0}, "feedforward_dim"),
        ({"num_heads": 2, "feedforward_dim": 8, "key_dim": 0}, "key_dim"),
        ({"num_heads": 2, "feedforward_dim": 8, "dropout": 1.0}, "dropout"),
        ({"num_heads": 2, "feedforward_dim": 8, "attention_dropout": -0.1}, "atten"),
        ({"num_heads": 2, "feedforward_dim": 8, "feedforward_dropout": "0"}, "feed"),
        ({"num_heads": 2, "feedforward_dim": 8, "norm_first": 1}, "norm_first"),
        ({"num_heads": 2, "feedforward_dim": 8, "layer_norm_epsilon": 0}, "epsilon"),
        ({"num_heads": 2, "feedforward_dim": 8, "use_cross_attention": 1}, "cross"),
    ],
)
def test_invalid_arguments_are_rejected(arguments, invalid):
    with pytest.raises(ValueError, match=invalid):
        TransformerDecoderBlock(**arguments)


def test_misuse_is_reported():
    with pytest.raises(ValueError, match="multiple of num_heads"):
        TransformerEncoderBlock(3, 8)(tc.target())
    with pytest.raises(ValueError, match="encoder_outputs"):
        TransformerDecoderBlock(2, 8)(tc.target())
    decoder = tc.built_decoder(28, use_cross_attention=False)
    with pytest.raises(ValueError, match="without `encoder_outputs`"):
        decoder(tc.target(), tc.source())
    with pytest.raises(ValueError, match="`cache` and `step`"):
        decoder(tc.target(), cache=decoder.initial_cache(B, T))
    with pytest.raises(ValueError, match="must be built"):
        TransformerDecoderBlock(2, 8).initial_cache(B, T)


def test_config_round_trip():
    checks.check_config_round_trip(
        TransformerEncoderBlock(
            4, 32, key_dim=6, activation="gelu", norm_first=True, dropout=0.1, seed=3
        )
    )
    checks.check_config_round_trip(
        TransformerDecoderBlock(
            2,
            16,
            use_cross_attention=False,
            attention_dropout=0.2,
            feedforward_dropout=0.3,
            layer_norm_epsilon=1e-6,
            use_bias=False,
        )
    )


def translation_model():
    """Embeddings, positions, one encoder and one decoder block, token logits."""
    source_ids = keras.Input((None,), dtype="int32", name="source")
    target_ids = keras.Input((None,), dtype="int32", name="target")
    embedding = keras.layers.Embedding(12, tc.MODEL_DIM, mask_zero=True)
    positions = PositionalEncoding()
    encoded = TransformerEncoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM)(
        positions(embedding(source_ids))
    )
    decoded = TransformerDecoderBlock(tc.HEADS, tc.FEEDFORWARD_DIM, norm_first=True)(
        positions(embedding(target_ids)), encoded
    )
    logits = keras.layers.Dense(12)(decoded)
    return keras.Model({"source": source_ids, "target": target_ids}, logits)


def test_save_and_reload_in_fresh_process(tmp_path):
    data = {
        "source": np.array([[1, 2, 3, 4, 0], [5, 6, 0, 0, 0]], "int32"),
        "target": np.array([[7, 8, 9, 0], [10, 11, 0, 0]], "int32"),
    }
    checks.check_save_and_reload(translation_model(), data, tmp_path)


def test_training_step_reduces_loss():
    keras.utils.set_random_seed(0)
    model = translation_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.RandomState(29)
    data = {
        "source": rng.randint(1, 12, (8, S)).astype("int32"),
        "target": rng.randint(1, 12, (8, T)).astype("int32"),
    }
    labels = rng.randint(1, 12, (8, T))
    before = model.evaluate(data, labels, verbose=0)
    model.train_on_batch(data, labels)
    assert model.evaluate(data, labels, verbose=0) < before
