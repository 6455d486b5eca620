"""The captioning recipe's on-disk stores: the digest index that spares a later run
from hashing every image again, several processes filling one store, and the store's
housekeeping (temporary files, empty reads)."""

from __future__ import annotations

import multiprocessing
import os
import zipfile

import numpy as np
import pytest
from rnnkit_recipes.captioning import features, store
from rnnkit_recipes.captioning.images import ImageSource, digest

from tests.recipes.test_captioning_images import fill_pixels, image_bytes


@pytest.fixture
def reads(monkeypatch):
    """The names whose bytes `ImageSource.read` returned, in order."""
    seen: list[str] = []
    original = ImageSource.read

    def counting_read(self, name):
        seen.append(name)
        return original(self, name)

    monkeypatch.setattr(ImageSource, "read", counting_read)
    return seen


def test_a_later_fill_reads_no_image_bytes_until_one_changes(tmp_path, reads):
    contents = image_bytes(3)
    folder = tmp_path / "images"
    folder.mkdir()
    names = ["a.jpg", "b.jpg", "c.jpg"]
    for name, content in zip(names, contents, strict=True):
        (folder / name).write_bytes(content)
    row_store = store.RowStore(tmp_path / "store", (32, 32, 3), np.uint8)
    first = fill_pixels(row_store, folder, names)
    assert first.computed == 3 and sorted(set(reads)) == names
    index = row_store.folder / features.DIGEST_INDEX
    assert index.is_file()

    reads.clear()  # a later run: a fresh store object and source, same files
    again = fill_pixels(
        store.RowStore(row_store.folder, (32, 32, 3), "uint8"), folder, names
    )
    assert reads == [] and (again.computed, again.stored) == (0, 3)
    np.testing.assert_array_equal(again.locations, first.locations)

    # New bytes of the same size under an old name, an older modification time set
    # back to the old one: the change time still gives it away.
    before = os.stat(folder / "b.jpg")
    changed = bytearray(contents[1])
    changed[len(changed) // 2] ^= 0xFF
    (folder / "b.jpg").write_bytes(bytes(changed))
    os.utime(folder / "b.jpg", ns=(before.st_atime_ns, before.st_mtime_ns))
    reads.clear()
    later = fill_pixels(
        store.RowStore(row_store.folder, (32, 32, 3), "uint8"), folder, names
    )
    assert reads[0] == "b.jpg" and "a.jpg" not in reads and "c.jpg" not in reads
    assert later.computed == 1
    keys = features.content_keys(row_store, ImageSource(folder), names)
    assert keys["b.jpg"] == digest(bytes(changed)) != digest(contents[1])
    assert keys["a.jpg"] == digest(contents[0])


def test_zip_members_are_hashed_once_and_again_when_their_crc_changes(tmp_path, reads):
    contents = image_bytes(2)
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w") as writer:
        writer.writestr("images/a.jpg", contents[0])
        writer.writestr("images/b.jpg", contents[1])
    row_store = store.RowStore(tmp_path / "store", (32, 32, 3), np.uint8)
    keys = features.content_keys(row_store, ImageSource(archive), ["a.jpg", "b.jpg"])
    assert keys == {"a.jpg": digest(contents[0]), "b.jpg": digest(contents[1])}
    reads.clear()
    assert features.content_keys(row_store, ImageSource(archive), ["a.jpg"]) == {
        "a.jpg": digest(contents[0])
    }
    assert reads == []
    with zipfile.ZipFile(archive, "w") as writer:  # the same names, swapped bytes
        writer.writestr("images/a.jpg", contents[1])
        writer.writestr("images/b.jpg", contents[0])
    keys = features.content_keys(row_store, ImageSource(archive), ["a.jpg", "b.jpg"])
    assert keys == {"a.jpg": digest(contents[1]), "b.jpg": digest(contents[0])}
    assert sorted(reads) == ["a.jpg", "b.jpg"]


def test_an_unreadable_digest_index_means_hashing_again(tmp_path, reads):
    content = image_bytes(1)[0]
    (tmp_path / "a.jpg").write_bytes(content)
    row_store = store.RowStore(tmp_path / "store", (32, 32, 3), np.uint8)
    (row_store.folder / features.DIGEST_INDEX).write_text("{not json")
    keys = features.content_keys(row_store, ImageSource(tmp_path), ["a.jpg"])
    assert keys == {"a.jpg": digest(content)} and reads == ["a.jpg"]
    reads.clear()
    features.content_keys(row_store, ImageSource(tmp_path), ["a.jpg"])
    assert reads == []  # rewritten whole


def test_two_processes_fill_one_store(tmp_path):
    from tests.recipes import captioning_store_writer as child

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    keys = [list(range(0, 40)), list(range(20, 60))]  # 20 keys both write
    writers = [
        context.Process(target=child.write, args=(str(tmp_path), part, 3, barrier))
        for part in keys
    ]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
    assert [process.exitcode for process in writers] == [0, 0]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    row_store = store.RowStore(tmp_path, child.ROW_SHAPE, np.float16)
    # 40 rows each, 3 to a shard: 14 shards per writer, the shared keys in both.
    assert len(row_store) == 60 and len(row_store.shards) == 28
    everything = [f"k{key}" for key in range(60)]
    rows = store.Rows(row_store, row_store.locate(everything))
    np.testing.assert_array_equal(
        np.asarray(rows), np.stack([child.row_of(key) for key in range(60)])
    )


def test_refresh_skips_temporaries_and_sweeps_those_of_dead_writers(tmp_path):
    row_store = store.RowStore(tmp_path, (2, 3), np.float16)
    with row_store.writer() as writer:
        writer.add("a", np.ones((2, 3)))
    dead = multiprocessing.get_context("spawn").Process(target=int)
    dead.start()
    dead.join()
    mine, gone = os.getpid(), dead.pid
    row_bytes = np.ones((2, 3), np.float16).tobytes()
    for pid in (mine, gone):
        (tmp_path / f".x{pid}.rows.tmp-{pid}").write_bytes(row_bytes)
        (tmp_path / f".x{pid}.tmp-{pid}.keys").write_text("b\n")
    # A hidden pair that looks like a shard (an editor's, a sync tool's): not read.
    (tmp_path / ".hidden.rows").write_bytes(row_bytes)
    (tmp_path / ".hidden.keys").write_text("c\n")
    other = store.RowStore(tmp_path, (2, 3), np.float16)
    assert len(other) == 1 and "b" not in other and "c" not in other
    left = sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name)
    assert left == [f".x{mine}.rows.tmp-{mine}", f".x{mine}.tmp-{mine}.keys"]
    empty = other.read(np.zeros((0, 2), np.int64))
    assert empty.shape == (0, 2, 3) and empty.dtype == np.float16
