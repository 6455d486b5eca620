"""The captioning recipe's images: the MobileNet v1 encoder and the shared ImageNet
weights file, the content-keyed on-disk store of features and decoded pixels, and the
checks on COCO splits and ambiguous image names; on real Flickr8k images."""

from __future__ import annotations

import json
import zipfile

import h5py
import keras
import numpy as np
import pytest
from rnnkit_recipes.captioning import features, store
from rnnkit_recipes.captioning.images import ImageSource, decode, decode_images
from rnnkit_recipes.captioning.recipe import CaptioningConfig, CaptioningRecipe
from rnnkit_recipes.captioning.sources import read_flickr8k_captions

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError, DataError
from rnnkit.models.image_encoder import image_encoder
from tests.cli_support import Messages, error_line, invoke
from tests.recipes.test_captioning import (
    FLICKR8K,
    IMAGE_ZIP,
    SMOKE_CONFIG,
    config_for,
    real_images,
    write_flickr_folder,
)
from tests.shared_data import require
from tests.stock_support import ROOT

WEIGHTS = FLICKR8K / "weights"
MOBILENET_CONFIG = ROOT / "recipes/captioning/configs/flickr8k_mobilenet.toml"


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "rnnkit-data"))


def image_bytes(count: int) -> list[bytes]:
    """The bytes of the first `count` real training images of the shared zip."""
    require(IMAGE_ZIP)
    with zipfile.ZipFile(IMAGE_ZIP) as archive:
        return [
            archive.read(f"flickr8k_images_256/{name}")
            for name in real_images(count, "Flickr_8k.trainImages.txt")
        ]


def pixels_of(content: bytes, size: int = 32) -> np.ndarray:
    result = decode(content, size)
    assert not isinstance(result, str), result
    return result


def fill_pixels(row_store, folder, names, size=32):
    return features.fill(row_store, ImageSource(folder), names, size, lambda p: p)


# -- The MobileNet v1 encoder and its weights file ---------------------------------


def test_mobilenet_loads_the_shared_imagenet_weights():
    path = require(WEIGHTS / "mobilenet_7_5_224_tf_no_top.h5")
    encoder = image_encoder("mobilenet", 224, alpha=0.75)
    features.load_encoder_weights(encoder, "mobilenet", str(path), 0.75)
    backbone = encoder.get_layer("mobilenet_0.75_224")
    with h5py.File(path, "r") as stored:
        for layer, weight, name in (
            ("conv1", "kernel", "kernel"),
            ("conv_dw_7", "kernel", "depthwise_kernel"),
            ("conv_pw_13_bn", "moving_variance", "moving_variance"),
        ):
            np.testing.assert_array_equal(
                keras.ops.convert_to_numpy(getattr(backbone.get_layer(layer), weight)),
                stored[f"{layer}/{layer}/{name}:0"][()],
            )
    # Against Keras' own MobileNet built from the same file, with its own
    # preprocess_input: the encoder scales pixels to [-1, 1] as MobileNet v1 expects.
    pixels = np.stack([pixels_of(b, 224) for b in image_bytes(2)])
    reference = keras.applications.MobileNet(
        alpha=0.75, include_top=False, weights=str(path), input_shape=(224, 224, 3)
    )
    expected = reference(
        keras.applications.mobilenet.preprocess_input(pixels.astype("float32"))
    )
    got = keras.ops.convert_to_numpy(encoder(pixels))
    assert got.shape == (2, 49, 768)
    np.testing.assert_allclose(
        got, np.reshape(expected, (2, 49, 768)), rtol=1e-4, atol=1e-4
    )
    random_features = keras.ops.convert_to_numpy(
        image_encoder("mobilenet", 224, alpha=0.75)(pixels)
    )
    assert not np.allclose(random_features, got, atol=0.1)
    with pytest.raises(
        ConfigError, match=r"does not fit model.encoder=mobilenet, alpha 0.75"
    ):
        features.load_encoder_weights(
            encoder, "mobilenet", str(WEIGHTS / "mobilenet_2_5_224_tf_no_top.h5"), 0.75
        )


def test_mobilenet_config_caches_features_equal_to_the_encoder_run_directly(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository root
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(3, 2, 2), missing=(0, 0, 0)
    )
    config = config_lib.resolve(
        CaptioningConfig,
        MOBILENET_CONFIG,
        {"data.path": str(folder), "data.cache_dir": str(tmp_path / "cache")},
    )
    data = CaptioningRecipe().load_data(config)
    train = data.splits["train"]
    assert train.inputs.shape == (3, 49, 768)  # 7x7 grid of 768 channels at 224 px
    (cache,) = (tmp_path / "cache").iterdir()
    assert cache.name.startswith("mobilenet-alpha0.75-224px-")
    encoder = features.build_encoder(config)
    pixels = decode_images(ImageSource(folder / "Images").read, train.names, 224)[1]
    np.testing.assert_allclose(
        train.inputs[:].astype("float32"),
        encoder.predict(pixels, verbose=0),
        rtol=1e-2,
        atol=1e-2,  # float16 storage
    )


# -- The content-keyed store -----------------------------------------------------------


def test_frozen_encoder_features_are_cached_by_content(tmp_path):
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(6, 3, 3), missing=(0, 0, 0)
    )
    config = config_for(
        folder,
        **{"model.encoder_trainable": False, "data.cache_dir": str(tmp_path / "cache")},
    )
    loaded = []
    for _ in range(2):
        keras.utils.set_random_seed(5)  # the same random encoder both times
        with Messages() as messages:
            loaded.append(CaptioningRecipe().load_data(config))
        loaded[-1].messages = messages
    first, second = loaded
    (cache,) = (tmp_path / "cache").iterdir()
    assert cache.name.startswith("small_cnn-64px-") and cache.name.endswith("-v2")
    keys = [k for f in cache.glob("*.keys") for k in f.read_text().split()]
    assert len(keys) == len(set(keys)) == 12
    computed = [m for m in first.messages if m.startswith("computing ")]
    assert [m.split()[1] for m in computed] == ["6", "3", "3"]  # train, val, test
    assert not any(m.startswith("computing ") for m in second.messages)
    assert first.input_key == "features"
    train = first.splits["train"].inputs
    assert train.shape == (6, 16, 64) and train.dtype == np.float16  # 4x4 x 8*8
    np.testing.assert_array_equal(np.asarray(train), second.splits["train"].inputs)
    # The cached vectors are the encoder's own output (stored as float16), in the
    # order of the split, and the batches carry them.
    encoder = features.build_encoder(config)
    encoder.set_weights(first.encoder_weights)
    pixels = decode_images(
        ImageSource(folder / "Images").read,
        first.splits["train"].names,
        64,
    )[1]
    direct = encoder.predict(pixels, verbose=0)
    np.testing.assert_allclose(train[:], direct, rtol=2e-3, atol=2e-3)
    keras.utils.set_random_seed(5)
    unshuffled = CaptioningRecipe().load_data(
        config.with_values({"train.shuffle": False})
    )
    inputs, _ = next(iter(unshuffled.train))
    np.testing.assert_array_equal(inputs["features"].numpy(), train[:])


def test_a_new_image_under_an_old_name_is_computed_afresh(tmp_path):
    first, second = image_bytes(2)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "photo.jpg").write_bytes(first)
    row_store = store.RowStore(tmp_path / "store", (32, 32, 3), np.uint8)
    before = fill_pixels(row_store, tmp_path / "images", ["photo.jpg"])
    np.testing.assert_array_equal(row_store.read(before.locations)[0], pixels_of(first))
    (tmp_path / "images" / "photo.jpg").write_bytes(second)
    after = fill_pixels(row_store, tmp_path / "images", ["photo.jpg"])
    assert after.computed == 1 and after.stored == 0
    np.testing.assert_array_equal(row_store.read(after.locations)[0], pixels_of(second))
    assert len(row_store) == 2


def test_one_name_in_two_folders_stays_two_images(tmp_path):
    contents = image_bytes(2)
    row_store = store.RowStore(tmp_path / "store", (32, 32, 3), np.uint8)
    rows = []
    for folder, content in zip(("a", "b"), contents, strict=True):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "photo.jpg").write_bytes(content)
        filled = fill_pixels(row_store, tmp_path / folder, ["photo.jpg"])
        rows.append(row_store.read(filled.locations)[0])
    for row, content in zip(rows, contents, strict=True):
        np.testing.assert_array_equal(row, pixels_of(content))
    assert len(row_store) == 2 and not np.array_equal(*rows)


def test_repeated_names_and_equal_bytes_are_computed_once(tmp_path):
    first, second = image_bytes(2)
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(first)
    (folder / "copy_of_a.jpg").write_bytes(first)
    (folder / "b.jpg").write_bytes(second)
    names = ["a.jpg", "b.jpg", "a.jpg", "copy_of_a.jpg", "b.jpg"]
    row_store = store.RowStore(tmp_path / "store", (32, 32, 3), np.uint8)
    filled = fill_pixels(row_store, folder, names)
    assert (filled.computed, filled.stored, filled.names) == (2, 0, names)
    np.testing.assert_array_equal(filled.locations[0], filled.locations[3])
    rows = store.Rows(row_store, filled.locations)
    np.testing.assert_array_equal(rows[1], pixels_of(second))
    again = fill_pixels(
        store.RowStore(row_store.folder, (32, 32, 3), "uint8"), folder, names
    )
    assert (again.computed, again.stored) == (0, 2)


def test_store_folders_name_everything_that_made_the_rows(tmp_path):
    def folder(**values):
        config = CaptioningConfig().with_values(
            {"data.cache_dir": str(tmp_path), "model.encoder": "mobilenet", **values}
        )
        model = config.model
        encoder = image_encoder(
            "mobilenet", model.image_size, alpha=model.encoder_alpha
        )
        keras.utils.set_random_seed(1)
        encoder.set_weights([np.full(w.shape, 0.5, "float32") for w in encoder.weights])
        return features.feature_store(config, encoder).folder, encoder

    base, encoder = folder(**{"model.encoder_alpha": 0.25, "model.image_size": 32})
    assert base.name.startswith("mobilenet-alpha0.25-32px-")
    assert base.name.endswith(f"-v{features.PREPROCESSING_VERSION}")
    assert folder(**{"model.encoder_alpha": 0.5, "model.image_size": 32})[0] != base
    assert folder(**{"model.encoder_alpha": 0.25, "model.image_size": 64})[0] != base
    config = CaptioningConfig().with_values(
        {
            "data.cache_dir": str(tmp_path),
            "model.encoder": "mobilenet",
            "model.encoder_alpha": 0.25,
            "model.image_size": 32,
        }
    )
    assert features.feature_store(config, encoder).folder == base
    weights = encoder.get_weights()
    weights[0] = weights[0] + 1e-3  # other weights, same architecture
    encoder.set_weights(weights)
    assert features.feature_store(config, encoder).folder != base


def test_rows_appear_only_when_their_shard_is_complete(tmp_path, monkeypatch):
    row_store = store.RowStore(tmp_path, (2, 3), np.float16)
    with pytest.raises(RuntimeError, match="interrupted"):
        with row_store.writer() as writer:
            writer.add("a", np.ones((2, 3)))
            raise RuntimeError("interrupted")
    assert len(row_store) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.json"]
    monkeypatch.setattr(store, "ROWS_PER_SHARD", 2)
    rows = np.arange(30, dtype=np.float16).reshape(5, 2, 3)
    with row_store.writer() as writer:
        for key, row in zip("abcde", rows, strict=True):
            writer.add(key, row)
    assert len(list(tmp_path.glob("*.rows"))) == 3  # 2 + 2 + 1 rows
    other = store.RowStore(tmp_path, (2, 3), np.float16)  # e.g. another process
    np.testing.assert_array_equal(
        store.Rows(other, other.locate(list("eacbd")))[:], rows[[4, 0, 2, 1, 3]]
    )
    with pytest.raises(DataError, match="rows of another shape or dtype"):
        store.RowStore(tmp_path, (3, 3), np.float16)


# -- Names and splits ------------------------------------------------------------------


def test_a_bare_name_two_files_share_is_an_error(tmp_path):
    contents = image_bytes(2)
    for folder, content in zip(("a", "b"), contents, strict=True):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "photo.jpg").write_bytes(content)
    source = ImageSource(tmp_path)
    assert source.read("b/photo.jpg") == contents[1]
    with pytest.raises(DataError, match="2 images are named photo.jpg"):
        source.read("photo.jpg")


def write_coco_splits(tmp_path, folder, extra_test=()):
    """One COCO captions file per split from a Flickr8k folder; `extra_test`: train
    images also listed in the test file."""
    captions = read_flickr8k_captions(folder / "Flickr8k.token.txt")
    lists = {
        "tr": "Flickr_8k.trainImages.txt",
        "va": "Flickr_8k.devImages.txt",
        "te": "Flickr_8k.testImages.txt",
    }
    for split, list_file in lists.items():
        names = (folder / list_file).read_text().split()
        if split == "te":
            names += list(extra_test)
        document = {
            "images": [{"id": i, "file_name": n} for i, n in enumerate(names)],
            "annotations": [
                {"image_id": i, "caption": text}
                for i, name in enumerate(names)
                for text in captions[name]
            ],
        }
        (tmp_path / f"captions_{split}.json").write_text(json.dumps(document))
    return {
        "data.format": "coco",
        "data.train_split": "tr",
        "data.validation_split": "va",
        "data.test_split": "te",
    }


def run_on_coco_splits(tmp_path, images, keys):
    """`rnnkit run captioning` (smoke config) on the COCO split files
    `write_coco_splits` wrote into `tmp_path`, with the images in `images`."""
    return invoke(
        "run", "captioning", "--config", str(SMOKE_CONFIG),
        "--run-dir", str(tmp_path / "run"),
        "--set", f"data.path={tmp_path / 'captions_{split}.json'}",
        "--set", f"data.images={images}",
        *(f"--set={key}={value}" for key, value in keys.items()),
    )  # fmt: skip


def test_coco_split_files_sharing_an_image_are_a_one_line_error(tmp_path):
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 2), missing=(0, 0, 0)
    )
    train = (folder / "Flickr_8k.trainImages.txt").read_text().split()
    keys = write_coco_splits(tmp_path, folder, extra_test=train[:2])
    result = run_on_coco_splits(tmp_path, folder / "Images", keys)
    line = error_line(result)
    assert "the COCO annotation files of the splits share 2 image(s)" in line
    assert f"e.g. {train[0]} in both {tmp_path / 'captions_tr.json'} and " in line


def add_coco_image(json_file, name, caption):
    document = json.loads(json_file.read_text())
    number = 1 + max(image["id"] for image in document["images"])
    document["images"].append({"id": number, "file_name": name})
    document["annotations"].append({"image_id": number, "caption": caption})
    json_file.write_text(json.dumps(document))


def test_coco_splits_sharing_image_bytes_under_two_names_are_a_one_line_error(
    tmp_path,
):
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 2), missing=(0, 0, 0)
    )
    images = folder / "Images"
    train = (folder / "Flickr_8k.trainImages.txt").read_text().split()
    keys = write_coco_splits(tmp_path, folder)
    # A copy of a training image under another name, in the train file: allowed.
    (images / "train_copy.jpg").write_bytes((images / train[0]).read_bytes())
    add_coco_image(tmp_path / "captions_tr.json", "train_copy.jpg", "a copy")
    config = config_for(
        tmp_path / "captions_{split}.json", **{"data.images": str(images), **keys}
    )
    data = CaptioningRecipe().load_data(config)
    assert "train_copy.jpg" in data.splits["train"].names
    # The same bytes in the test file: a leak, named by both files.
    (images / "test_copy.jpg").write_bytes((images / train[1]).read_bytes())
    add_coco_image(tmp_path / "captions_te.json", "test_copy.jpg", "a leak")
    result = run_on_coco_splits(tmp_path, images, keys)
    line = error_line(result)
    where = images.resolve()
    assert (
        f"the train image {where}!{train[1]} and the test image "
        f"{where}!test_copy.jpg have the same bytes" in line
    ), line
    assert not (tmp_path / "run" / "model.keras").exists()


def test_the_same_file_name_in_per_split_folders_is_two_images(tmp_path):
    """COCO splits with one image folder each ({split} in data.images) may reuse
    file names: each split reads its own images."""
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 2), missing=(0, 0, 0)
    )
    captions = read_flickr8k_captions(folder / "Flickr8k.token.txt")
    lists = {
        "tr": "Flickr_8k.trainImages.txt",
        "va": "Flickr_8k.devImages.txt",
        "te": "Flickr_8k.testImages.txt",
    }
    for split, list_file in lists.items():
        images = tmp_path / f"images_{split}"
        images.mkdir()
        originals = (folder / list_file).read_text().split()
        for number, name in enumerate(originals):
            (images / f"{number}.jpg").write_bytes(
                (folder / "Images" / name).read_bytes()
            )
        document = {
            "images": [
                {"id": i, "file_name": f"{i}.jpg"} for i in range(len(originals))
            ],
            "annotations": [
                {"image_id": i, "caption": text}
                for i, name in enumerate(originals)
                for text in captions[name]
            ],
        }
        (tmp_path / f"captions_{split}.json").write_text(json.dumps(document))
    config = config_for(
        tmp_path / "captions_{split}.json",
        **{
            "data.format": "coco",
            "data.images": str(tmp_path / "images_{split}"),
            "data.train_split": "tr",
            "data.validation_split": "va",
            "data.test_split": "te",
        },
    )
    with Messages() as messages:
        data = CaptioningRecipe().load_data(config)
    assert (
        data.splits["train"].names[:2]
        == data.splits["test"].names
        == ["0.jpg", "1.jpg"]
    )
    computed = [int(m.split()[1]) for m in messages if m.startswith("computing ")]
    assert computed == [4, 2, 2]
    train_rows = data.splits["train"].inputs[:2]
    test_rows = data.splits["test"].inputs[:]
    for row in range(2):
        assert not np.array_equal(train_rows[row], test_rows[row])
