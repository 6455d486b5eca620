"""rnnkit.data.downloads: a download once, checked, tried again, and a damaged cached
archive named in one line (issue 57, point 4). Every "download" here is a local file
through a file:// URI: nothing leaves the machine."""

from __future__ import annotations

import zipfile

import pytest

from rnnkit.data import downloads
from rnnkit.data import parallel_text as pt
from rnnkit.errors import DataError
from tests.data.test_parallel_text import write_anki_zip


def test_a_download_is_cached_and_read(tmp_path):
    """The translation recipe's default, pointed at a local zip instead."""
    source = write_anki_zip(tmp_path / "spa-eng.zip")
    cache = tmp_path / "cache"
    path = downloads.download(source.as_uri(), cache_dir=cache)
    assert path == cache / "spa-eng.zip"
    assert pt.read_tab_separated(path)[2] == ("Where is it?", "¿Dónde está?")
    source.unlink()  # a second call uses the cached copy
    assert downloads.download(source.as_uri(), cache_dir=cache) == path


def test_the_default_sources_are_fetched_over_https():
    from rnnkit_recipes.captioning.sources import FLICKR8K_URLS

    for url in (pt.ANKI_SPA_ENG_URL, *FLICKR8K_URLS):
        assert url.startswith("https://"), url


def test_offline_is_one_line_that_says_how_to_use_local_files(tmp_path, monkeypatch):
    monkeypatch.setattr(downloads.time, "sleep", lambda seconds: None)
    missing = (tmp_path / "nowhere" / "spa-eng.zip").as_uri()
    with pytest.raises(DataError) as caught:
        downloads.download(
            missing, cache_dir=tmp_path / "cache", local_hint=pt.ANKI_LOCAL_HINT
        )
    message = str(caught.value)
    assert "\n" not in message and "could not download" in message
    assert "3 attempts" in message and "--set data.path=" in message
    assert not list((tmp_path / "cache").iterdir())  # nothing half-written left


def test_a_failed_attempt_is_tried_again(tmp_path, monkeypatch):
    import keras

    source = write_anki_zip(tmp_path / "spa-eng.zip")
    real, calls, pauses = keras.utils.get_file, [], []

    def flaky(**kwargs):
        calls.append(kwargs["origin"])
        if len(calls) == 1:
            raise Exception("URL fetch failure: connection reset")
        return real(**kwargs)

    monkeypatch.setattr(keras.utils, "get_file", flaky)
    monkeypatch.setattr(downloads.time, "sleep", pauses.append)
    path = downloads.download(source.as_uri(), cache_dir=tmp_path / "cache")
    assert len(calls) == 2 and pauses == [downloads.FIRST_PAUSE]
    assert pt.read_tab_separated(path)


@pytest.mark.parametrize(
    "content",
    [b"<html><body>503 Service Unavailable</body></html>", "truncated"],
    ids=["html-page", "truncated-zip"],
)
def test_a_damaged_cached_archive_names_the_file_to_delete(tmp_path, content):
    source = write_anki_zip(tmp_path / "spa-eng.zip")
    cache = tmp_path / "cache"
    cache.mkdir()
    cached = cache / "spa-eng.zip"
    if content == "truncated":
        data = source.read_bytes()
        cached.write_bytes(data[: len(data) // 2])
    else:
        cached.write_bytes(content)
    with pytest.raises(DataError) as caught:
        downloads.download(source.as_uri(), cache_dir=cache)
    message = str(caught.value)
    assert "\n" not in message
    assert str(cached) in message and "delete it" in message
    # The translation recipe reads such a file as its data too: the same line.
    with pytest.raises(DataError, match="delete it"):
        downloads.check_archive(cached)


def test_a_cached_copy_that_fails_its_hash_is_fetched_again(tmp_path):
    source = write_anki_zip(tmp_path / "spa-eng.zip")
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = write_anki_zip(cache / "spa-eng.zip", text="Go.\tVe.\n")
    assert downloads.sha256(stale) != downloads.sha256(source)
    path = downloads.download(
        source.as_uri(), cache_dir=cache, file_hash=downloads.sha256(source)
    )
    assert downloads.sha256(path) == downloads.sha256(source)
    with zipfile.ZipFile(path) as archive:
        assert "spa-eng/spa.txt" in archive.namelist()
