"""The captioning recipe end to end through the `rnnkit` launcher, on real Flickr8k
images, and its data loading on small real slices of the shared copy."""

from __future__ import annotations

import gzip
import json
import os
import re
import zipfile

import keras
import keras_tuner
import numpy as np
import pytest
import sacrebleu
from rnnkit_recipes.captioning import data as caption_data
from rnnkit_recipes.captioning import features as caption_features
from rnnkit_recipes.captioning import sources as caption_sources
from rnnkit_recipes.captioning.baselines import consensus_index
from rnnkit_recipes.captioning.recipe import CaptioningConfig, CaptioningRecipe

from rnnkit import config as config_lib
from rnnkit.errors import ConfigError, DataError
from tests import preloaded
from tests.cli_support import Messages, error_line, invoke
from tests.config_support import check_shipped_configs
from tests.decoding_support import assert_n_best_widens_the_beam
from tests.shared_data import require
from tests.smoke_runs import smoke_run as shared_smoke_run
from tests.stock_support import ROOT

FLICKR8K = ROOT.parent / "shared" / "data" / "captioning"
IMAGE_ZIP = FLICKR8K / "flickr8k_images_256px.zip"
SMOKE_CONFIG = ROOT / "recipes" / "captioning" / "configs" / "smoke.toml"


def require_data():
    require(IMAGE_ZIP)


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """The default cache of features and decoded images, in the test's folder."""
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "rnnkit-data"))


def real_images(count: int, split_file: str) -> list[str]:
    """The first `count` names of a split list that are in the shared zip."""
    with zipfile.ZipFile(IMAGE_ZIP) as archive:
        present = {name.rsplit("/", 1)[-1] for name in archive.namelist()}
    names = (FLICKR8K / split_file).read_text().split()
    return [name for name in names if name in present][:count]


def write_flickr_folder(root, counts=(8, 4, 4), missing=(2, 0, 0)):
    """A small Flickr8k folder of real images and captions: per split `counts` images
    in an `Images/` folder and `missing` more named in the list but absent."""
    require_data()
    with gzip.open(FLICKR8K / "Flickr8k.token.txt.gz", "rt") as handle:
        token_lines = handle.read().splitlines()
    images = root / "Images"
    images.mkdir(parents=True)
    chosen = []
    with zipfile.ZipFile(IMAGE_ZIP) as archive:
        for split_file, count, absent in zip(
            caption_sources._FLICKR_SPLIT_FILES.values(), counts, missing, strict=True
        ):
            names = real_images(count + absent, split_file)
            for name in names[:count]:
                (images / name).write_bytes(archive.read(f"flickr8k_images_256/{name}"))
            (root / split_file).write_text("\n".join(names) + "\n")
            chosen.extend(names)
    wanted = set(chosen)
    lines = [line for line in token_lines if line.split("#", 1)[0] in wanted]
    (root / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    return root


def config_for(path, **values):
    overrides = {"data.path": str(path), **values}
    return config_lib.resolve(CaptioningConfig, SMOKE_CONFIG, overrides)


# -- Data -----------------------------------------------------------------------------


def test_missing_images_are_counted_once_and_broken_ones_named(tmp_path):
    folder = write_flickr_folder(tmp_path / "flickr")
    broken_name = (folder / "Flickr_8k.devImages.txt").read_text().split()[1]
    (folder / "Images" / broken_name).write_bytes(b"GIF89a truncated")
    with Messages() as messages:
        data = CaptioningRecipe().load_data(config_for(folder))
    assert messages.count("2 of 10 train images not found, skipped") == 1
    assert not any("validation images not found" in m for m in messages)
    named = [m for m in messages if broken_name in m]
    assert len(named) == 1 and "not a readable image" in named[0]
    assert len(data.splits["train"].names) == 8
    assert len(data.splits["validation"].names) == 3
    assert broken_name not in data.splits["validation"].names
    test = data.splits["test"]
    assert test.inputs.shape == (4, 64, 64, 3) and test.inputs.dtype == np.uint8
    assert all(len(captions) == 5 for captions in test.captions)
    # Batches: 5 captions per image, framed by <start> / <end>, in the vocabulary.
    inputs, caption_out = next(iter(data.train))
    caption_in = inputs["caption_in"].numpy()
    assert caption_in.shape == (8, 5, 13)
    assert np.all(caption_in[:, :, 0] == caption_data.START_ID)
    real = caption_out.numpy() != 0
    assert np.all(real.sum(-1) == (caption_in != 0).sum(-1))
    ends = np.take_along_axis(caption_out.numpy(), real.sum(-1)[..., None] - 1, -1)
    assert np.all(ends == caption_data.END_ID)
    assert data.vocabulary[:4] == ["", "<unk>", "<start>", "<end>"]


def test_captions_are_tokenised_lower_case_words():
    assert caption_data.tokenize("A man's dog, running!  Fast.") == [
        "a", "mans", "dog", "running", "fast",
    ]  # fmt: skip
    vocabulary = caption_data.Vocabulary.build(
        [["a", "dog"], ["a", "cat"], ["a", "dog"]], min_frequency=2
    )
    assert vocabulary.tokens == ["", "<unk>", "<start>", "<end>", "a", "dog"]
    assert vocabulary.encode(["a", "cat"]) == [4, caption_data.UNK_ID]
    assert vocabulary.decode([4, 5, 3, 4]) == ["a", "dog"]


def test_split_without_readable_images_and_bad_folders_are_one_line_errors(tmp_path):
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 0), missing=(0, 0, 3)
    )
    common = ["run", "captioning", "--config", str(SMOKE_CONFIG)]
    no_test = invoke(*common, "--run-dir", str(tmp_path / "r1"),
                     "--set", f"data.path={folder}")  # fmt: skip
    assert "no readable test images" in error_line(no_test)
    (tmp_path / "empty").mkdir()
    no_tokens = invoke(*common, "--run-dir", str(tmp_path / "r2"),
                       "--set", f"data.path={tmp_path / 'empty'}")  # fmt: skip
    line = error_line(no_tokens)
    assert "Flickr8k.token.txt" in line and "data.path" in line


def test_offline_default_source_says_how_to_use_local_files(tmp_path, monkeypatch):
    """Offline, the Flickr8k download (through rnnkit.data.downloads) fails in one
    line that names the local folder to use instead, after its attempts."""
    import keras

    from rnnkit.data import downloads

    def offline(*args, **kwargs):
        raise Exception("URL fetch failure: Name or service not known")

    monkeypatch.setattr(keras.utils, "get_file", offline)
    monkeypatch.setattr(downloads.time, "sleep", lambda seconds: None)
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "cache"))
    result = invoke(
        "run", "captioning", "--config", str(SMOKE_CONFIG),
        "--run-dir", str(tmp_path / "run"), "--set", "data.path=none",
    )  # fmt: skip
    line = error_line(result)
    assert "could not download https://github.com/jbrownlee/Datasets/" in line
    assert "--set data.path=../shared/data/captioning" in line
    assert not (tmp_path / "run").exists()  # nothing that looks like a run


def test_imagenet_weights_offline_name_the_way_out(tmp_path, monkeypatch):
    from keras.src.utils import file_utils

    def offline(*args, **kwargs):
        raise Exception("URL fetch failure: Name or service not known")

    monkeypatch.setattr(file_utils, "get_file", offline)
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 2), missing=(0, 0, 0)
    )
    result = invoke(
        "run", "captioning", "--config", str(SMOKE_CONFIG),
        "--run-dir", str(tmp_path / "run"), "--set", f"data.path={folder}",
        "--set", "model.encoder=mobilenet_v2",
        "--set", "model.encoder_weights=imagenet",
        "--set", "model.encoder_trainable=false",
        "--set", f"data.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    line = error_line(result)
    assert "ImageNet weights of mobilenet_v2" in line
    assert "--set model.encoder_weights=none" in line
    with pytest.raises(ConfigError, match="small_cnn has no ImageNet weights"):
        CaptioningRecipe().load_data(
            config_for(folder, **{"model.encoder_weights": "imagenet"})
        )


def test_encoder_weights_come_from_a_local_file(tmp_path):
    from rnnkit.models.image_encoder import image_encoder

    keras.utils.set_random_seed(11)
    trained = image_encoder("small_cnn", 32, 2)
    trained.save_weights(tmp_path / "encoder.weights.h5")
    fresh = image_encoder("small_cnn", 32, 2)
    caption_features.load_encoder_weights(
        fresh, "small_cnn", str(tmp_path / "encoder.weights.h5")
    )
    for loaded, saved in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(loaded, saved)
    with pytest.raises(ConfigError, match="no file"):
        caption_features.load_encoder_weights(
            fresh, "small_cnn", str(tmp_path / "x.h5")
        )
    wider = image_encoder("small_cnn", 32, 4)
    with pytest.raises(ConfigError, match="does not fit model.encoder=small_cnn"):
        caption_features.load_encoder_weights(
            wider, "small_cnn", str(tmp_path / "encoder.weights.h5")
        )


def test_coco_captions_json_is_read_and_split(tmp_path):
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(12, 4, 4), missing=(0, 0, 0)
    )
    captions = caption_sources.read_flickr8k_captions(folder / "Flickr8k.token.txt")
    names = sorted(p.name for p in (folder / "Images").iterdir())
    document = {
        "images": [{"id": i, "file_name": name} for i, name in enumerate(names)],
        "annotations": [
            {"image_id": i, "id": 10 * i + k, "caption": text}
            for i, name in enumerate(names)
            for k, text in enumerate(captions[name])
        ],
    }
    (tmp_path / "captions.json").write_text(json.dumps(document))
    config = config_for(
        tmp_path / "captions.json",
        **{
            "data.format": "coco",
            "data.images": str(folder / "Images"),
            "data.validation_fraction": 0.1,
            "data.test_fraction": 0.1,
        },
    )
    data = CaptioningRecipe().load_data(config)
    sizes = [len(data.splits[s].names) for s in ("train", "validation", "test")]
    assert sizes == [16, 2, 2]
    assert sorted(n for s in data.splits.values() for n in s.names) == names
    # One file per split, named through {split}.
    by_split = {"tr": names[:12], "va": names[12:16], "te": names[16:]}
    for split, split_names in by_split.items():
        kept = [i for i, name in enumerate(names) if name in split_names]
        part = {
            "images": [document["images"][i] for i in kept],
            "annotations": [
                a for a in document["annotations"] if a["image_id"] in kept
            ],
        }
        (tmp_path / f"captions_{split}.json").write_text(json.dumps(part))
    per_split = CaptioningRecipe().load_data(
        config.with_values(
            {
                "data.path": str(tmp_path / "captions_{split}.json"),
                "data.train_split": "tr",
                "data.validation_split": "va",
                "data.test_split": "te",
            }
        )
    )
    for split, expected in zip(
        ("train", "validation", "test"), by_split.values(), strict=True
    ):
        assert per_split.splits[split].names == expected
    (tmp_path / "bad.json").write_text(json.dumps({"images": []}))
    with pytest.raises(DataError, match="not a COCO captions file"):
        CaptioningRecipe().load_data(
            config.with_values({"data.path": str(tmp_path / "bad.json")})
        )


def damage(archive_path, member):
    """Overwrites the first half of `member`'s bytes in the zip with 0xff: an invalid
    deflate block (zlib.error) or, for a stored member, a bad CRC-32 (BadZipFile)."""
    with zipfile.ZipFile(archive_path) as archive:
        info = archive.getinfo(member)
    with open(archive_path, "r+b") as handle:
        handle.seek(info.header_offset + 26)
        name_length, extra_length = (
            int.from_bytes(handle.read(2), "little") for _ in range(2)
        )
        data_start = info.header_offset + 30 + name_length + extra_length
        handle.seek(data_start)
        handle.write(b"\xff" * (info.compress_size // 2))


@pytest.mark.parametrize(
    ("compression", "reason"),
    [("deflated", "while decompressing"), ("stored", "Bad CRC-32")],
)
def test_a_damaged_member_of_an_image_zip_is_a_one_line_error(
    tmp_path, compression, reason
):
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 2), missing=(0, 0, 0)
    )
    images = sorted((folder / "Images").iterdir())
    archive_path = tmp_path / "images.zip"
    method = {"deflated": zipfile.ZIP_DEFLATED, "stored": zipfile.ZIP_STORED}
    with zipfile.ZipFile(archive_path, "w", method[compression]) as archive:
        for image in images:
            archive.write(image, f"Images/{image.name}")
    damaged = f"Images/{images[0].name}"
    damage(archive_path, damaged)
    result = invoke(
        "run", "captioning", "--config", str(SMOKE_CONFIG),
        "--run-dir", str(tmp_path / "run"), "--set", f"data.path={folder}",
        "--set", f"data.images={archive_path}",
    )  # fmt: skip
    line = error_line(result)
    assert f"{archive_path}: member {damaged} is damaged" in line and reason in line
    assert "download the zip again" in line and "python -m zipfile -t" in line


def test_coco_paths_may_hold_braces(tmp_path):
    """Only `{split}` is replaced in data.path and data.images; other braces in a
    folder or file name are the name's own."""
    folder = write_flickr_folder(
        tmp_path / "flickr", counts=(4, 2, 2), missing=(0, 0, 0)
    )
    captions = caption_sources.read_flickr8k_captions(folder / "Flickr8k.token.txt")
    coco = tmp_path / "coco {2014} {x"
    coco.mkdir()
    (folder / "Images").rename(coco / "Images {all}")
    for split, list_file in zip(
        ("tr", "va", "te"), caption_sources._FLICKR_SPLIT_FILES.values(), strict=True
    ):
        names = (folder / list_file).read_text().split()
        document = {
            "images": [{"id": i, "file_name": name} for i, name in enumerate(names)],
            "annotations": [
                {"image_id": i, "caption": text}
                for i, name in enumerate(names)
                for text in captions[name]
            ],
        }
        (coco / f"captions_{split}.json").write_text(json.dumps(document))
    config = config_for(
        coco / "captions_{split}.json",
        **{
            "data.format": "coco",
            "data.images": str(coco / "Images {all}"),
            "data.train_split": "tr",
            "data.validation_split": "va",
            "data.test_split": "te",
        },
    )
    data = CaptioningRecipe().load_data(config)
    sizes = [len(data.splits[s].names) for s in ("train", "validation", "test")]
    assert sizes == [4, 2, 2]


# -- Baselines -------------------------------------------------------------------------


def test_consensus_caption_is_the_best_corpus_bleu_against_the_others():
    require_data()
    with gzip.open(FLICKR8K / "Flickr8k.token.txt.gz", "rt") as handle:
        texts = [next(handle).split("\t", 1)[1] for _ in range(30)]
    captions = [caption_data.tokenize(text) for text in texts]
    joined = [" ".join(words) for words in captions]
    scores = [
        sacrebleu.corpus_bleu(
            [joined[i]] * (len(joined) - 1), [joined[:i] + joined[i + 1 :]]
        ).score
        for i in range(len(joined))
    ]
    assert consensus_index(captions) == int(np.argmax(scores))
    assert max(scores) > sorted(scores)[-2]  # one clear winner, not a tie


# -- End to end through the CLI --------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The docs' smoke run (40 real Flickr8k images per split, a tiny CNN + LSTM,
    one epoch), made once in the session (tests/smoke_runs.py) and read only."""
    require_data()
    run = shared_smoke_run(tmp_path_factory, "captioning")
    assert run.exit_code == 0, run.output[-3000:]
    return run.run_dir, run.messages


def test_run_writes_metrics_baselines_and_attention_overlays(smoke_run):
    run_dir, messages = smoke_run
    for name in (
        "config.toml", "model.keras", "metrics.json", "history.csv", "run.json",
        "plots/training_curves.png", "plots/attention_1.png",
    ):  # fmt: skip
        assert (run_dir / name).is_file(), name
    assert (run_dir / "plots/attention_1.png").read_bytes()[:4] == b"\x89PNG"
    # The shared copy holds every image of the official lists: nothing is skipped.
    assert not any("images not found" in m for m in messages), messages
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert list(table) == ["model", "consensus", "nearest_neighbour"]
    bleu = [f"bleu{n}" for n in (1, 2, 3, 4)]
    assert list(table["model"]) == bleu + [f"{name}_greedy" for name in bleu]
    for row in table.values():
        values = [row[name] for name in bleu]
        assert all(0.0 <= v <= 100.0 for v in values)
        assert values == sorted(values, reverse=True)  # BLEU-n falls with n
    # The consensus caption, rescored here on the first 40 available test images.
    consensus = next(m for m in messages if m.startswith("consensus caption: "))
    caption = consensus.split(": ", 1)[1]
    with gzip.open(FLICKR8K / "Flickr8k.token.txt.gz", "rt") as handle:
        by_image = {}
        for line in handle:
            key, text = line.rstrip("\n").split("\t")
            by_image.setdefault(key.split("#")[0], []).append(
                " ".join(caption_data.tokenize(text))
            )
    test_names = real_images(40, "Flickr_8k.testImages.txt")
    streams = [[by_image[name][k] for name in test_names] for k in range(5)]
    expected = sacrebleu.corpus_bleu([caption] * 40, streams).score
    assert table["consensus"]["bleu4"] == pytest.approx(expected, abs=1e-6)
    assert table["consensus"]["bleu1"] > 20.0  # a typical caption shares words


def test_evaluate_command_reproduces_the_metrics(smoke_run):
    run_dir, _ = smoke_run
    result = invoke("evaluate", str(run_dir))
    assert result.exit_code == 0, result.output[-2000:]
    table = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert f"{table['model']['bleu4']:.4f}" in result.output


def test_evaluate_decodes_with_the_run_vocabulary(smoke_run, tmp_path):
    """A data setting that learns another vocabulary from the training captions
    leaves the figures alone: captions are decoded with the model's own."""
    run_dir, _ = smoke_run
    output = tmp_path / "again.json"
    result = invoke(
        "evaluate", str(run_dir), "--set", "data.min_frequency=3",
        "--output", str(output),
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    saved = json.loads((run_dir / "metrics.json").read_text())["test"]
    again = json.loads(output.read_text())["test"]
    for system, values in saved.items():
        assert again[system] == pytest.approx(values, abs=1e-6), system


def test_predict_captions_image_files_and_folders(smoke_run, tmp_path):
    """`rnnkit predict` in a fresh process on a folder of real images (n-best lists),
    and in this one on a single file."""
    run_dir, _ = smoke_run
    names = sorted(real_images(2, "Flickr_8k.testImages.txt"))
    with zipfile.ZipFile(IMAGE_ZIP) as archive:
        for name in names:
            (tmp_path / name).write_bytes(archive.read(f"flickr8k_images_256/{name}"))
    result = preloaded.run(
        ["-c", "from rnnkit.cli import main; main()", "predict",
         str(run_dir), "--beam", "3", "--n-best=2", str(tmp_path)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert [lines[0], lines[3]] == [str(tmp_path / name) for name in names]
    pattern = r"  (\d)\. \[(-\d+\.\d+)\] ([a-z0-9 ]+)$"
    ranked = [re.match(pattern, line) for line in lines[1:3] + lines[4:6]]
    assert all(ranked), lines
    assert [int(match[1]) for match in ranked] == [1, 2, 1, 2]
    assert float(ranked[0][2]) >= float(ranked[1][2])
    single = invoke("predict", str(run_dir), str(tmp_path / names[0]))
    assert single.exit_code == 0, single.output[-2000:]
    path, caption = single.output.strip().splitlines()[-1].split(": ")
    assert path == str(tmp_path / names[0])
    assert caption == ranked[0][3]  # beam 3 (the run's config), best first
    (tmp_path / "notes.txt").write_text("not an image")
    not_image = invoke("predict", str(run_dir), str(tmp_path / "notes.txt"))
    assert "notes.txt: not an image that can be read" in error_line(not_image)
    missing = invoke("predict", str(run_dir), str(tmp_path / "nowhere.jpg"))
    assert "nowhere.jpg: no such image file or folder" in error_line(missing)


def test_an_n_best_above_the_beam_widens_the_beam_for_that_call(smoke_run, tmp_path):
    """A beam of N keeps N hypotheses: --beam 1 --n-best 2 searches with a beam of 2
    (as the README says), not greedily."""
    run_dir, _ = smoke_run
    (name,) = real_images(1, "Flickr_8k.testImages.txt")
    with zipfile.ZipFile(IMAGE_ZIP) as archive:
        (tmp_path / name).write_bytes(archive.read(f"flickr8k_images_256/{name}"))
    image = [str(tmp_path / name)]
    assert_n_best_widens_the_beam(CaptioningRecipe(), run_dir, image, n_best=2)


def test_search_space_gives_a_valid_config():
    hp = keras_tuner.HyperParameters()
    config = CaptioningRecipe().search_space(hp, CaptioningConfig())
    assert {
        "units", "embedding_dim", "attention_units", "dropout", "learning_rate",
        "attention_penalty",
    } == set(hp.values)  # fmt: skip
    assert config.model.units == hp.values["units"]
    assert config.model.attention_penalty == hp.values["attention_penalty"]


def test_configs_load():
    """Every shipped config loads to the values its file sets and passes the checks."""
    names = check_shipped_configs(CaptioningRecipe())
    assert {"default.toml", "smoke.toml"} <= set(names)


def test_evaluate_refuses_another_cut_only_of_one_coco_file():
    """Flickr8k's official split lists and one COCO file per split cut nothing, so a
    split key may change there; one COCO file for all splits is cut by them."""
    from rnnkit.errors import ConfigError

    recipe = CaptioningRecipe()
    flickr = CaptioningConfig()
    recipe.check_same_split(flickr, {"data.split_seed": 3})
    per_split = flickr.with_values(
        {"data.format": "coco", "data.path": "captions_{split}.json"}
    )
    recipe.check_same_split(per_split, {"data.validation_fraction": 0.2})
    one_file = flickr.with_values({"data.format": "coco", "data.path": "captions.json"})
    with pytest.raises(ConfigError, match=r"--set data.split_seed=3: .*split another"):
        recipe.check_same_split(one_file, {"data.split_seed": 3})
