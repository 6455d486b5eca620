"""The backends' fused recurrent kernels: cuDNN on TensorFlow, PyTorch's own on PyTorch.

`run_fused` is what `RecurrentLayer.inner_loop` tries first, as Keras' `LSTM.inner_loop`
tries `keras.backend.lstm`: it runs the layer's whole sequence in the backend's kernel,
with the layer's very weights, or raises `NotImplementedError` with the reasons it
cannot, and the layer falls back to its own loop. Every backend difference of that
choice lives here, not in the layer classes.
"""

from __future__ import annotations

import contextlib

import keras
from keras import ops

from rnnkit._keras_private import backend as keras_backend
from rnnkit.layers._cell_math import activation_name

REJECTED = "the cuDNN kernel rejected this input"


def _on_torch() -> bool:
    return keras.backend.backend() == "torch"


def blocks_model_jit() -> bool:
    """Whether a model around the layer must not be XLA-compiled as a whole: on
    TensorFlow the cuDNN kernel cannot be (as for `keras.layers.LSTM`); the generic
    loop compiles its own loops where that pays (`jit_compile`)."""
    return keras.backend.backend() == "tensorflow"


def cudnn_mask_ok(mask):
    """True where cuDNN can take the mask: right-padded, no fully masked row."""
    mask = ops.cast(mask, "bool")  # (batch, time)
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (batch,)
    steps = ops.arange(ops.shape(mask)[1], dtype="int32")  # (time,)
    right_padded = ops.expand_dims(steps, 0) < ops.expand_dims(lengths, 1)
    return ops.logical_and(ops.all(ops.equal(mask, right_padded)), ops.all(lengths > 0))


def cudnn_mask_blocker(mask) -> str | None:
    """Why cuDNN cannot take `mask` ("" if it can), or None inside a tf.function,
    where the mask's values are known per batch only."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            return None
    if bool(cudnn_mask_ok(mask)):
        return ""
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
    if not bool(ops.all(lengths > 0)):
        return "mask with a fully masked row"
    return "left-padded mask"


def loop_in_float32(layer) -> bool:
    """Whether `layer`'s time loop (a recurrent layer's cell, the Bahdanau layer's
    per-query loop) computes in float32 although the layer's policy is
    mixed_bfloat16: on TensorFlow with no GPU visible. There the bfloat16 loop was
    slower than the float32 one (XLA's CPU backend has no fast bfloat16 matmul, and
    the hand-written backward pass was float32 only), while the float32 loop
    between bfloat16 neighbours runs at float32 speed, its inputs and outputs cast
    once per sequence: docs/performance.md, "Mixed precision on a CPU". A recurrent
    layer's call may still run in bfloat16 on a CPU with bfloat16 matrix
    instructions (`bfloat16_loop`)."""
    policy = layer.dtype_policy
    if (
        keras.backend.backend() != "tensorflow"
        or policy.compute_dtype != "bfloat16"
        or policy.variable_dtype != "float32"
    ):
        return False
    import tensorflow as tf

    return not tf.config.get_visible_devices("GPU")


# Where a recurrent layer's loop runs in bfloat16 on a CPU with bfloat16 matrix
# instructions (`bfloat16_loop`), by their kind (`calibration.machine()["bfloat16"]`):
# in training and in inference, sets of least units, rows of one loop (the batch over
# its shards) and gate blocks (the cell's `num_gates`; any where not given), of which a
# call must reach one. AMX's tiles measured on an Intel Xeon, AVX512_BF16's dot
# products on an AMD EPYC (Zen 4).
AMX_BFLOAT16_TRAINING = (
    {"units": 512, "rows": 8, "gates": 3},  # the LSTM and the GRU, not the SimpleRNN
    {"units": 512, "rows": 16},
    {"units": 1024, "rows": 8},
    {"units": 256, "rows": 32},
)
AMX_BFLOAT16_INFERENCE = (
    {"units": 512, "rows": 8, "gates": 4},  # the LSTM
    {"units": 512, "rows": 16},
    {"units": 1024, "rows": 8},
    {"units": 256, "rows": 128},
)
AVX512_BFLOAT16_TRAINING = (
    {"units": 1024, "rows": 8, "gates": 3},  # the LSTM and the GRU
    {"units": 256, "rows": 32},
)
AVX512_BFLOAT16_INFERENCE = (
    {"units": 1024, "rows": 8, "gates": 3},
    {"units": 512, "rows": 32},
    {"units": 256, "rows": 32, "gates": 4},  # the LSTM
)


def bfloat16_loop(layer, sequences, training) -> bool:
    """Whether this call of `layer`, whose cell computes in float32 under
    mixed_bfloat16 (`loop_in_float32`), runs its loop in bfloat16 instead: on a CPU
    with bfloat16 matrix instructions (AMX's tiles or AVX512_BF16), which
    TensorFlow's oneDNN matmuls use, in the plain loop (XLA's CPU backend does not
    use them), for a cell with a hand-written backward pass (LSTM, GRU, SimpleRNN:
    `bptt_num_saved`), which then runs in bfloat16 too, where the step is large
    enough for those instructions to pay for the compiled loop it gives up: the
    units, rows per loop and gates of one of the sets for that CPU and mode
    (`AMX_BFLOAT16_TRAINING`, `AVX512_BFLOAT16_INFERENCE`, ...), the rows known when
    traced. Decided per call, because a layer fixes its policy before it sees a
    batch: docs/performance.md, "On a CPU with AMX" and "A third CPU"."""
    from rnnkit.layers import _batch_shards, _export, calibration

    cell = layer.cell
    units = getattr(cell, "units", None)
    batch = sequences.shape[0]
    if (
        cell.dtype_policy.name != "float32"
        or not loop_in_float32(layer)
        or getattr(cell, "bptt_num_saved", None) is None
        or not isinstance(units, int)
        or batch is None
        or _export.active()
    ):
        return False
    sets = {
        "AMX": (AMX_BFLOAT16_TRAINING, AMX_BFLOAT16_INFERENCE),
        "AVX512_BF16": (AVX512_BFLOAT16_TRAINING, AVX512_BFLOAT16_INFERENCE),
    }.get(calibration.machine()["bfloat16"])
    if sets is None:
        return False
    shards, _ = _batch_shards.shards_for(layer, sequences)
    step = {"units": units, "rows": -(-batch // shards), "gates": cell.num_gates}
    least = sets[0] if training else sets[1]
    return any(all(step[key] >= at[key] for key in at) for at in least)


def in_bfloat16_loop(layer) -> bool:
    """Whether `layer`'s cell is running a call's bfloat16 loop (`loop_dtype`)."""
    return layer.cell.compute_dtype == "bfloat16" and loop_in_float32(layer)


@contextlib.contextmanager
def loop_dtype(layer, sequences, training):
    """Runs what it holds with `layer`'s cell computing in bfloat16 where
    `bfloat16_loop` says so for this call (its weights cast once per call, its
    states carried in float32 as always), else as the cell's policy says."""
    if not bfloat16_loop(layer, sequences, training):
        yield
        return
    layer.cell.dtype_policy = layer.dtype_policy
    try:
        yield
    finally:
        layer.cell.dtype_policy = "float32"


def fused_blockers(layer, cudnn: bool = True) -> list[str]:
    """Reasons no fused kernel can run `layer`: cuDNN on TensorFlow (a GPU visible;
    `cudnn=False` for a cell cuDNN has no kernel for), PyTorch's own kernels on
    PyTorch (CPU or GPU, any compute dtype: `run_torch`)."""
    cell = layer.cell
    reasons = []
    backend = keras.backend.backend()
    if backend != "torch":
        if not cudnn:
            return [f"{type(layer).__name__} has no cuDNN kernel"]
        if backend != "tensorflow":
            reasons.append(f"backend is {backend}")
        elif not keras_backend.cudnn_ok(
            keras.activations.tanh, keras.activations.sigmoid, False, True
        ):
            reasons.append("no GPU visible")
    if activation_name(cell.activation) not in layer._fused_activations():
        reasons.append(f"activation={activation_name(cell.activation)}")
    if layer.unroll:
        reasons.append("unroll=True")
    if not cell.use_bias and backend != "torch":
        reasons.append("use_bias=False")
    if cell.recurrent_dropout > 0:
        reasons.append(f"recurrent_dropout={cell.recurrent_dropout} > 0")
    if layer.use_cudnn is False:
        reasons.append("use_cudnn=False")
    return reasons


def torch_weights(layer):
    """The weights in the layout of PyTorch's kernels (`_torch_rnn.params`): the
    kernels transposed and the one bias."""
    from rnnkit.layers import _torch_rnn

    cell = layer.cell
    bias = cell.bias.value if cell.use_bias else None
    return _torch_rnn.params(cell.kernel.value, cell.recurrent_kernel.value, bias)


def run_torch(layer, sequences, initial_state, mask, training):
    """The fused path on the PyTorch backend: PyTorch's kernel, with the input
    dropout mask of the whole sequence applied first (as for cuDNN). It runs in
    float32 whatever the compute dtype (the variables are float32 under a mixed
    policy) and gives its outputs back in the compute dtype, as the layer's own loop
    does on a CPU under mixed_bfloat16; that loop, op by op, is far slower on a GPU
    (docs/performance.md, "On a GPU")."""
    from rnnkit.layers import _torch_rnn

    input_mask, _ = layer.cell.dropout_masks(
        sequences[:, 0, :], initial_state[0], training
    )
    if input_mask is not None:
        sequences = sequences * ops.expand_dims(input_mask, 1)  # (batch, time, in)
    lengths = None
    if mask is not None:
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
    last, outputs, states = _torch_rnn.run(
        layer._torch_kernel(),
        ops.cast(sequences, "float32"),
        [ops.cast(state, "float32") for state in initial_state],
        [ops.cast(weight, "float32") for weight in layer._torch_weights()],
        lengths=lengths,
        return_sequences=layer.return_sequences,
        go_backwards=layer.go_backwards,
        training=bool(training),
        zero_output_for_mask=layer.zero_output_for_mask,
    )
    dtype = layer.compute_dtype
    return (
        ops.cast(last, dtype),
        ops.cast(outputs, dtype),
        [ops.cast(state, dtype) for state in states],
    )


def _fused(layer, sequences, initial_state, mask, training):
    """(outputs, path) from this backend's kernel, which raises
    `NotImplementedError` for an input it rejects."""
    if _on_torch():
        outputs = run_torch(layer, sequences, initial_state, mask, training)
        return outputs, f"fused kernel: PyTorch's torch.{layer._torch_kernel()}"
    outputs = layer._run_cudnn(sequences, initial_state, mask, training)
    return outputs, "cudnn: fused kernel"


def run_fused(
    layer, sequences, initial_state, mask, training, generic_path, generic_loop
):
    """(outputs, execution path) of `layer` run by the backend's fused kernel, or
    `NotImplementedError` whose message gives the reasons it cannot be.

    `generic_path` and `generic_loop` are the layer's own loop, for a masked call
    inside a `tf.function`: its mask is known per batch only, so both paths are
    traced and each batch chooses."""
    blockers = layer._cudnn_blockers(training)
    if training and getattr(layer.cell, "weight_dropout", 0) > 0:
        # The fused kernels read the kernel variables: the layer's loop applies
        # the mask (`RecurrentCell.dropped_weights`).
        blockers.append(f"weight_dropout={layer.cell.weight_dropout} in training")
    if not blockers and mask is not None:
        # cuDNN takes right-padded masks without a fully masked row only (as
        # Keras' own check); anything else runs the generic loop. So do
        # PyTorch's kernels, given the lengths, but not read backwards.
        mask_blocker = cudnn_mask_blocker(mask)
        if mask_blocker == "" and layer.go_backwards and _on_torch():
            mask_blocker = "go_backwards with a mask"
        if mask_blocker is None:
            try:
                return _cudnn_or_generic_per_batch(
                    layer,
                    sequences,
                    initial_state,
                    mask,
                    training,
                    generic_path,
                    generic_loop,
                )
            except NotImplementedError:
                mask_blocker = REJECTED
        if mask_blocker:
            blockers = [mask_blocker]
    if blockers:
        raise NotImplementedError("; ".join(blockers))
    try:
        return _fused(layer, sequences, initial_state, mask, training)
    except NotImplementedError:
        raise NotImplementedError(REJECTED) from None


def _cudnn_or_generic_per_batch(
    layer, sequences, initial_state, mask, training, generic_path, generic_loop
):
    """Inside a tf.function: both paths traced, the batch's mask chooses (as Keras
    2's LSTM did)."""
    import tensorflow as tf

    def same_structure(loop):
        def run():
            last_output, outputs, states = loop()
            return last_output, outputs, list(states)

        return run

    def cudnn():
        return layer._run_cudnn(sequences, initial_state, mask, training)

    path = (
        "per batch in this trace: cudnn: fused kernel for right-padded masks, "
        f"{generic_path}: left-padded mask or fully masked row otherwise"
    )
    outputs = tf.cond(
        cudnn_mask_ok(mask), same_structure(cudnn), same_structure(generic_loop)
    )
    return outputs, path
