"""The configuration of the captioning recipe.

The typed configuration of the recipe: one dataclass per section, each field with its
default and help text; the command line's options come from the same fields.
"""

from __future__ import annotations

import dataclasses

from rnnkit.recipe import (
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    RecipeConfig,
    TrainConfig,
    field,
    section,
)
from rnnkit.registry import recurrent_names


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
        help="Image encoder: a keras.applications backbone (mobilenet: MobileNet "
        "v1, width model.encoder_alpha), or small_cnn (four conv blocks, for "
        "training from scratch on a CPU).",
        choices=(
            "mobilenet",
            "mobilenet_v2",
            "efficientnet_b0",
            "resnet50",
            "small_cnn",
        ),
    )
    encoder_alpha: float = field(
        1.0,
        help="mobilenet: width multiplier alpha (ImageNet weights exist for 0.25, "
        "0.5, 0.75 and 1.0).",
        above=0.0,
        at_most=1.0,
    )
    encoder_weights: str = field(
        "imagenet",
        help="imagenet (downloaded by keras.applications), none (random), or the "
        "path of a weights file (.h5 in the Keras layout, or .weights.h5).",
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
    cell_type: str = field("lstm", help="Decoder cell.", choices=recurrent_names())
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
