"""ULMFiT-style fine-tuning pieces of `rnnkit.models.transfer`: layer groups from the
output down, discriminative learning-rate factors, and gradual unfreezing on real
IMDB reviews."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.models.sequence_classifier import (
    build_sequence_classifier,
    compile_sequence_classifier,
    make_text_vectorizer,
)
from rnnkit.models.transfer import (
    GradualUnfreezing,
    discriminative_factors,
    layer_groups,
    settings_in,
)
from rnnkit.optimizers import LayerwiseAdam
from tests.sentiment_support import imdb_sample


def classifier(texts, num_layers=2):
    vectorizer = make_text_vectorizer(texts, vocabulary_size=500)
    return build_sequence_classifier(
        vectorizer, ["neg", "pos"], sequence_length=40, embedding_dim=8,
        cell_type="gru", units=4, num_layers=num_layers, bidirectional=True,
        pooling="mean_max", embedding_dropout=0.0, dropout=0.0,
        recurrent_dropout=0.0, seed=7,
    )  # fmt: skip


@pytest.fixture(scope="module")
def reviews():
    sample = imdb_sample("train", 32)
    return sample.text.to_numpy(), sample.label.to_numpy()


def test_groups_run_from_the_output_down_and_factors_divide_per_group(reviews):
    model = classifier(reviews[0])
    groups = layer_groups(model)
    recurrent = [
        layer for layer in model.layers if isinstance(layer, keras.layers.Bidirectional)
    ]
    assert groups == [
        [model.get_layer("probabilities")],
        [recurrent[1]],
        [recurrent[0]],
        [model.get_layer("embedding")],
    ]
    factors = discriminative_factors(groups, 2.6)
    assert factors == {
        "probabilities": 1.0,
        recurrent[1].path: pytest.approx(1 / 2.6),
        recurrent[0].path: pytest.approx(1 / 2.6**2),
        "embedding": pytest.approx(1 / 2.6**3),
    }
    with pytest.raises(ValueError, match="must be >= 1"):
        discriminative_factors(groups, 0.5)
    dense = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="no recurrent layer"):
        layer_groups(dense)


def test_discriminative_factors_reach_every_variable(reviews):
    model = classifier(reviews[0])
    factors = discriminative_factors(layer_groups(model), 2.0)
    compile_sequence_classifier(model, 1e-3, factors=factors)
    optimizer = model.optimizer
    assert isinstance(optimizer, LayerwiseAdam)
    by_path = {v.path: optimizer.factor_of(v.path) for v in model.trainable_variables}
    assert by_path["embedding/embeddings"] == 0.125
    assert by_path["probabilities/kernel"] == 1.0
    assert sorted(set(by_path.values())) == [0.125, 0.25, 0.5, 1.0]


class WeightSnapshots(keras.callbacks.Callback):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers
        self.snapshots = []

    def snapshot(self):
        return {
            layer.name: [w.copy() for w in layer.get_weights()] for layer in self.layers
        }

    def on_train_begin(self, logs=None):
        self.snapshots.append(self.snapshot())

    def on_epoch_end(self, epoch, logs=None):
        self.snapshots.append(self.snapshot())


def changed(before, after):
    return {
        name
        for name in before
        if any(
            not np.array_equal(a, b)
            for a, b in zip(before[name], after[name], strict=True)
        )
    }


def test_gradual_unfreezing_adds_one_group_per_epoch(reviews):
    texts, labels = reviews
    model = classifier(texts, num_layers=1)
    groups = layer_groups(model)  # output, the bidirectional GRU, the embedding
    compile_sequence_classifier(
        model, 1e-2, factors=discriminative_factors(groups, 2.6)
    )
    snapshots = WeightSnapshots([layer for group in groups for layer in group])
    model.fit(
        texts, labels.reshape(-1, 1).astype("float32"), batch_size=16, epochs=3,
        verbose=0, callbacks=[GradualUnfreezing(), snapshots],
    )  # fmt: skip
    head, recurrent, embedding = (group[0].name for group in groups)
    steps = snapshots.snapshots
    assert changed(steps[0], steps[1]) == {head}
    assert changed(steps[1], steps[2]) == {head, recurrent}
    assert changed(steps[2], steps[3]) == {head, recurrent, embedding}
    assert all(layer.trainable for layer in model.layers)
    # Each variable's Adam step count is the number of batches it was trained on.
    per_epoch = 4  # 64 reviews / 16
    steps_of = {
        v.path.split("/")[0]: int(s.numpy())
        for v, s in zip(
            model.optimizer._trainable_variables,
            model.optimizer._variable_steps,
            strict=True,
        )
    }
    assert steps_of == {
        head: 3 * per_epoch,
        recurrent: 2 * per_epoch,
        embedding: per_epoch,
    }


def test_gradual_unfreezing_needs_groups():
    with pytest.raises(ValueError, match="at least one layer group"):
        GradualUnfreezing([])


def test_settings_in_reads_dotted_keys_with_defaults():
    tables = {"data": {"level": "word"}, "model": {"units": 64}}
    assert settings_in(
        tables, {"data.level": "char", "data.level.or": 1, "model.units": 7, "x.y": 0}
    ) == {"data.level": "word", "data.level.or": 1, "model.units": 64, "x.y": 0}
    assert settings_in({}, {"data.reverse": False}) == {"data.reverse": False}
