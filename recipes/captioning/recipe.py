"""Captioning: a CNN encoder and an attentive RNN decoder (Show, Attend and Tell).

`rnnkit run captioning` trains `rnnkit.models.ImageCaptioner` on Flickr8k (or COCO-style
captions), then captions the test images with greedy and beam search and scores them
with sacreBLEU, BLEU-1 to BLEU-4 against all reference captions of each image. Baselines
on the same test images: the "consensus" caption (the training caption with the
highest corpus BLEU against all other training captions, given to every image) and the
nearest neighbour (the consensus caption among the captions of the training image
whose pooled encoder features are most similar by cosine).

The module stays light: TensorFlow, Keras and sacrebleu are imported inside the
methods, because `rnnkit list` imports every recipe module to read its summary.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rnnkit_recipes.captioning.config import CaptioningConfig

from rnnkit.recipe import (
    ConfigError,
    DataError,
    Metrics,
    Recipe,
)

if TYPE_CHECKING:
    import keras
    import keras_tuner
    from rnnkit_recipes.captioning.data import CaptionData


log = logging.getLogger("rnnkit")


class CaptioningRecipe(Recipe):
    """CNN encoder + attentive RNN decoder captioning images."""

    name = "captioning"
    summary = (
        "Caption images (Flickr8k, COCO-style): CNN encoder, rnnkit LSTM/GRU decoder "
        "with Bahdanau attention, beam search, BLEU-1..4"
    )
    Config = CaptioningConfig
    # The caption likelihood: the loss also holds the attention regulariser, whose
    # weight the search space varies.
    objective = "val_crossentropy"
    predict_options: ClassVar[dict[str, str]] = {
        "beam": "evaluation.beam_width",
        "n-best": "evaluation.n_best",
    }

    def check_config(self, config: CaptioningConfig) -> None:
        super().check_config(config)
        _check(config)

    def split_keys_of(self, config: CaptioningConfig) -> tuple[str, ...]:
        from rnnkit_recipes.captioning import sources

        return () if sources.splits_given(config) else self.split_keys

    def load_data(self, config: CaptioningConfig) -> CaptionData:
        from rnnkit_recipes.captioning import data

        _check(config)
        return data.load(config)

    def build_model(self, config: CaptioningConfig, data: CaptionData) -> keras.Model:
        import keras
        from rnnkit_recipes.captioning.data import PAD_ID
        from rnnkit_recipes.captioning.features import load_encoder_weights

        from rnnkit.models.image_captioner import (
            EncoderScaledAdam,
            ImageCaptioner,
            TokenCrossEntropy,
        )

        _check(config)
        model_config = config.model
        model = ImageCaptioner(
            data.vocabulary,
            encoder=model_config.encoder,
            image_size=model_config.image_size,
            encoder_width=model_config.encoder_width,
            encoder_alpha=model_config.encoder_alpha,
            encoder_trainable=model_config.encoder_trainable,
            embedding_dim=model_config.embedding_dim,
            units=model_config.units,
            cell_type=model_config.cell_type,
            attention=model_config.attention,
            attention_units=model_config.attention_units,
            attention_penalty=model_config.attention_penalty,
            gating=model_config.gating,
            dropout=model_config.dropout,
            seed=config.train.seed,
        )
        model.build()
        if data.encoder_weights is not None:
            # The very encoder whose features were cached.
            model.encoder.set_weights(data.encoder_weights)
        else:
            load_encoder_weights(
                model.encoder,
                model_config.encoder,
                model_config.encoder_weights,
                model_config.encoder_alpha,
            )
        optimizer = EncoderScaledAdam(
            encoder_rate=model_config.encoder_learning_rate,
            learning_rate=config.train.learning_rate,
            clipnorm=config.train.clipnorm or None,
        )
        optimizer.scale_variables(model.encoder.trainable_variables)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, ignore_class=PAD_ID
            ),
            metrics=[TokenCrossEntropy(PAD_ID)],
        )
        return model

    def search_space(
        self, hp: keras_tuner.HyperParameters, config: CaptioningConfig
    ) -> CaptioningConfig:
        return config.with_values(
            {
                "model.units": hp.Choice("units", [128, 256, 512]),
                "model.embedding_dim": hp.Choice("embedding_dim", [64, 128, 256]),
                "model.attention_units": hp.Choice("attention_units", [64, 128, 256]),
                "model.dropout": hp.Choice("dropout", [0.0, 0.3, 0.5]),
                "model.attention_penalty": hp.Choice(
                    "attention_penalty", [0.0, 0.1, 0.3, 1.0]
                ),
                "train.learning_rate": hp.Float(
                    "learning_rate", 3e-4, 3e-3, sampling="log"
                ),
            }
        )

    def evaluate(
        self, model: keras.Model, data: CaptionData, config: CaptioningConfig
    ) -> Metrics:
        from rnnkit_recipes.captioning.baselines import (
            bleu_scores,
            consensus_index,
            nearest_neighbours,
            pooled_features,
        )
        from rnnkit_recipes.captioning.decode import caption_texts

        test = data.splits["test"]
        references = [[" ".join(c) for c in per_image] for per_image in test.captions]
        beam = caption_texts(model, test.inputs, config, config.evaluation.beam_width)
        greedy = caption_texts(model, test.inputs, config, 1)
        model_row = {
            **bleu_scores(beam, references),
            **bleu_scores(greedy, references, "_greedy"),
        }
        train = data.splits["train"]
        flat = [caption for per_image in train.captions for caption in per_image]
        consensus = " ".join(flat[consensus_index(flat)])
        log.info("consensus caption: %s", consensus)
        train_pooled = pooled_features(model, train.inputs, config)
        test_pooled = pooled_features(model, test.inputs, config)
        nearest = nearest_neighbours(test_pooled, train_pooled)
        per_image_consensus = [
            " ".join(captions[consensus_index(captions)]) for captions in train.captions
        ]
        neighbour_captions = [per_image_consensus[i] for i in nearest]
        for name, caption, reference in zip(
            test.names[:3], beam[:3], references[:3], strict=False
        ):
            log.info(
                "  %s\n    model:     %s\n    reference: %s",
                name,
                caption,
                reference[0],
            )
        table = {
            "model": model_row,
            "consensus": bleu_scores([consensus] * len(references), references),
            "nearest_neighbour": bleu_scores(neighbour_captions, references),
        }
        for baseline in ("consensus", "nearest_neighbour"):
            if model_row["bleu4"] <= table[baseline]["bleu4"]:
                log.warning(
                    "the model's BLEU-4 (%.2f) does not beat the %s baseline's (%.2f)",
                    model_row["bleu4"],
                    baseline,
                    table[baseline]["bleu4"],
                )
        return table

    def predict(
        self, model: keras.Model, inputs: Sequence[str], config: CaptioningConfig
    ) -> list[str]:
        import numpy as np
        from rnnkit_recipes.captioning.decode import caption_images

        paths = image_paths(inputs)
        result, captions = caption_images(
            model,
            lambda name: Path(name).read_bytes(),
            [str(path) for path in paths],
            config,
            "{name}: not an image that can be read ({reason})",
        )
        lines = []
        for path, texts, scores in zip(paths, captions, result.scores, strict=True):
            if config.evaluation.n_best == 1:
                lines.append(f"{path}: {texts[0]}")
                continue
            lines.append(str(path))
            for rank, (text, score) in enumerate(
                zip(texts, scores, strict=True), start=1
            ):
                if np.isfinite(score):
                    lines.append(f"  {rank}. [{score:.3f}] {text}")
        return lines

    def predict_records(
        self,
        model: keras.Model,
        inputs: Sequence[Any],
        config: CaptioningConfig,
        calls: dict | None = None,
    ) -> list[dict[str, Any]]:
        from rnnkit_recipes.captioning.serve import records

        if calls is not None:
            raise DataError(
                "the captioning recipe answers /predict from the Keras runtime; "
                "/v1/models/NAME:predict takes the exported model's inputs"
            )
        return records(model, inputs, config)

    def write_plots(
        self,
        model: keras.Model,
        data: CaptionData,
        config: CaptioningConfig,
        plot_dir: Path,
    ) -> None:
        from rnnkit_recipes.captioning.decode import search

        from rnnkit import plots

        count = min(config.evaluation.overlays, len(data.splits["test"].names))
        if model.attention == "none" or count == 0:
            return
        test = data.splits["test"]
        result = search(
            model, test.inputs[:count], config, beam_width=config.evaluation.beam_width
        )
        side = int(round(model.num_locations**0.5))
        for row in range(count):
            length = int(result.lengths[row, 0])
            words = [model.tokens[i] for i in result.tokens[row, 0, :length]]
            weights = result.attention[row, :length].reshape(length, side, -1)
            plots.attention_overlay(
                data.test_images[row],
                weights,
                words,
                plot_dir / f"attention_{row + 1}.png",
                title=f"{test.names[row]}, beam search "
                f"(width {config.evaluation.beam_width})",
                references=[" ".join(c) for c in test.captions[row]],
            )

    def export_plan(self, model: keras.Model, config: CaptioningConfig, format: str):
        from rnnkit_recipes.captioning.export import export_plan

        return export_plan(model, config, format)


def _check(config: CaptioningConfig) -> None:
    model = config.model
    if model.encoder == "small_cnn" and model.encoder_weights == "imagenet":
        raise ConfigError(
            "model.encoder=small_cnn has no ImageNet weights; use --set "
            "model.encoder_weights=none (train it from scratch with "
            "model.encoder_trainable=true) or a local weights file"
        )


def image_paths(inputs: Sequence[str]) -> list[Path]:
    """Image files from the command line; a folder gives its images, sorted."""
    from rnnkit_recipes.captioning.images import IMAGE_SUFFIXES

    paths: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES
            )
            if not found:
                raise DataError(f"{path}: a folder without .jpg/.jpeg/.png images")
            paths.extend(found)
        elif path.is_file():
            paths.append(path)
        else:
            raise DataError(f"{item}: no such image file or folder")
    if not paths:
        raise DataError("give an image file (or a folder of images) to caption")
    return paths
