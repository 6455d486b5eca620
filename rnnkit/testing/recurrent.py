"""Checks for recurrent layers: rnnkit's own, and the ones you write.

    from rnnkit.testing import check_recurrent_layer
    check_recurrent_layer(MyLayer, numpy_forward=my_equations)

`check_recurrent_layer` runs every check that applies to the layer and to the
references you give; `recurrent_layer_checks` returns them as (name, function) pairs,
for `pytest.mark.parametrize` (one test per check, so a failure names the check).
Each check raises `AssertionError` that names what differs and by how much.

The references:
- `numpy_forward(x, weights, initial_states, mask, options) -> outputs`: the layer's
  equations in numpy, float64: `x` (batch, steps, features), `weights` the layer's
  `get_weights()` as float64, `initial_states` a list of (batch, units) arrays or None,
  `mask` (batch, steps) booleans or None (a masked step keeps the previous state and
  repeats the previous output, as Keras defines it), `options` the layer's keyword
  arguments; returns every step's output, (batch, steps, units).
  `rnnkit.testing.references` holds rnnkit's own equations (`lstm_forward`, ...),
  which take the weights as separate arguments and return the final states too: wrap
  one in a function of this signature to use it.
- `numpy_gradients(x, weights, output_weights, initial_states, options) -> dict`:
  optional, the gradients of sum(outputs * output_weights) by hand-written
  backpropagation through time, keyed "kernel", "recurrent_kernel", "bias" and "x"
  (the layer's weights in `get_weights()` order, then the inputs). Without it the
  gradients are checked against central differences of `numpy_forward`.
- `keras_reference`: a Keras built-in with the same weight layout
  (`keras.layers.LSTM` for an LSTM), checked with weights copied both ways.

Everything runs on the active Keras backend (TensorFlow, JAX or PyTorch); gradients
come from `tf.GradientTape`, `jax.grad` on the layer's stateless call, or
`torch.autograd.grad`. The individual `check_*` functions are public too; rnnkit's
own tests call them with more options.

Over 500 lines: it is one public checker, each check a short function that reads the
same references, tolerances and test inputs (`RecurrentFamily`); split by check,
every part would import the others' private helpers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path

import keras
import numpy as np

from rnnkit.testing._numerics import (
    TOLERANCE,
    as_list,
    assert_close,
    assert_config_names_every_argument,
    named_check,
    to_numpy,
    torch_leaf,
)
from rnnkit.testing._recurrent_core import (
    BATCH,
    FEATURES,
    MIXED_TOLERANCES,
    STEPS,
    UNITS,
    RecurrentFamily,
    check_mixed_precision,
    outputs_and_gradients,
    padding_mask,
    random_inputs,
)
from rnnkit.testing._reload import check_reloads_in_fresh_process
from rnnkit.testing._selection import refuse_unknown_checks, run_checks
from rnnkit.testing.references import numerical_gradients

__all__ = [
    "BATCH",
    "CHECK_NAMES",
    "FEATURES",
    "MIXED_TOLERANCES",
    "STEPS",
    "TOLERANCE",
    "UNITS",
    "RecurrentFamily",
    "as_list",
    "assert_close",
    "check_against_numpy",
    "check_bidirectional_parity",
    "check_cell_in_keras_rnn",
    "check_config_round_trip",
    "check_embedding_mask_ignores_padding",
    "check_export",
    "check_input_dropout_keeps_the_bias",
    "check_masked_against_numpy",
    "check_mixed_precision",
    "check_parity_with_keras",
    "check_recurrent_layer",
    "check_save_and_reload",
    "check_stateful",
    "check_training_reduces_loss",
    "outputs_and_gradients",
    "padding_mask",
    "random_inputs",
    "recurrent_layer_checks",
    "torch_leaf",
]


def check_parity_with_keras(
    family: RecurrentFamily, options: dict, mask_kind=None, training=False
):
    """Outputs and gradients equal the Keras built-in's, weights copied both ways.
    With `training=True` (TensorFlow) the gradients come from the hand-written
    backward pass."""
    x = random_inputs()
    call_kwargs = {"training": True} if training else {}
    if mask_kind:
        call_kwargs["mask"] = padding_mask(mask_kind)
    ours = family.layer(UNITS, **options)
    builtin = family.keras_layer(UNITS, **_keras_reference_options(family, options))
    ours(x, **call_kwargs)
    builtin(x, **call_kwargs)
    for source, target in ((builtin, ours), (ours, builtin)):
        # Both directions: fresh random weights each time, then copied across.
        for variable in source.trainable_variables:
            variable.assign(np.random.uniform(-0.5, 0.5, variable.shape))
        target.set_weights(source.get_weights())
        out_a, grads_a, dx_a, weights = outputs_and_gradients(ours, x, **call_kwargs)
        out_b, grads_b, dx_b, _ = outputs_and_gradients(
            builtin, x, weights, **call_kwargs
        )
        for k, (a, b) in enumerate(zip(out_a, out_b, strict=True)):
            assert_close(a, b, what=f"output {k}")
        for variable, a, b in zip(
            ours.trainable_variables, grads_a, grads_b, strict=True
        ):
            assert_close(a, b, what=f"gradient of {variable.path}")
        assert_close(dx_a, dx_b, what="gradient of the inputs")


def _keras_reference_options(family: RecurrentFamily, options: dict) -> dict:
    """The built-in's options. One exception: Keras 3.15's cuDNN LSTM on JAX (a GPU
    visible; keras-team/keras#22399) returns a `go_backwards` layer's sequence
    flipped back into input order, unlike Keras' own loop and its TensorFlow backend
    (found on an H200: 0.44 apart, equal once flipped), so there the reference is
    Keras' loop (`use_cudnn=False`)."""
    if (
        keras.backend.backend() == "jax"
        and options.get("go_backwards")
        and "use_cudnn" in inspect.signature(family.keras_layer).parameters
    ):
        return {"use_cudnn": False, **options}
    return options


def layer_weights(layer):
    return [np.asarray(w, dtype=np.float64) for w in layer.get_weights()]


def check_against_numpy(
    family: RecurrentFamily, options: dict, with_initial_state: bool, training=False
):
    """Forward pass and BPTT gradients against the numpy equations (no mask); with
    `training=True` (TensorFlow) through the hand-written backward pass."""
    x = random_inputs(1)
    rng = np.random.RandomState(7)
    initial = [
        rng.randn(BATCH, UNITS).astype("float32") for _ in range(family.num_states)
    ]
    layer = family.layer(UNITS, return_sequences=True, **options)
    call_kwargs = {"initial_state": initial} if with_initial_state else {}
    if training:
        call_kwargs["training"] = True
    layer(x, **call_kwargs)
    for variable in layer.trainable_variables:
        variable.assign(np.random.RandomState(3).uniform(-0.6, 0.6, variable.shape))
    outputs, grads, dx, output_weights = outputs_and_gradients(layer, x, **call_kwargs)
    weights = layer_weights(layer)
    initial64 = [s.astype(np.float64) for s in initial] if with_initial_state else None
    expected = family.numpy_forward(
        x.astype(np.float64), weights, initial64, None, options
    )
    assert_close(outputs[0], expected, what="outputs")
    if family.numpy_bptt is not None:
        expected_grads = family.numpy_bptt(
            x.astype(np.float64),
            weights,
            output_weights[0].astype(np.float64),
            initial64,
            options,
        )
        names = ["kernel", "recurrent_kernel", "bias"][: len(grads)]
        expected = [expected_grads[name] for name in names] + [expected_grads["x"]]
    else:
        names = [variable.path for variable in layer.trainable_variables]
        expected = _numerical_gradients(
            family, x, weights, output_weights[0], initial64, options
        )
    for name, grad, wanted in zip(
        names + ["inputs"], grads + [dx], expected, strict=True
    ):
        assert_close(grad, wanted, 1e-4, what=f"d loss / d {name}")


def _numerical_gradients(family, x, weights, output_weights, initial, options):
    """Central differences of sum(numpy_forward(...) * output_weights) with respect
    to each weight, then the inputs (float64)."""

    def loss_terms(*arrays):
        *layer_weights_, inputs = arrays
        return family.numpy_forward(
            inputs, list(layer_weights_), initial, None, options
        )

    return numerical_gradients(
        loss_terms, [*weights, x.astype(np.float64)], output_weights.astype(np.float64)
    )


def check_masked_against_numpy(family: RecurrentFamily, mask_kind: str):
    """Masked steps keep the previous state, for right- and left-padded batches."""
    x = random_inputs(2)
    mask = padding_mask(mask_kind)
    layer = family.layer(UNITS, return_sequences=True)
    outputs = keras.ops.convert_to_numpy(layer(x, mask=mask))
    expected = family.numpy_forward(
        x.astype(np.float64), layer_weights(layer), None, mask, {}
    )
    assert_close(outputs, expected, what=f"{mask_kind}-padded outputs")


def check_embedding_mask_ignores_padding(family: RecurrentFamily):
    """Through Embedding(mask_zero=True): padded batches equal the unpadded ones."""
    tokens = np.array([[4, 7, 2, 9]])
    model = keras.Sequential(
        [keras.layers.Embedding(12, 5, mask_zero=True), family.layer(UNITS)]
    )
    reference = keras.ops.convert_to_numpy(model(tokens))
    right = keras.ops.convert_to_numpy(model(np.array([[4, 7, 2, 9, 0, 0]])))
    left = keras.ops.convert_to_numpy(model(np.array([[0, 0, 0, 4, 7, 2, 9]])))
    assert_close(right, reference, what="right padding")
    assert_close(left, reference, what="left padding")


def check_stateful(family: RecurrentFamily, training=False):
    """A stateful layer continues from the last batch; reset_state() starts over."""
    x = random_inputs(3, batch=2, steps=8)
    whole = family.layer(UNITS, return_sequences=True)
    stateful = family.layer(UNITS, return_sequences=True, stateful=True)
    whole(x)
    stateful(x[:, :4])
    stateful.set_weights(whole.get_weights())
    stateful.reset_state()

    def run(layer, inputs):
        return keras.ops.convert_to_numpy(layer(inputs, training=training))

    expected = run(whole, x)
    first = run(stateful, x[:, :4])
    second = run(stateful, x[:, 4:])
    assert_close(np.concatenate([first, second], 1), expected, what="stateful halves")
    stateful.reset_state()
    assert_close(run(stateful, x[:, :4]), first, what="after reset")


def check_bidirectional_parity(family: RecurrentFamily, training=False):
    """Bidirectional, right-padded: outputs and gradients equal the built-in's (or,
    without one, those of `keras.layers.RNN` over the cell: Keras' own loop)."""
    x = random_inputs(4)
    ours = keras.layers.Bidirectional(family.layer(UNITS, return_sequences=True))
    builtin = keras.layers.Bidirectional(
        family.keras_layer(UNITS, return_sequences=True)
        if family.keras_layer is not None
        else keras.layers.RNN(family.cell(UNITS), return_sequences=True)
    )
    ours(x)
    builtin(x)
    ours.set_weights(builtin.get_weights())
    kwargs = {"mask": padding_mask("right"), "training": training}
    out_a, grads_a, dx_a, weights = outputs_and_gradients(ours, x, **kwargs)
    out_b, grads_b, dx_b, _ = outputs_and_gradients(builtin, x, weights, **kwargs)
    assert_close(out_a[0], out_b[0], what="bidirectional outputs")
    for a, b in zip(grads_a, grads_b, strict=True):
        assert_close(a, b, what="bidirectional gradients")
    assert_close(dx_a, dx_b, what="bidirectional input gradients")


def check_input_dropout_keeps_the_bias(family: RecurrentFamily):
    """Input dropout drops inputs, never the biases (folded into the input kernels):
    on all-zero inputs a training call with dropout equals one without, in the
    layer's own loop and with the cell inside keras.layers.RNN."""
    x = np.zeros((BATCH, STEPS, FEATURES), "float32")
    initial = [
        np.random.RandomState(9).randn(BATCH, UNITS).astype("float32")
        for _ in range(family.num_states)
    ]
    reference = family.layer(UNITS, return_sequences=True)
    reference(x, initial_state=initial)
    for variable in reference.trainable_variables:
        variable.assign(np.random.RandomState(4).uniform(-0.6, 0.6, variable.shape))
    expected = keras.ops.convert_to_numpy(reference(x, initial_state=initial))
    dropped = [
        family.layer(UNITS, return_sequences=True, dropout=0.5, seed=1),
        keras.layers.RNN(
            family.cell(UNITS, dropout=0.5, seed=1), return_sequences=True
        ),
    ]
    for layer in dropped:
        layer(x, initial_state=initial)
        layer.set_weights(reference.get_weights())
        outputs = layer(x, initial_state=initial, training=True)
        assert_close(
            keras.ops.convert_to_numpy(outputs), expected, what=type(layer).__name__
        )


def check_cell_in_keras_rnn(family: RecurrentFamily):
    """The cell works in keras.layers.RNN and StackedRNNCells like the layer."""
    x = random_inputs(5)
    layer = family.layer(UNITS)
    rnn = keras.layers.RNN(family.cell(UNITS))
    layer(x)
    rnn(x)
    rnn.set_weights(layer.get_weights())
    assert_close(
        keras.ops.convert_to_numpy(rnn(x)), keras.ops.convert_to_numpy(layer(x))
    )
    # Two stacked cells compute what two stacked layers with the same weights do.
    first, second = family.layer(UNITS, return_sequences=True), family.layer(3)
    expected = keras.ops.convert_to_numpy(second(first(x)))
    stacked = keras.layers.RNN(
        keras.layers.StackedRNNCells([family.cell(UNITS), family.cell(3)])
    )
    stacked(x)
    stacked.set_weights(first.get_weights() + second.get_weights())
    outputs = keras.ops.convert_to_numpy(stacked(x))
    assert outputs.shape == (BATCH, 3)
    assert_close(outputs, expected, what="StackedRNNCells vs stacked layers")


def check_save_and_reload(family: RecurrentFamily, tmp_path):
    """A model saved to .keras reloads in a fresh process that imports only rnnkit
    and `family.reload_modules`."""
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(20, 6, mask_zero=True),
            keras.layers.Bidirectional(
                family.layer(UNITS, return_sequences=True, dropout=0.1)
            ),
            family.layer(UNITS, go_backwards=True),
            keras.layers.Dense(1),
        ]
    )
    tokens = np.array([[3, 5, 7, 0], [0, 0, 9, 2]])
    check_reloads_in_fresh_process(
        model,
        tokens,
        Path(tmp_path) / f"{family.name}.keras",
        modules=family.reload_modules,
        package=family.layer.__module__.split(".")[0],
    )


def msft_windows(window=20, count=256):
    """Real data: windows of standardised MSFT daily log returns -> next return."""
    from pmdarima.datasets import load_msft

    close = load_msft()["Close"].to_numpy(dtype=np.float64)[-(count + window + 1) :]
    returns = np.diff(np.log(close))
    returns = (returns - returns.mean()) / returns.std()
    x = np.stack([returns[i : i + window] for i in range(count)])[..., None]
    y = returns[window : window + count, None]
    return x.astype("float32"), y.astype("float32")


def check_training_reduces_loss(family: RecurrentFamily):
    """A few optimiser steps on real MSFT windows reduce the training loss."""
    keras.utils.set_random_seed(0)
    x, y = msft_windows()
    model = keras.Sequential(
        [keras.Input((None, 1)), family.layer(8), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    before = model.evaluate(x, y, verbose=0)
    initial = [np.array(w) for w in model.layers[0].get_weights()]
    model.fit(x, y, epochs=3, batch_size=64, verbose=0, shuffle=False)
    after = model.evaluate(x, y, verbose=0)
    assert after < before, f"the training loss went from {before:.4g} to {after:.4g}"
    moved = [
        float(np.max(np.abs(w - w0)))
        for w, w0 in zip(model.layers[0].get_weights(), initial, strict=True)
    ]
    assert moved and max(moved) > 0, (
        "training left the layer's own weights as they were"
    )


def check_config_round_trip(family: RecurrentFamily):
    """`get_config()` names every constructor argument, and `from_config` of it
    gives a layer with the same config (values other than the defaults included)
    and the same outputs with the same weights."""
    x = random_inputs(10)
    options = {"dropout": 0.25, "recurrent_dropout": 0.125}
    layer = family.layer(UNITS, return_sequences=True, go_backwards=True, **options)
    layer(x)
    config = layer.get_config()
    assert_config_names_every_argument(layer, config)
    for key, value in {**options, "units": UNITS, "go_backwards": True}.items():
        assert config.get(key) == value, f"get_config() holds {key}={config.get(key)}"
    clone = type(layer).from_config(config)
    assert clone.get_config() == config, "from_config(get_config()) differs"
    clone(x)
    clone.set_weights(layer.get_weights())
    assert_close(to_numpy(clone(x)), to_numpy(layer(x)), what="cloned layer")


def check_export(family: RecurrentFamily, tmp_path):
    """A model of the layer converts to LiteRT (builtin ops only) and to ONNX, and
    each runtime gives Keras' outputs within 1e-5, for a batch of another size and
    length too (TensorFlow backend: rnnkit exports through TensorFlow)."""
    from rnnkit.export import convert

    model = keras.Sequential(
        [keras.Input((None, FEATURES)), family.layer(UNITS), keras.layers.Dense(2)]
    )
    batches = [random_inputs(11), random_inputs(12, batch=2, steps=9)]
    for name, to_format, run in (
        ("LiteRT", convert.to_tflite, convert.run_tflite),
        ("ONNX", convert.to_onnx, convert.run_onnx),
    ):
        artefact = to_format(model)
        for x in batches:
            expected = to_numpy(model(x))
            (actual,) = as_list(run(artefact, x))
            assert_close(
                np.asarray(actual), expected, what=f"{name} outputs, shape {x.shape}"
            )


# The checks by name, in the order they run: (name, applies(family), run(family, dir)).
_CHECKS = (
    (
        "keras_parity",
        lambda f: f.keras_layer is not None,
        lambda f, d: [
            check_parity_with_keras(f, options)
            for options in (
                {},
                {"return_sequences": True, "return_state": True},
                {"go_backwards": True, "return_sequences": True},
            )
        ],
    ),
    (
        "keras_parity_masked",
        lambda f: f.keras_layer is not None,
        lambda f, d: [
            check_parity_with_keras(f, {"return_sequences": True}, kind)
            for kind in ("right", "left")
        ],
    ),
    (
        "numpy_outputs_and_gradients",
        lambda f: f.numpy_forward is not None,
        lambda f, d: [check_against_numpy(f, {}, initial) for initial in (False, True)],
    ),
    (
        "numpy_masks",
        lambda f: f.numpy_forward is not None,
        lambda f, d: [
            check_masked_against_numpy(f, kind) for kind in ("right", "left")
        ],
    ),
    ("embedding_mask", None, lambda f, d: check_embedding_mask_ignores_padding(f)),
    (
        "stateful",
        None,
        lambda f, d: [check_stateful(f, training) for training in (False, True)],
    ),
    (
        "bidirectional",
        lambda f: f.keras_layer is not None or f.cell is not None,
        lambda f, d: check_bidirectional_parity(f),
    ),
    (
        "dropout_keeps_the_bias",
        lambda f: f.cell is not None,
        lambda f, d: check_input_dropout_keeps_the_bias(f),
    ),
    (
        "cell_in_keras_rnn",
        lambda f: f.cell is not None,
        lambda f, d: check_cell_in_keras_rnn(f),
    ),
    ("config_round_trip", None, lambda f, d: check_config_round_trip(f)),
    ("fresh_process_reload", None, lambda f, d: check_save_and_reload(f, d)),
    (
        "mixed_precision",
        None,
        lambda f, d: [check_mixed_precision(f, policy) for policy in MIXED_TOLERANCES],
    ),
    ("training_reduces_loss", None, lambda f, d: check_training_reduces_loss(f)),
    (
        "export",
        lambda f: keras.backend.backend() == "tensorflow" and _export_installed(),
        lambda f, d: check_export(f, d),
    ),
)
CHECK_NAMES = tuple(name for name, _, _ in _CHECKS)


def recurrent_layer_checks(
    layer_class: type,
    *,
    numpy_forward: Callable | None = None,
    numpy_gradients: Callable | None = None,
    keras_reference: type | None = None,
    cell_class: type | None = None,
    num_states: int | None = None,
    reload_modules: Iterable[str] | None = None,
    checks: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    tmp_dir: str | Path | None = None,
) -> list[tuple[str, Callable[[], None]]]:
    """The checks that apply to `layer_class`, as (name, function) pairs.

    A check applies when its references are given: `keras_parity*` need
    `keras_reference`, `numpy_*` need `numpy_forward`, `cell_in_keras_rnn` and
    `dropout_keeps_the_bias` a cell class, `export` the TensorFlow backend. Each
    function takes no argument and raises `AssertionError` naming what differs.
    For pytest, one test per check:

        @pytest.mark.parametrize("name, check", recurrent_layer_checks(MGU, ...))
        def test_mgu(name, check):
            check()

    Args:
        layer_class: a `RecurrentLayer` subclass (or any Keras RNN layer class
            called as `layer_class(units, **options)`).
        numpy_forward: the equations in numpy (see the module docstring), or None.
        numpy_gradients: hand-written numpy gradients, or None: central differences
            of `numpy_forward`.
        keras_reference: a Keras built-in with the same weight layout, or None.
        cell_class: the cell class; default `layer_class.cell_class`.
        num_states: the number of state tensors; default from the cell's
            `state_size` (1 when there is no cell).
        reload_modules: the modules a fresh process imports before reloading a
            saved model (one name or several); default the layer's module (none for
            a class defined in `__main__`, whose reload then fails: define it in an
            importable module, which a test module imported by pytest in its
            `importlib` import mode is not).
        checks: the names to keep (default all that apply); an unknown name, or one
            whose references are missing, is a ValueError.
        skip: names to leave out (say why where you call it).
        tmp_dir: where saved models go (default: a new temporary folder per check).
    """
    family = RecurrentFamily(
        layer=layer_class,
        cell=cell_class,
        keras_layer=keras_reference,
        numpy_forward=numpy_forward,
        numpy_bptt=numpy_gradients,
        reload_modules=None
        if reload_modules is None
        else (
            (reload_modules,)
            if isinstance(reload_modules, str)
            else tuple(reload_modules)
        ),
    )
    family.num_states = num_states or _num_states(family.cell)
    wanted = None if checks is None else list(checks)
    skip = list(skip)
    refuse_unknown_checks([*(wanted or ()), *skip], CHECK_NAMES)
    selected = []
    for name, applies, run in _CHECKS:
        if (wanted is not None and name not in wanted) or name in skip:
            continue
        if applies is not None and not applies(family):
            if wanted is not None:
                raise ValueError(
                    f"check {name} cannot run on {layer_class.__name__}: it needs "
                    f"{_NEEDS[name]}"
                )
            continue
        selected.append(
            (
                name,
                named_check(name, lambda folder, run=run: run(family, folder), tmp_dir),
            )
        )
    return selected


_NEEDS = {
    "keras_parity": "keras_reference=",
    "keras_parity_masked": "keras_reference=",
    "numpy_outputs_and_gradients": "numpy_forward=",
    "numpy_masks": "numpy_forward=",
    "bidirectional": "keras_reference= or a cell class",
    "dropout_keeps_the_bias": "a cell class",
    "cell_in_keras_rnn": "a cell class",
    "export": (
        "the TensorFlow backend and rnnkit's export extra "
        '(pip install "rnnkit[export]")'
    ),
}


def _export_installed() -> bool:
    """Whether the LiteRT and ONNX converters and runtimes (`rnnkit[export]`) are."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("ai_edge_litert", "onnxruntime", "tf2onnx")
    )


def check_recurrent_layer(layer_class: type, **kwargs) -> list[str]:
    """Runs `recurrent_layer_checks(layer_class, **kwargs)` in order and returns the
    names of the checks that ran; the first failure raises `AssertionError`
    "check NAME failed: what differs, by how much".

        from rnnkit.testing import check_recurrent_layer, references
        check_recurrent_layer(LSTM, keras_reference=keras.layers.LSTM)
    """
    return run_checks(recurrent_layer_checks(layer_class, **kwargs))


def _num_states(cell) -> int:
    if cell is None:
        return 1
    size = cell(UNITS).state_size
    return len(size) if isinstance(size, (list, tuple)) else 1
