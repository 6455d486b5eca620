"""Long-range memory tasks: where the simple RNN fails and the LSTM and GRU succeed.

Two standard synthetic benchmarks, generated with numpy from a seed:

- **adding** (Hochreiter & Schmidhuber 1997, in the form of Le et al. 2015 and Arjovsky
  et al. 2016): T steps of (value, marker) pairs, values uniform in [0, 1], exactly
  one marker in the first half and one in the second; the target is the sum of the
  two marked values, read from the last hidden state. Always predicting 1.0 has mean
  squared error Var(U1 + U2) = 1/6 (about 0.167).
- **copy** (Arjovsky et al. 2016, section 4.1): 10 symbols drawn from 8, T - 1
  blanks, a delimiter, 10 blanks (T + 20 steps, one-hot); the output is T + 10 blanks,
  then the 10 symbols. Blanks followed by uniform guesses has cross-entropy
  10 log(8) / (T + 20) per step.
- **selective_copy** (Gu & Dao 2023, "Mamba", section 3.1: S4 18.3 %, Mamba 99.8 %):
  the 10 symbols at random positions (in order) among T steps of blanks, a delimiter,
  10 blanks (T + 11 steps, one-hot); the output is blanks, then the 10 symbols in
  order. Unlike copy, where they are, and so when to read them, differs in every
  sequence: the cell must choose what to keep from what it reads, which a
  recurrence whose decay reads nothing (the LRU) cannot. Blanks followed by uniform
  guesses has cross-entropy 10 log(8) / (T + 11) per step.
- **mqar**, multi-query associative recall (Arora et al. 2023, "Zoology"), in a
  small form: T key-value pairs (T distinct keys of 16, values of 16), then the T
  keys again in a random order; at each query the output is the key's value (blanks
  before). The state must hold T associations at once and answer them in any
  order. Uniform guesses over the values at the queries: log(16) / 3 per step.

A task is **solved** at a length when the test error is at most `SOLVED_FRACTION` of
the task's baseline (rnnkit's convention, the same for both tasks: adding MSE <= 0.0083;
copy about 0.10 nats per recalled symbol). `train_memory_model` trains one fresh
one-layer model of rnnkit's cells on new batches each step, checks a validation set
every `check_every` steps and stops once it is solved; the figures and tables of a
sweep are `rnnkit.diagnostics.memory_report`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rnnkit.errors import RnnkitError

TASKS = ("adding", "copy", "selective_copy", "mqar")
CELLS = ("simple_rnn", "lstm", "gru")
# Beside the recurrent layers' names: a small causal Transformer (`build_memory_model`),
# of two blocks unless `MemorySettings.layers` says otherwise.
TRANSFORMER = "transformer"
TRANSFORMER_BLOCKS = 2
# Solved: test error at most this share of the baseline's (see the module docstring).
SOLVED_FRACTION = 0.05
# Copy task: symbols remembered, the alphabet they come from, blank and delimiter.
COPY_SYMBOLS, COPY_ALPHABET, COPY_CLASSES = 10, 8, 10
COPY_BLANK, COPY_DELIMITER = 0, 9
# Associative recall: keys 1..16 and values 17..32 (0 is the blank).
RECALL_KEYS = RECALL_VALUES = 16
RECALL_CLASSES = 1 + RECALL_KEYS + RECALL_VALUES


@dataclasses.dataclass(frozen=True)
class MemorySettings:
    """How each model of a sweep is built, trained and measured."""

    units: int = 64
    layers: int | None = None  # recurrent layers stacked (1) or Transformer blocks (2)
    steps: int = 2000  # training budget per model (batches)
    batch_size: int = 64
    learning_rate: float = 0.01  # Adam
    clipnorm: float = 1.0  # global norm of the clipped arm
    check_every: int = 50  # steps between validation checks
    validation_size: int = 256
    test_size: int = 1000
    probe_size: int = 32  # test sequences whose gradient norms are measured
    seed: int = 0


# Per task: the copy task needs a wider layer and more steps to be learned at all
# (docs/guides/diagnostics.md has the measurements behind these).
DEFAULT = {
    "adding": MemorySettings(),
    "copy": MemorySettings(units=128, steps=3000),
    "selective_copy": MemorySettings(units=128, steps=3000),
    "mqar": MemorySettings(units=128, steps=3000),
}
# Seconds, for tests and notebooks: small models, a small budget, one short length.
_QUICK = MemorySettings(
    units=32, steps=400, batch_size=32, learning_rate=0.01, check_every=25,
    validation_size=128, test_size=256, probe_size=8,
)  # fmt: skip
QUICK = {task: _QUICK for task in TASKS}
# T per task when none is given: the copy task is much harder at the same T.
DEFAULT_LENGTHS = {
    "adding": (10, 25, 50, 100, 200),
    "copy": (5, 10, 20),
    "selective_copy": (16, 32, 64),
    "mqar": (4, 8, 16),
}
QUICK_LENGTHS = {"adding": (20,), "copy": (5,), "selective_copy": (12,), "mqar": (4,)}


def adding_data(
    length: int, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` adding-problem sequences: inputs (count, length, 2), targets (count, 1).

    Channel 0 holds the values, channel 1 the two markers: one at a random step of
    the first half (length // 2 steps), one of the second.
    """
    check_length(length, "adding", minimum=2)
    half = length // 2
    values = rng.uniform(0.0, 1.0, size=(count, length))
    first = rng.integers(0, half, size=count)
    second = rng.integers(half, length, size=count)
    markers = np.zeros((count, length))
    rows = np.arange(count)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    inputs = np.stack([values, markers], axis=-1)  # (count, length, 2)
    targets = (values[rows, first] + values[rows, second])[:, None]  # (count, 1)
    return inputs.astype("float32"), targets.astype("float32")


def copy_data(
    delay: int, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` copy-memory sequences of delay T: one-hot inputs (count, T + 20, 10)
    and target classes (count, T + 20)."""
    check_length(delay, "copy")
    steps = delay + 2 * COPY_SYMBOLS
    symbols = rng.integers(1, COPY_ALPHABET + 1, size=(count, COPY_SYMBOLS))
    inputs = np.full((count, steps), COPY_BLANK)
    inputs[:, :COPY_SYMBOLS] = symbols
    inputs[:, COPY_SYMBOLS + delay - 1] = COPY_DELIMITER
    targets = np.full((count, steps), COPY_BLANK)
    targets[:, -COPY_SYMBOLS:] = symbols
    one_hot = np.eye(COPY_CLASSES, dtype="float32")[inputs]  # (count, T + 20, 10)
    return one_hot, targets.astype("int32")


def selective_copy_data(
    length: int, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` selective-copying sequences of T data steps: one-hot inputs (count,
    T + 11, 10) and target classes (count, T + 11); the 10 symbols stand at random
    positions of the first T steps, in the order they are to be recalled."""
    check_length(length, "selective_copy", minimum=COPY_SYMBOLS)
    steps = length + 1 + COPY_SYMBOLS
    symbols = rng.integers(1, COPY_ALPHABET + 1, size=(count, COPY_SYMBOLS))
    order = np.argsort(rng.random((count, length)), axis=1)
    positions = np.sort(order[:, :COPY_SYMBOLS], axis=1)
    inputs = np.full((count, steps), COPY_BLANK)
    np.put_along_axis(inputs, positions, symbols, axis=1)
    inputs[:, length] = COPY_DELIMITER
    targets = np.full((count, steps), COPY_BLANK)
    targets[:, -COPY_SYMBOLS:] = symbols
    one_hot = np.eye(COPY_CLASSES, dtype="float32")[inputs]
    return one_hot, targets.astype("int32")


def mqar_data(
    length: int, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` recall sequences of T key-value pairs then T queries: one-hot inputs
    (count, 3T, 33) and target classes (count, 3T), the value of each query's key
    at its step and blanks before."""
    check_length(length, "mqar")
    if length > RECALL_KEYS:
        raise ValueError(f"mqar needs length <= {RECALL_KEYS}; received {length}")
    rows = np.arange(count)[:, None]
    keys = np.argsort(rng.random((count, RECALL_KEYS)), axis=1)[:, :length] + 1
    values = rng.integers(1, RECALL_VALUES + 1, size=(count, length)) + RECALL_KEYS
    asked = np.argsort(rng.random((count, length)), axis=1)  # the queries' order
    inputs = np.zeros((count, 3 * length), dtype=np.int64)
    inputs[:, 0 : 2 * length : 2] = keys
    inputs[:, 1 : 2 * length : 2] = values
    inputs[:, 2 * length :] = keys[rows, asked]
    targets = np.zeros_like(inputs)
    targets[:, 2 * length :] = values[rows, asked]
    one_hot = np.eye(RECALL_CLASSES, dtype="float32")[inputs]
    return one_hot, targets.astype("int32")


def task_steps(task: str, length: int) -> int:
    """The steps of one sequence of `task` at `length`."""
    if task == "adding":
        return length
    if task == "mqar":
        return 3 * length
    return length + (2 * COPY_SYMBOLS if task == "copy" else 1 + COPY_SYMBOLS)


def task_classes(task: str) -> int:
    """The width of a step's input and output (one-hot classes; adding: 2 in, 1 out)."""
    return {"adding": 1, "mqar": RECALL_CLASSES}.get(task, COPY_CLASSES)


def task_data(
    task: str, length: int, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    make = {
        "adding": adding_data,
        "copy": copy_data,
        "selective_copy": selective_copy_data,
        "mqar": mqar_data,
    }[task]
    return make(length, count, rng)


def baseline_error(task: str, length: int) -> float:
    """The error of the memoryless baseline in closed form: 1/6 (adding, predicting
    1.0), 10 log(8) / steps (copy, selective copy: blanks then uniform guesses)."""
    if task == "adding":
        return 1.0 / 6.0
    if task == "mqar":
        return math.log(RECALL_VALUES) / 3.0
    return COPY_SYMBOLS * math.log(COPY_ALPHABET) / task_steps(task, length)


def baseline_outputs(task: str, targets: np.ndarray) -> np.ndarray:
    """What the baseline predicts for `targets`: 1.0 (adding); for copy, logits that
    give the blank probability 1 on the first T + 10 steps and the 8 symbols 1/8 each
    on the last 10."""
    if task == "adding":
        return np.ones_like(targets, dtype="float64")
    if task == "mqar":  # blanks, then uniform guesses over the values at queries
        logits = np.full((*targets.shape, RECALL_CLASSES), -np.inf)
        logits[..., COPY_BLANK] = np.where(targets == COPY_BLANK, 0.0, -np.inf)
        queries = (targets != COPY_BLANK)[..., None]
        logits[..., RECALL_KEYS + 1 :] = np.where(queries, 0.0, -np.inf)
        return logits
    logits = np.full((*targets.shape, COPY_CLASSES), -np.inf)
    logits[:, :-COPY_SYMBOLS, COPY_BLANK] = 0.0
    logits[:, -COPY_SYMBOLS:, 1 : COPY_ALPHABET + 1] = 0.0
    return logits


def task_error(task: str, outputs: np.ndarray, targets: np.ndarray) -> float:
    """Mean squared error (adding) or mean cross-entropy per step in nats (copy, from
    logits (count, steps, classes) and classes (count, steps))."""
    outputs = np.asarray(outputs, dtype="float64")
    if task == "adding":
        return float(np.mean((outputs.reshape(targets.shape) - targets) ** 2))
    shifted = outputs - outputs.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_probabilities = shifted - np.log(
            np.exp(shifted).sum(axis=-1, keepdims=True)
        )
    chosen = np.take_along_axis(log_probabilities, targets[..., None], axis=-1)
    return float(-np.mean(chosen))


def check_length(length: int, task: str, minimum: int = 1) -> None:
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
        raise ValueError(f"length must be an integer; received {length!r}")
    if length < minimum:
        raise ValueError(f"{task} needs length >= {minimum}; received {length}")


def build_memory_model(
    task: str, cell: str, length: int, units: int, layers: int | None = None
) -> Any:
    """`layers` (default 1) recurrent layers of rnnkit's `cell`, stacked, and a dense
    read-out: of h_T (adding) or of every h_t (copy, selective copy, mqar: logits over
    the classes).

    `cell="transformer"`: the inputs projected to `units` features, the sinusoidal
    positions added, `layers` (default 2) pre-norm causal `TransformerEncoderBlock`s
    (4 heads where `units` divides by 4, a feed-forward width of 2 `units`), a final
    LayerNorm and the same read-out (of the last position for adding)."""
    import keras

    from rnnkit.layers import get_recurrent

    steps = task_steps(task, length)
    features = 2 if task == "adding" else task_classes(task)
    if cell == TRANSFORMER:
        from rnnkit.layers import PositionalEncoding, TransformerEncoderBlock

        inputs = keras.Input((steps, features))
        x = PositionalEncoding(name="positions")(
            keras.layers.Dense(units, name="embed")(inputs)
        )
        for index in range(layers or TRANSFORMER_BLOCKS):
            block = TransformerEncoderBlock(
                num_heads=4 if units % 4 == 0 else 1,
                feedforward_dim=2 * units,
                norm_first=True,
                name=f"block_{index}",
            )
            x = block(x, use_causal_mask=True)
        x = keras.layers.LayerNormalization(name="final_norm")(x)
        if task == "adding":
            x = x[:, -1, :]
        head = keras.layers.Dense(task_classes(task), name="head")
        return keras.Model(inputs, head(x), name=f"{task}_{cell}")
    count = layers or 1
    stack = [
        get_recurrent(cell)(
            units,
            return_sequences=task != "adding" or index < count - 1,
            name=cell if count == 1 else f"{cell}_{index}",
        )
        for index in range(count)
    ]
    head = keras.layers.Dense(task_classes(task), name="head")
    return keras.Sequential(
        [keras.Input((steps, features)), *stack, head], name=f"{task}_{cell}"
    )


def train_memory_model(
    task: str,
    cell: str,
    length: int,
    settings: MemorySettings | None = None,
    *,
    clip: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """Trains a fresh model on `task` at `length` until solved or `settings.steps`.

    The weights come from `settings.seed`; the training batches, validation set and
    test set from (seed, length), so every cell and both clipping arms see the same
    data. Returns the model and its row: test error, baseline, their ratio, solved,
    steps to solve (validation check; None when not solved), steps trained, seconds.
    """
    import keras

    settings = settings or DEFAULT[task]
    keras.utils.set_random_seed(settings.seed)
    model = build_memory_model(task, cell, length, settings.units, settings.layers)
    optimizer = keras.optimizers.Adam(
        settings.learning_rate,
        global_clipnorm=settings.clipnorm if clip else None,
    )
    loss = (
        "mse"
        if task == "adding"
        else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.compile(optimizer, loss)
    seeds = [settings.seed, length]
    batches = np.random.default_rng([*seeds, 0])
    validation = task_data(
        task, length, settings.validation_size, np.random.default_rng([*seeds, 1])
    )
    test = task_data(
        task, length, settings.test_size, np.random.default_rng([*seeds, 2])
    )
    baseline = baseline_error(task, length)
    threshold = SOLVED_FRACTION * baseline
    solved_at, step = None, 0
    start = time.perf_counter()
    while step < settings.steps:
        step += 1
        model.train_on_batch(*task_data(task, length, settings.batch_size, batches))
        if step % settings.check_every == 0 or step == settings.steps:
            outputs = model.predict_on_batch(validation[0])
            if task_error(task, outputs, validation[1]) <= threshold:
                solved_at = step
                break
    seconds = time.perf_counter() - start
    error = task_error(task, model.predict_on_batch(test[0]), test[1])
    row = {
        "task": task,
        "cell": cell,
        "length": length,
        "clipnorm": settings.clipnorm if clip else 0.0,
        "test_error": error,
        "baseline": baseline,
        "error_vs_baseline": error / baseline,
        "solved": error <= threshold,
        # Solved is judged on the test set; the steps are those trained until the
        # validation check passed, or all of them when only the test set is solved.
        "steps_to_solve": (solved_at or step) if error <= threshold else None,
        "steps_trained": step,
        "seconds": seconds,
        "layers": len(model.layers) - 1
        if cell != TRANSFORMER
        else transformer_blocks(model),
        "parameters": model.count_params(),
    }
    return model, row


def gradient_probe(
    model: Any, task: str, length: int, settings: MemorySettings | None = None
) -> tuple[np.ndarray, float]:
    """Mean ||dL/dh_t|| over `settings.probe_size` test sequences by distance T - t
    (index 0: the last step), with L the loss at the last step (adding: the squared
    error of the sum; copy: the cross-entropy of the last recalled symbol, read 10 + T
    steps after it was shown), and sigma_max(W_hh) of the trained recurrent kernel."""
    import tensorflow as tf

    from rnnkit.diagnostics.gradients import spectral_norms, state_gradient_norms

    settings = settings or DEFAULT[task]
    rng = np.random.default_rng([settings.seed, length, 2])
    inputs, targets = task_data(task, length, settings.probe_size, rng)
    last_target = targets[:, -1]
    head = model.get_layer("head")

    def loss(last_hidden):
        outputs = head(last_hidden)  # (batch, 1) or (batch, classes)
        if task == "adding":
            return tf.reduce_sum(tf.square(outputs[:, 0] - last_target))
        return tf.reduce_sum(
            tf.nn.sparse_softmax_cross_entropy_with_logits(last_target, outputs)
        )

    if transformer_blocks(model):  # attention, no state to follow
        return _transformer_gradients(model, inputs, loss), math.nan
    recurrent = model.layers[0]  # of a stack, the layer that reads the inputs
    cells = [layer.cell for layer in model.layers[:-1]]
    norms = state_gradient_norms(cells, inputs, loss)  # (batch, layers, T)
    by_distance = norms[:, 0].mean(axis=0)[::-1]
    # A cell whose gates read x_t only (minGRU, the LRU) has no W_hh: NaN.
    has_kernel = hasattr(recurrent.cell, "recurrent_kernel")
    sigma = spectral_norms([recurrent])[0]["sigma_max"] if has_kernel else math.nan
    return by_distance, sigma


def _transformer_gradients(model: Any, inputs: np.ndarray, loss: Any) -> np.ndarray:
    """The Transformer's mean ||dL/dh_t|| by distance T - t, h_t its input at step t
    once projected and given its position (what the first block reads): the
    counterpart of a recurrent layer's state, as attention reaches it directly."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        hidden = model.get_layer("positions")(model.get_layer("embed")(inputs))
        tape.watch(hidden)
        x = hidden
        for index in range(transformer_blocks(model)):
            x = model.get_layer(f"block_{index}")(x, use_causal_mask=True)
        value = loss(model.get_layer("final_norm")(x)[:, -1, :])
    norms = tf.norm(tape.gradient(value, hidden), axis=-1).numpy()  # (batch, T)
    return norms.mean(axis=0)[::-1]


def transformer_blocks(model: Any) -> int:
    """The Transformer blocks of a memory model."""
    return sum(layer.name.startswith("block_") for layer in model.layers)


def parse_list(value: str, option: str, known: Sequence[str]) -> list[str]:
    """Comma-separated names of `known` ("lstm,gru"); raises `RnnkitError` naming the
    option and the valid names otherwise."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise RnnkitError(
            f"{option} {value!r}: unknown {', '.join(map(repr, unknown)) or 'empty'}; "
            f"give a comma-separated list of {', '.join(known)}"
        )
    return list(dict.fromkeys(names))


def parse_lengths(value: str) -> list[int]:
    """Comma-separated lengths ("10,25,50"), each a whole number >= 2 (the adding
    problem needs a marker in each half); raises `RnnkitError` otherwise."""
    try:
        lengths = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 2:
        raise RnnkitError(
            f"--lengths {value!r}: give comma-separated whole numbers of 2 or more, "
            "e.g. --lengths 10,25,50"
        )
    return sorted(set(lengths))
