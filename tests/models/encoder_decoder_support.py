"""What the tests of both encoder-decoders (`EncoderDecoder`,
`TransformerEncoderDecoder`) share: a padded batch, its logits, token lists, and the
check that a saved `.keras` file reloads in a fresh process with its outputs."""

from __future__ import annotations

import textwrap

import keras
import numpy as np

from tests import preloaded

SOURCE = np.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 0, 0, 0]])
TARGET_IN = np.array([[2, 4, 5, 6, 7], [2, 8, 9, 0, 0]])
SOURCE_TOKENS = ["", "[UNK]"] + [f"s{i}" for i in range(18)]
TARGET_TOKENS = ["", "[UNK]", "[START]", "[END]"] + [f"t{i}" for i in range(8)]


def logits_of(model, source=SOURCE, target_in=TARGET_IN):
    return keras.ops.convert_to_numpy(model({"source": source, "target_in": target_in}))


def assert_reloads_in_a_fresh_process(model, tmp_path) -> None:
    """`model` (built from SOURCE_TOKENS and TARGET_TOKENS), saved and loaded by a
    new Python process with `safe_mode`, keeps its vocabularies and its logits."""
    path = tmp_path / "model.keras"
    model.save(path)
    script = textwrap.dedent(
        f"""
        import keras, numpy as np
        import rnnkit.models  # registers the classes
        model = keras.saving.load_model({str(path)!r}, safe_mode=True)
        assert model.target_tokens[3] == "[END]" and len(model.source_tokens) == 20
        logits = model({{"source": np.array({SOURCE.tolist()}),
                        "target_in": np.array({TARGET_IN.tolist()})}})
        np.save({str(tmp_path / "logits.npy")!r}, keras.ops.convert_to_numpy(logits))
        """
    )
    preloaded.run(["-c", script], check=True)
    np.testing.assert_allclose(
        np.load(tmp_path / "logits.npy"), logits_of(model), atol=1e-6
    )
