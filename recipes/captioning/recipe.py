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

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rnnkit.recipe import (
    ConfigError,
    DataConfig,
    DataError,
    EvaluationConfig,
    Metrics,
    ModelConfig,
    Recipe,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import numpy as np
    from rnnkit_recipes.captioning.data import CaptionData

    from rnnkit.decoding import SearchResult

log = logging.getLogger("rnnkit")


@dataclasses.dataclass
class CaptioningDataConfig(DataConfig):
    format: str = field(
        "flickr8k",
        help="flickr8k: a Flickr8k folder (data.path unset downloads Flickr8k); coco: "
        "a COCO-style captions JSON ({split} in data.path: one file per split).",
        choices=("flickr8k", "coco"),
    )
    images: str | None = field(
        None,
        help="Image folder or zip (relative to a flickr8k data.path); none: the zip "
        "or image folder found in data.path (coco: the JSON's folder).",
    )
    cache_dir: str | None = field(
        None,
        help="Folder of cached image features of a frozen encoder (none: "
        "$RNNKIT_DATA_DIR/captioning_features, default ~/.rnnkit/datasets/...).",
    )
    train_split: str = field("train2014", help="coco: {split} of the training file.")
    validation_split: str = field(
        "val2014", help="coco: {split} of the validation file."
    )
    test_split: str = field("test2014", help="coco: {split} of the test file.")
    validation_fraction: float = field(
        0.05,
        help="coco, one file: share of images for validation.",
        above=0.0,
        below=0.5,
    )
    test_fraction: float = field(
        0.05, help="coco, one file: share of images for testing.", above=0.0, below=0.5
    )
    split_seed: int = field(0, help="coco, one file: seed of the split.", at_least=0)
    limit: int = field(
        0,
        help="Keep at most this many images per split (0 keeps all); quick trials.",
        at_least=0,
    )
    min_frequency: int = field(
        5, help="Words seen fewer times in training become <unk>.", at_least=1
    )
    max_length: int = field(
        20,
        help="Words per caption: longer training captions are cut, generated "
        "captions stop there.",
        at_least=1,
    )
    captions_per_image: int = field(
        5,
        help="Captions per image in a training example (fewer are repeated).",
        at_least=1,
    )


@dataclasses.dataclass
class CaptioningModelConfig(ModelConfig):
    encoder: str = field(
        "mobilenet_v2",
        help="Image encoder: a keras.applications backbone, or small_cnn (four "
        "conv blocks, for training from scratch on a CPU).",
        choices=("mobilenet_v2", "efficientnet_b0", "resnet50", "small_cnn"),
    )
    encoder_weights: str = field(
        "imagenet",
        help="imagenet (downloaded by keras.applications), none (random), or the "
        "path of a weights file.",
    )
    encoder_trainable: bool = field(
        False,
        help="Train the encoder with the decoder (false: frozen, features cached).",
    )
    encoder_learning_rate: float = field(
        0.1,
        help="A trainable encoder's learning rate as a share of train.learning_rate "
        "(1 for an encoder trained from scratch).",
        above=0.0,
        at_most=1.0,
    )
    image_size: int = field(
        224, help="Images are resized to this many pixels square.", at_least=32
    )
    encoder_width: int = field(
        32,
        help="small_cnn: filters of the first block (doubled per block).",
        at_least=1,
    )
    cell_type: str = field("lstm", help="Decoder cell.", choices=("lstm", "gru"))
    embedding_dim: int = field(256, help="Size of the word embeddings.", at_least=1)
    units: int = field(512, help="Units of the decoder cell.", at_least=1)
    attention: str = field(
        "bahdanau",
        help="Attention over the annotation vectors (none: their mean at every "
        "step, the Show-and-Tell ablation).",
        choices=("bahdanau", "none"),
    )
    attention_units: int | None = field(
        None, help="Size of the Bahdanau scoring layer (none: model.units).", at_least=1
    )
    attention_penalty: float = field(
        1.0,
        help="lambda of the doubly stochastic attention regulariser "
        "lambda * sum_i (1 - sum_t alpha_ti)^2 (per token, like the loss).",
        at_least=0.0,
    )
    gating: bool = field(True, help="Scale the context by a learned gate beta_t.")
    dropout: float = field(
        0.3, help="Dropout on embeddings and deep output.", at_least=0.0, below=1.0
    )


@dataclasses.dataclass
class CaptioningTrainConfig(TrainConfig):
    clipnorm: float = field(
        5.0, help="Clip each gradient to this norm (0: no clip).", at_least=0.0
    )


@dataclasses.dataclass
class CaptioningEvaluationConfig(EvaluationConfig):
    beam_width: int = field(
        3, help="Hypotheses kept per image by beam search.", at_least=1
    )
    n_best: int = field(1, help="Captions printed per image by predict.", at_least=1)
    length_penalty: float = field(
        0.6, help="GNMT length-penalty alpha of beam search (0: none).", at_least=0.0
    )
    decode_batch_size: int = field(64, help="Images captioned together.", at_least=1)
    overlays: int = field(
        3, help="Test images drawn with their attention maps in plots/.", at_least=0
    )


@dataclasses.dataclass
class CaptioningConfig(RecipeConfig):
    data: CaptioningDataConfig = section(CaptioningDataConfig, "Images and captions.")
    model: CaptioningModelConfig = section(
        CaptioningModelConfig, "The encoder and the attentive decoder."
    )
    train: CaptioningTrainConfig = section(
        CaptioningTrainConfig,
        "The training loop.",
        epochs=20,
        batch_size=32,
        patience=3,
    )
    evaluation: CaptioningEvaluationConfig = section(
        CaptioningEvaluationConfig, "Decoding and scoring."
    )


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
                model.encoder, model_config.encoder, model_config.encoder_weights
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
                    "attention_penalty", [0.0, 0.3, 1.0, 3.0]
                ),
                "train.learning_rate": hp.Float(
                    "learning_rate", 3e-4, 3e-3, sampling="log"
                ),
            }
        )

    def evaluate(
        self, model: keras.Model, data: CaptionData, config: CaptioningConfig
    ) -> Metrics:
        from rnnkit_recipes.captioning.scores import (
            bleu_scores,
            consensus_index,
            nearest_neighbours,
            pooled_features,
        )

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
        from rnnkit_recipes.captioning.data import decode_images

        paths = image_paths(inputs)
        _, pixels, failures = decode_images(
            lambda name: Path(name).read_bytes(),
            [str(path) for path in paths],
            model.image_size,
        )
        if failures:
            name, reason = next(iter(failures.items()))
            raise DataError(f"{name}: not an image that can be read ({reason})")
        n_best = config.evaluation.n_best
        result = search(
            model,
            pixels,
            config,
            beam_width=max(config.evaluation.beam_width, n_best),
            n_best=n_best,
        )
        lines = []
        for row, path in enumerate(paths):
            texts = [" ".join(_words(model, tokens)) for tokens in result.tokens[row]]
            if n_best == 1:
                lines.append(f"{path}: {texts[0]}")
                continue
            lines.append(str(path))
            for rank, (text, score) in enumerate(
                zip(texts, result.scores[row], strict=True), start=1
            ):
                if np.isfinite(score):
                    lines.append(f"  {rank}. [{score:.3f}] {text}")
        return lines

    def write_plots(
        self,
        model: keras.Model,
        data: CaptionData,
        config: CaptioningConfig,
        plot_dir: Path,
    ) -> None:
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


def _check(config: CaptioningConfig) -> None:
    model = config.model
    if model.encoder == "small_cnn" and model.encoder_weights == "imagenet":
        raise ConfigError(
            "model.encoder=small_cnn has no ImageNet weights; use --set "
            "model.encoder_weights=none (train it from scratch with "
            "model.encoder_trainable=true) or a local weights file"
        )


# -- Decoding ------------------------------------------------------------------------


def _words(model: keras.Model, tokens) -> list[str]:
    from rnnkit_recipes.captioning.data import Vocabulary

    return Vocabulary(model.tokens).decode(tokens)


def search(
    model: keras.Model,
    inputs: np.ndarray,
    config: CaptioningConfig,
    beam_width: int,
    n_best: int = 1,
) -> SearchResult:
    """Greedy (beam_width 1) or beam search over images or cached features, batched.

    Generated captions stop after `data.max_length` words and the end token.
    """
    import numpy as np
    from rnnkit_recipes.captioning.data import END_ID, PAD_ID, START_ID

    from rnnkit import decoding

    evaluation = config.evaluation
    common = dict(
        start_id=START_ID,
        end_id=END_ID,
        pad_id=PAD_ID,
        suppress_ids=(PAD_ID, START_ID),
        max_length=config.data.max_length + 1,
    )
    parts = []
    for start in range(0, len(inputs), evaluation.decode_batch_size):
        batch = np.asarray(
            inputs[start : start + evaluation.decode_batch_size], "float32"
        )
        if beam_width == 1:
            parts.append(decoding.greedy_search(model, batch, **common))
        else:
            parts.append(
                decoding.beam_search(
                    model,
                    batch,
                    beam_width=beam_width,
                    n_best=n_best,
                    length_penalty_alpha=evaluation.length_penalty,
                    **common,
                )
            )
    return decoding.SearchResult(
        **{
            f.name: np.concatenate([getattr(part, f.name) for part in parts])
            for f in dataclasses.fields(decoding.SearchResult)
        }
    )


def caption_texts(
    model: keras.Model, inputs: np.ndarray, config: CaptioningConfig, beam_width: int
) -> list[str]:
    """The best caption of every image, as space-separated words."""
    result = search(model, inputs, config, beam_width)
    return [" ".join(_words(model, tokens[0])) for tokens in result.tokens]


def image_paths(inputs: Sequence[str]) -> list[Path]:
    """Image files from the command line; a folder gives its images, sorted."""
    from rnnkit_recipes.captioning.data import _IMAGE_SUFFIXES

    paths: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES
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
