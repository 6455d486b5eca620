"""rnnkit.models.sequence_classifier: raw strings in, probabilities out."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from rnnkit.data.text import clean_text
from rnnkit.models import sequence_classifier as sc
from tests import preloaded
from tests.sentiment_support import imdb_sample


@pytest.fixture(scope="module")
def reviews():
    sample = imdb_sample("train", 150)
    texts = np.array([clean_text(review) for review in sample["text"]], dtype=object)
    return texts, sample["label"].to_numpy()


@pytest.fixture(scope="module")
def vectorizer(reviews):
    return sc.make_text_vectorizer(reviews[0], vocabulary_size=2000)


@pytest.mark.parametrize(
    ("keep", "expected"),
    [("first", [[1, 2, 3], [6, 7, 0]]), ("last", [[3, 4, 5], [6, 7, 0]])],
)
def test_truncate_sequence_keeps_first_or_last_tokens(keep, expected):
    token_ids = np.array([[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]])
    out = sc.TruncateSequence(3, keep=keep)(token_ids)
    assert keras.ops.convert_to_numpy(out).tolist() == expected


def test_truncate_sequence_leaves_short_batches_short_and_never_empty():
    short = sc.TruncateSequence(400)(np.array([[4, 5, 0], [0, 0, 0]]))
    # An empty text becomes one out-of-vocabulary token (id 1), never all padding.
    assert keras.ops.convert_to_numpy(short).tolist() == [[4, 5, 0, 0], [1, 0, 0, 0]]
    empty = sc.TruncateSequence(400, keep="last")(np.zeros((2, 0), dtype="int64"))
    assert keras.ops.convert_to_numpy(empty).tolist() == [[1], [1]]


def test_masked_max_pooling_matches_numpy_and_skips_padding():
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(3, 5, 4)).astype("float32")
    inputs[0, 3:] = 100.0  # padding that an unmasked maximum would pick
    mask = np.array(
        [[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=bool
    )  # right-padded, left-padded, empty
    layer = sc.MaskedGlobalMaxPooling1D()
    variable = tf.Variable(inputs)
    with tf.GradientTape() as tape:
        out = layer(variable, mask=tf.constant(mask))
        loss = tf.reduce_sum(out * np.arange(1, 5, dtype="float32"))
    expected = np.stack(
        [inputs[0, :3].max(axis=0), inputs[1, 2:].max(axis=0), np.zeros(4)]
    )
    np.testing.assert_allclose(out.numpy(), expected, rtol=0, atol=0)
    # The gradient reaches exactly the arg-max step of each feature, nothing else.
    expected_gradient = np.zeros_like(inputs)
    for row, steps in ((0, range(0, 3)), (1, range(2, 5))):
        winners = np.array(list(steps))[inputs[row, list(steps)].argmax(axis=0)]
        expected_gradient[row, winners, np.arange(4)] = np.arange(1, 5)
    np.testing.assert_array_equal(
        tape.gradient(loss, variable).numpy(), expected_gradient
    )
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(layer(inputs)), inputs.max(axis=1)
    )


@pytest.mark.parametrize("pooling", ["last", "mean", "max", "mean_max", "concat"])
def test_texts_without_known_tokens_give_finite_probabilities(vectorizer, pooling):
    model = sc.build_sequence_classifier(
        vectorizer, ["negative", "positive"], units=4, embedding_dim=4, pooling=pooling
    )
    probabilities = sc.class_probabilities(model, [",", "", "zzzqqq"], verbose=0)
    assert np.isfinite(probabilities).all()


@pytest.mark.parametrize(
    ("cell_type", "bidirectional"), [("gru", True), ("lstm", True), ("lstm", False)]
)
def test_concat_pooling_is_the_final_state_the_max_and_the_mean(
    vectorizer, reviews, cell_type, bidirectional
):
    """ULMFiT's concat pooling, [h_T, maxpool(H), meanpool(H)], checked in numpy
    against the recurrent layer's own outputs H over the real (unmasked) steps of
    texts of different lengths: h_T is the forward output at the last real step and
    the backward output at the first."""
    model = sc.build_sequence_classifier(
        vectorizer,
        ["negative", "positive"],
        cell_type=cell_type,
        units=5,
        embedding_dim=6,
        sequence_length=40,
        bidirectional=bidirectional,
        pooling="concat",
        seed=3,
    )
    name = "bidirectional_1" if bidirectional else f"{cell_type}_1"
    recurrent = model.get_layer(name)
    probe = keras.Model(
        model.input,
        [
            model.get_layer("truncate").output,
            recurrent.output[0],
            model.get_layer("concat_pooling").output,
        ],
    )
    texts = [str(text) for text in reviews[0][:3]] + ["a fine film", "dull"]
    token_ids, outputs, pooled = (
        keras.ops.convert_to_numpy(x) for x in probe(tf.constant(texts))
    )
    units = 5
    for row in range(len(texts)):
        length = int((token_ids[row] != 0).sum())
        assert 0 < length <= 40
        real = outputs[row, :length]
        final = real[-1, :units]
        if bidirectional:
            final = np.concatenate([final, real[0, units:]])
        expected = np.concatenate([final, real.max(axis=0), real.mean(axis=0)])
        np.testing.assert_allclose(pooled[row], expected, rtol=1e-5, atol=1e-6)
    # Truncated reviews and short texts: padding was skipped, not pooled.
    lengths = [int((ids != 0).sum()) for ids in token_ids]
    assert max(lengths) == 40 and min(lengths) <= 3


@pytest.mark.parametrize(
    ("argument", "value"),
    [("max_length", 0), ("keep", "middle")],
)
def test_truncate_sequence_validates_arguments(argument, value):
    arguments = {"max_length": 10, argument: value}
    with pytest.raises(ValueError, match=f"`{argument}`"):
        sc.TruncateSequence(**arguments)


@pytest.mark.parametrize(
    ("argument", "value"),
    [("cell_type", "transformer"), ("pooling", "attention"), ("units", 0)],
)
def test_builder_validates_arguments(vectorizer, argument, value):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        sc.build_sequence_classifier(vectorizer, ["a", "b"], **{argument: value})


def test_head_needs_two_distinct_class_names():
    with pytest.raises(ValueError, match="`class_names`"):
        sc.ClassificationHead(["only"])
    with pytest.raises(ValueError, match="`class_names`"):
        sc.ClassificationHead(["same", "same"])


@pytest.mark.parametrize("cell_type", ["lstm", "gru", "simple_rnn"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_binary_classifier_shapes_and_rnnkit_layers(
    vectorizer, reviews, cell_type, bidirectional
):
    model = sc.build_sequence_classifier(
        vectorizer,
        ["negative", "positive"],
        cell_type=cell_type,
        units=8,
        num_layers=2,
        embedding_dim=8,
        bidirectional=bidirectional,
        seed=0,
    )
    probabilities = model(tf.constant(reviews[0][:4].astype(str)))
    assert probabilities.shape == (4, 1)
    recurrent = [
        layer.forward_layer if bidirectional else layer
        for layer in model.layers
        if layer.name.startswith("bidirectional" if bidirectional else cell_type)
    ]
    assert len(recurrent) == 2
    assert all(
        type(layer).__module__.startswith("rnnkit.layers") for layer in recurrent
    )


def test_padding_does_not_change_a_prediction(vectorizer, reviews):
    # The same review alone and beside a much longer one: the masked padding and the
    # per-batch width must not move its probability.
    model = sc.build_sequence_classifier(
        vectorizer, ["negative", "positive"], units=8, embedding_dim=8, seed=1
    )
    short, long = sorted(reviews[0], key=len)[0], sorted(reviews[0], key=len)[-1]
    alone = sc.class_probabilities(model, [short], verbose=0)
    padded = sc.class_probabilities(model, [short, long], verbose=0)
    np.testing.assert_allclose(alone[0], padded[0], atol=1e-5)


def test_multiclass_head_trains_with_sparse_labels(vectorizer, reviews):
    texts, _ = reviews
    labels = np.arange(len(texts)) % 3
    model = sc.compile_sequence_classifier(
        sc.build_sequence_classifier(
            vectorizer, ["a", "b", "c"], units=4, embedding_dim=4, seed=0
        ),
        learning_rate=1e-2,
    )
    history = model.fit(
        tf.constant(texts[:64].astype(str)), labels[:64], epochs=2, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()
    probabilities = sc.class_probabilities(model, texts[:5], verbose=0)
    assert probabilities.shape == (5, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_training_reduces_the_loss_and_learns_the_reviews(vectorizer, reviews):
    texts, labels = reviews
    model = sc.compile_sequence_classifier(
        sc.build_sequence_classifier(
            vectorizer,
            ["negative", "positive"],
            cell_type="gru",
            units=16,
            embedding_dim=16,
            sequence_length=100,
            pooling="mean",
            seed=0,
        ),
        learning_rate=1e-2,
    )
    inputs = tf.constant(texts.astype(str))
    history = model.fit(
        inputs, labels.reshape(-1, 1).astype("float32"), epochs=4, verbose=0
    )
    losses = history.history["loss"]
    assert losses[-1] < losses[0] - 0.1
    assert history.history["accuracy"][-1] > 0.8


@pytest.mark.parametrize("pooling", ["mean_max", "concat"])
def test_save_and_reload_in_safe_mode_in_a_fresh_process(
    vectorizer, reviews, tmp_path, pooling
):
    model = sc.build_sequence_classifier(
        vectorizer,
        ["negative", "positive"],
        units=8,
        embedding_dim=8,
        keep="last",
        sequence_length=50,
        pooling=pooling,
        seed=2,
    )
    path = tmp_path / "classifier.keras"
    model.save(path)
    texts = [str(text) for text in reviews[0][:3]] + [
        "<br />an absolutely wonderful film"
    ]
    expected = sc.class_probabilities(model, texts, verbose=0)
    script = (
        "import json, sys, keras, numpy as np\n"
        "import rnnkit.models\n"
        "from rnnkit.models.sequence_classifier import class_probabilities, "
        "class_names_of\n"
        "model = keras.saving.load_model(sys.argv[1], safe_mode=True)\n"
        "texts = json.loads(sys.argv[2])\n"
        "print(json.dumps([class_names_of(model), "
        "class_probabilities(model, texts, verbose=0).tolist()]))\n"
    )
    result = preloaded.run(["-c", script, str(path), json.dumps(texts)], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    names, probabilities = json.loads(result.stdout.strip().splitlines()[-1])
    assert names == ["negative", "positive"]
    np.testing.assert_allclose(probabilities, expected, atol=1e-6)
