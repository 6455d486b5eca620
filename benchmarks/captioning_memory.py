"""Peak memory of the captioning recipe's data pipeline as the number of image entries
grows: the images stream from the zip and the features stay on disk (issue 29).

For each size it writes a Flickr8k-style folder whose train list holds that many
entries (the 8,000 images of the shared copy's three official lists, in order, then
repeated from the start: entries past the 8,000th are repeats), a dev and a test list
of the first `--eval-images` images of the official dev and test lists, and links to
the shared captions and image zip. Then, each in a fresh subprocess, whose peak
resident set size (`resource.getrusage(...).ru_maxrss`) is the figure:

- `extract`: loading the data into an empty cache: every distinct image is read from
  the zip, hashed, decoded, encoded by the frozen CNN and stored on disk; repeated
  entries (same bytes) are found by their content digest and computed once;
- `train`: loading again (every row is then found in the cache: no decoding) and one
  epoch of a small attentive decoder over all entries, the rows read from disk;
- `floor`: importing TensorFlow and Keras and building the encoder, nothing else.

The "decoded" and "entries not decoded" columns say what each phase did. The
vocabulary (training words seen `data.min_frequency` times) would grow with the
repeats, and the decoder's logits with it (batch x captions x words x vocabulary
floats); so that the sizes differ in their images only, `data.min_frequency` is 5
times the number of passes the train list makes over the 8,000 images (5 up to 8,000
entries, 31 at 50,000), and the table shows the vocabulary. By default the encoder
is the shared ImageNet MobileNet v1 0.25 (7x7x256 features at 224 px), which finishes
in minutes on 2 cores; `--alpha 0.75` measures the configuration of
flickr8k_mobilenet.toml. `--trainable` measures the small CNN trained from scratch:
the decoded pixels are the stored rows, read every epoch.

    python benchmarks/captioning_memory.py
    python benchmarks/captioning_memory.py --sizes 1000,8000 --alpha 0.75
    python benchmarks/captioning_memory.py --trainable --image-size 96
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "captioning"
SMOKE = ROOT / "recipes" / "captioning" / "configs" / "smoke.toml"
WEIGHT_FILES = {
    0.25: "mobilenet_2_5_224_tf_no_top.h5",
    0.75: "mobilenet_7_5_224_tf_no_top.h5",
}
LISTS = (
    "Flickr_8k.trainImages.txt",
    "Flickr_8k.devImages.txt",
    "Flickr_8k.testImages.txt",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,8000,50000", help="Train entries.")
    parser.add_argument("--data", default=str(SHARED), help="The Flickr8k folder.")
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.25,
        choices=sorted(WEIGHT_FILES),
        help="MobileNet v1 width: the shared weights file of that alpha.",
    )
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument(
        "--trainable",
        action="store_true",
        help="The small CNN trained from scratch (decoded pixels stored) instead.",
    )
    parser.add_argument("--eval-images", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    from timing import cpu_line

    data = Path(args.data)
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        floor = run_child(args, "floor", scratch, scratch / "none")
        for size in sizes:
            folder = write_folder(data, scratch / f"flickr-{size}", size, args)
            cache = scratch / f"cache-{size}"
            for phase in ("extract", "train"):
                result = run_child(args, phase, folder, cache)
                rows.append((size, phase, result))
                print(format_row(size, phase, result), flush=True)
    encoder = (
        f"small CNN (trainable, decoded {args.image_size} px pixels stored)"
        if args.trainable
        else f"MobileNet v1 {args.alpha} at {args.image_size} px (frozen, float16 "
        "features stored)"
    )
    print()
    print(f"encoder: {encoder}; dev and test: {args.eval_images} images each")
    print(f"floor (imports and the encoder, no data): {floor['peak_mib']:.0f} MiB")
    print(HEADER)
    for size, phase, result in rows:
        print(format_row(size, phase, result))
    print(f"CPU: {cpu_line()}")


HEADER = (
    "| train entries | phase | distinct images | decoded | entries not decoded "
    "| vocabulary | peak RSS MiB | seconds | decoded pixels if held, MiB |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def format_row(size: int, phase: str, result: dict) -> str:
    return (
        f"| {size:,} | {phase} | {result['distinct']:,} | {result['decoded']:,} | "
        f"{result['cached']:,} | {result['vocabulary']:,} | {result['peak_mib']:.0f} | "
        f"{result['seconds']:.0f} | "
        f"{result['held_mib']:,.0f} |"
    )


def write_folder(data: Path, folder: Path, size: int, args) -> Path:
    """A Flickr8k folder whose train list has `size` entries (see the docstring)."""
    folder.mkdir(parents=True)
    names = {file: (data / file).read_text().split() for file in LISTS}
    every = [name for file in LISTS for name in names[file]]
    train = [every[i % len(every)] for i in range(size)]
    (folder / LISTS[0]).write_text("\n".join(train) + "\n")
    for file in LISTS[1:]:
        (folder / file).write_text("\n".join(names[file][: args.eval_images]) + "\n")
    tokens = data / "Flickr8k.token.txt.gz"
    (folder / tokens.name).symlink_to(tokens.resolve())
    archive = data / "flickr8k_images_256px.zip"
    (folder / archive.name).symlink_to(archive.resolve())
    return folder


def run_child(args, phase: str, folder: Path, cache: Path) -> dict:
    from timing import run_phase

    options = [
        "--folder", str(folder), "--cache", str(cache), "--data", args.data,
        "--alpha", str(args.alpha), "--image-size", str(args.image_size),
        "--batch-size", str(args.batch_size),
        *(["--trainable"] if args.trainable else []),
    ]  # fmt: skip
    return run_phase(__file__, phase, options, ROOT)


def child(args) -> dict:
    """One phase in this (fresh) process; its peak RSS and what it did."""
    import logging

    from rnnkit_recipes.captioning import features
    from rnnkit_recipes.captioning.recipe import CaptioningRecipe

    from rnnkit import config as config_lib

    counts = {"decoded": 0, "cached": 0}
    original_fill = features.fill

    def counting_fill(*fill_args, **kwargs):
        filled = original_fill(*fill_args, **kwargs)
        counts["decoded"] += filled.computed
        counts["cached"] += len(filled.names) - filled.computed
        return filled

    features.fill = counting_fill
    logging.getLogger("rnnkit").setLevel(logging.WARNING)
    weights = Path(args.data) / "weights" / WEIGHT_FILES[args.alpha]
    encoder = (
        {
            "model.encoder": "small_cnn",
            "model.encoder_weights": "none",
            "model.encoder_trainable": True,
        }
        if args.trainable
        else {
            "model.encoder": "mobilenet",
            "model.encoder_alpha": args.alpha,
            "model.encoder_weights": str(weights),
            "model.encoder_trainable": False,
        }
    )
    train_list = Path(args.folder) / LISTS[0]
    entries = len(train_list.read_text().split()) if train_list.is_file() else 0
    passes = entries / sum(
        len((Path(args.data) / f).read_text().split()) for f in LISTS
    )
    config = config_lib.resolve(
        CaptioningRecipe.Config,
        SMOKE,
        {
            "data.path": args.folder,
            "data.cache_dir": args.cache,
            "data.limit": 0,
            "data.min_frequency": max(5, round(5 * passes)),
            "model.image_size": args.image_size,
            "train.batch_size": args.batch_size,
            **encoder,
        },
    )
    recipe = CaptioningRecipe()
    started = time.perf_counter()
    distinct = vocabulary = 0
    if args.child == "floor":
        features.build_encoder(config)
    else:
        data = recipe.load_data(config)
        distinct = len(
            {
                tuple(row)
                for split in data.splits.values()
                for row in split.inputs.locations
            }
        )
        vocabulary = len(data.vocabulary)
        if args.child == "train":
            model = recipe.build_model(config, data)
            model.fit(data.train, validation_data=data.validation, epochs=1, verbose=0)
    seconds = time.perf_counter() - started
    held = (
        0
        if args.child == "floor"
        else sum(len(split.names) for split in data.splits.values())
    )
    return {
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": seconds,
        "distinct": distinct,
        "decoded": counts["decoded"],
        "cached": counts["cached"],
        "vocabulary": vocabulary,
        "held_mib": held * args.image_size**2 * 3 / 2**20,
    }


if __name__ == "__main__":
    main()
