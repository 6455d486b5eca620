import struct

import matplotlib.image
import numpy as np
import pytest

from rnnkit import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    """(width, height) from the IHDR chunk, after checking the PNG signature and
    that the whole image decodes to that size."""
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_SIGNATURE, "not a PNG file"
    assert header[12:16] == b"IHDR", "PNG without an IHDR chunk first"
    width, height = struct.unpack(">II", header[16:24])
    assert matplotlib.image.imread(path).shape[:2] == (height, width)
    return width, height


@pytest.mark.parametrize("source_length, target_length", [(5, 4), (12, 9)])
def test_attention_heatmap_writes_a_png_of_the_expected_size(
    tmp_path, source_length, target_length
):
    source = [f"src{i}" for i in range(source_length)]
    target = [f"tgt{i}" for i in range(target_length)]
    weights = np.random.RandomState(0).dirichlet(np.ones(source_length), target_length)
    path = tmp_path / "plots" / "attention.png"
    returned = plots.attention_heatmap(weights, source, target, path, title="example")
    assert returned == path
    assert png_size(path) == (
        round(100 * (2.5 + 0.5 * source_length)),
        round(100 * (1.5 + 0.4 * target_length)),
    )
    assert [p.name for p in path.parent.iterdir()] == ["attention.png"]


def test_attention_heatmap_rejects_weights_that_do_not_fit_the_tokens(tmp_path):
    with pytest.raises(ValueError, match="weights"):
        plots.attention_heatmap(
            np.ones((3, 2)), ["a", "b", "c"], ["x", "y"], tmp_path / "bad.png"
        )
    assert not (tmp_path / "bad.png").exists()


def test_attention_overlay_draws_one_panel_per_word(tmp_path):
    image = np.zeros((48, 64, 3), np.uint8)
    image[:, 32:] = 255  # right half white
    weights = np.zeros((3, 2, 2))
    weights[:, 0, 1] = 1.0  # every word looks at the top-right cell
    short = plots.attention_overlay(
        image, weights[:2], ["a", "dog"], tmp_path / "short.png",
        title="example", references=["a dog runs", "a brown dog"],
    )  # fmt: skip
    words = ["a", "dog", "runs", "on", "the", "grass"]
    many = plots.attention_overlay(
        image, np.repeat(weights[:1], 6, axis=0), words, tmp_path / "long.png"
    )
    assert short == tmp_path / "short.png"
    short_width, short_height = png_size(short)
    long_width, long_height = png_size(many)
    # 1 + 2 panels fit one row; 1 + 6 panels take a second row of five columns.
    assert long_height > short_height and long_width > short_width
    with pytest.raises(ValueError, match="one map per word"):
        plots.attention_overlay(image, weights, ["a", "dog"], tmp_path / "bad.png")
