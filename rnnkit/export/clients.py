"""Client code for exported models: plain Python and numpy, no TensorFlow.

Copy what you need next to a LiteRT or ONNX file; the names of the inputs, outputs and
settings below are those of the export's `export.json`.

- `sentiment_token_ids`: the sentiment classifier's tokenizer (what its Keras
  `TextVectorization` and `TruncateSequence` do inside the SavedModel), with
  `vocabulary_index` to index the vocabulary once for many calls.
- `greedy_decode`: greedy search with an exported encoder and one-step decoder
  (translation, captioning), any runtime.
- `image_pixels`: the captioning encoder's input from image files (Pillow).
- `run_litert`, `run_onnx`: one call of a LiteRT or ONNX model with named inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

# The sentiment classifier's text standardization (rnnkit.models.TextStandardizer),
# in Python's `re` syntax: HTML tags and punctuation become spaces, apostrophes go.
_HTML_TAG = re.compile(r"<[^<>]{0,64}>")
_APOSTROPHES = re.compile("['\u2019]")
_PUNCTUATION = re.compile(
    r"[!\"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~\u2013\u2014\u201c\u201d]"
)
# TensorFlow's whitespace split (`tf.strings.split`) splits at ASCII whitespace only.
_WHITESPACE = re.compile(r"[ \t\n\r\v\f]+")
OOV_ID = 1  # TextVectorization: 0 is padding, 1 the out-of-vocabulary token
NEXT = "next_"  # a step's output "next_h_0" is its input "h_0" at the next step


def sentiment_token_ids(
    texts: Sequence[str],
    vocabulary: Sequence[str] | Mapping[str, int],
    sequence_length: int,
    keep: str = "first",
    lowercase: bool = True,
) -> np.ndarray:
    """Token ids `(len(texts), sequence_length)` int32 for the exported classifier.

    The same steps as the classifier's own text layers: standardize (HTML tags and
    punctuation to spaces, apostrophes dropped, lower-cased), split at whitespace,
    look each word up in `vocabulary` (line i of `vocabulary.txt` is id i; unknown
    words are id 1), keep the first or the last `sequence_length` ids (`keep`), give
    a text without words the one id 1, and pad with 0 on the right.

    Args:
        texts: raw texts (HTML tags such as `<br />` may stay in).
        vocabulary: the tokens by id, from `vocabulary.txt`; or their index,
            `{token: id}` (`vocabulary_index`), built once for many calls.
        sequence_length, keep, lowercase: from `export.json` ("notes").

    Returns:
        An int32 array `(len(texts), sequence_length)`.
    """
    if keep not in ("first", "last"):
        raise ValueError(f"keep must be 'first' or 'last', received {keep!r}")
    index = vocabulary_index(vocabulary)
    rows = np.zeros((len(texts), sequence_length), np.int32)
    for row, text in enumerate(texts):
        text = _HTML_TAG.sub(" ", text)
        if lowercase:
            text = text.lower()
        text = _PUNCTUATION.sub(" ", _APOSTROPHES.sub("", text))
        ids = [index.get(word, OOV_ID) for word in _WHITESPACE.split(text) if word]
        ids = ids[:sequence_length] if keep == "first" else ids[-sequence_length:]
        ids = ids or [OOV_ID]
        rows[row, : len(ids)] = ids
    return rows


def vocabulary_index(
    vocabulary: Sequence[str] | Mapping[str, int],
) -> Mapping[str, int]:
    """`{token: id}` for the tokens by id, or the index itself when given one."""
    if isinstance(vocabulary, Mapping):
        return vocabulary
    return {token: i for i, token in enumerate(vocabulary)}


def greedy_decode(
    encode: Callable[[dict], Mapping[str, np.ndarray]],
    step: Callable[[dict], Mapping[str, np.ndarray]],
    encoder_inputs: dict,
    *,
    start_id: int,
    end_id: int,
    max_steps: int,
    suppress_ids: Sequence[int] = (),
) -> np.ndarray:
    """Greedy search with an exported encoder and one-step decoder.

    `encode(inputs)` returns the decoder's first state and the memory it attends
    over; `step(inputs)` takes the previous tokens ("token") with the state and
    memory and returns "logits" and the next state. Every output of `encode` is an
    input of the first `step`; an output "next_NAME" of `step` replaces the input
    NAME for the next step (the state), so the same loop serves every
    encoder-decoder export (see export.json for the names): the recurrent
    decoder's states as the Transformer's key/value cache and position.

    Args:
        encode, step: callables from named numpy arrays to named numpy arrays, e.g.
            `lambda inputs: run_onnx(session, inputs)`.
        encoder_inputs: the encoder's inputs (source ids, images).
        start_id, end_id: the ids of the start and end tokens.
        max_steps: the most tokens generated per row (the end token included);
            for a Transformer export at most export.json's `max_steps`, the
            positions its cache holds.
        suppress_ids: ids never generated (padding, the start token).

    Returns:
        int32 `(batch, steps)`: the generated ids of each row, the end token
        included, 0 after it.
    """
    carried = dict(encode(encoder_inputs))
    batch = len(next(iter(encoder_inputs.values())))
    tokens = np.full((batch,), start_id, np.int32)
    finished = np.zeros((batch,), bool)
    generated = []
    for _ in range(max_steps):
        outputs = step({**carried, "token": tokens})
        logits = np.array(outputs["logits"], np.float32)
        logits[:, list(suppress_ids)] = -np.inf
        tokens = np.where(finished, 0, logits.argmax(-1)).astype(np.int32)
        generated.append(tokens)
        finished |= tokens == end_id
        carried.update(
            {k[len(NEXT) :]: v for k, v in outputs.items() if k.startswith(NEXT)}
        )
        if finished.all():
            break
    return np.stack(generated, axis=1)


def squash_image(content: bytes, size: int) -> np.ndarray:
    """`(size, size, 3)` uint8 RGB pixels of an encoded image (JPEG, PNG, ...),
    squashed (not cropped) with Pillow's bilinear filter. The captioning recipe
    reads every image through this function; a file Pillow cannot read raises
    Pillow's error (`PIL.UnidentifiedImageError`, `OSError`)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(content)) as image:
        image = image.convert("RGB").resize((size, size), Image.BILINEAR)
        return np.asarray(image, dtype=np.uint8)


def image_pixels(images: Sequence[str | bytes], size: int) -> np.ndarray:
    """The captioning encoder's input `(len(images), size, size, 3)` float32: RGB
    levels 0-255 of each image (a file path or the file's bytes), squashed to
    `size` squares as the recipe does (`squash_image`); `size` is the
    "image_size" of export.json's notes."""
    rows = []
    for image in images:
        if isinstance(image, str):
            with open(image, "rb") as handle:
                image = handle.read()
        rows.append(squash_image(image, size))
    return np.stack(rows).astype(np.float32)


def run_litert(interpreter, inputs: Mapping[str, np.ndarray]) -> dict:
    """Runs the first signature of a LiteRT interpreter
    (`ai_edge_litert.interpreter.Interpreter(model_path=...)`) on named inputs."""
    runner = interpreter.get_signature_runner()
    return {name: np.asarray(value) for name, value in runner(**inputs).items()}


def run_onnx(session, inputs: Mapping[str, np.ndarray]) -> dict:
    """Runs an onnxruntime `InferenceSession` on named inputs; named outputs back."""
    names = [output.name for output in session.get_outputs()]
    values = session.run(names, dict(inputs))
    return dict(zip(names, values, strict=True))
