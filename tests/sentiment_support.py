"""Shared helpers for the text-data, classifier and sentiment-recipe tests: small
samples of real IMDB reviews from ../shared/data, read without loading whole files."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from tests.shared_data import require

ROOT = Path(__file__).resolve().parents[1]
SENTIMENT_DATA = ROOT.parent / "shared" / "data" / "sentiment"
SMOKE_CONFIG = ROOT / "recipes" / "sentiment" / "configs" / "smoke.toml"
# The IMDB files hold 12,500 positive reviews first, then 12,500 negative ones.
_CLASS_SIZE = 12500


@functools.lru_cache(maxsize=4)
def imdb_sample(split: str, per_class: int) -> pd.DataFrame:
    """The first `per_class` positive and negative reviews of the IMDB `split`
    (columns id, rating, label, text), positives first."""
    path = SENTIMENT_DATA / f"imdb_{split}.csv.gz"
    require(path)
    positive = pd.read_csv(path, nrows=per_class)
    negative = pd.read_csv(path, skiprows=range(1, _CLASS_SIZE + 1), nrows=per_class)
    return pd.concat([positive, negative], ignore_index=True)


def write_imdb_csv(path: Path, split: str, per_class: int) -> Path:
    """Writes `imdb_sample(split, per_class)` as CSV (gzipped if `path` ends in .gz)."""
    imdb_sample(split, per_class).to_csv(path, index=False)
    return path


def write_aclimdb_folder(root: Path, per_class: int) -> Path:
    """A tiny aclImdb folder of real reviews: {train,test}/{pos,neg}/<id>_<rating>.txt
    and an unlabelled train/unsup folder, which loaders must skip."""
    for split in ("train", "test"):
        for row in imdb_sample(split, per_class).itertuples():
            folder_name, number = row.id.split("/")
            folder = root / split / folder_name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{number}_{row.rating}.txt").write_text(row.text, "utf-8")
    unsup = root / "train" / "unsup"
    unsup.mkdir()
    (unsup / "0_0.txt").write_text("An unlabelled review.", "utf-8")
    return root


def serve_imdb_archive(tmp_path: Path, monkeypatch, per_class: int = 3) -> Path:
    """IMDB's default download pointed at a local aclImdb_v1.tar.gz of real reviews
    (file:// URI, its own hash) and rnnkit's data folder at tmp_path/data; returns the
    archive. Nothing leaves the machine."""
    import tarfile

    from rnnkit.data import downloads, text_files

    folder = write_aclimdb_folder(tmp_path / "aclImdb", per_class)
    archive = tmp_path / "served" / "aclImdb_v1.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="aclImdb")
    monkeypatch.setattr(text_files, "IMDB_URL", archive.as_uri())
    monkeypatch.setattr(text_files, "IMDB_SHA256", downloads.sha256(archive))
    monkeypatch.setenv("RNNKIT_DATA_DIR", str(tmp_path / "data"))
    return archive
