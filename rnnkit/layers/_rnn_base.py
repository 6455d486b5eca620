"""What the recurrent cells and layers share: arguments, dropout masks, the step loop.

A cell keeps the Keras weight layout (`kernel`, `recurrent_kernel`, `bias`, gates side
by side along the last axis) so that weights move to and from `keras.layers.LSTM`,
`GRU` and `SimpleRNN` with `get_weights`/`set_weights`. Inside the step, though, each
gate multiplies by its own weight block: the layer splits the weights into per-gate
matrices once per sequence, outside the time loop, and the step runs the gates as
independent matmuls. On a CPU this trains faster than one fused matmul per step
followed by a split (see `benchmarks/recurrent.py`).

The input-side biases are folded into the input kernels: the loop reads [x_t, 1] (a
column of ones appended once per sequence) and each gate's input kernel gets its bias
as a last row, [W_g; b_g], so that [x_t, 1] [W_g; b_g] = x_t W_g + b_g. A bias added
inside the loop would cost a reduction over the batch at every step of the backward
pass (its gradient); folded in, its gradient comes out of the kernel's matmul.

Under a mixed-precision policy the gates are computed in the compute dtype (float16)
but the recurrent state that is carried from step to step (the LSTM cell state, the
GRU and simple-RNN hidden state) is kept in float32, so that small updates are not
rounded away over long sequences.

In training on the TensorFlow backend, the backward pass through the loop is written
out by hand (`_bptt.py`): the weight gradients come out of one large matmul over all
steps instead of one small matmul and one accumulation per step and weight.
"""

from __future__ import annotations

import functools
import os
import sys

import keras
from keras import ops

# Keras' time loop (`backend.rnn`), its cuDNN kernels and the dropout-cell mix-in are
# private: they come from the one module that checks them (see its docstring).
from rnnkit._keras_private import DropoutRNNCell
from rnnkit._keras_private import backend as keras_backend

STATE_DTYPE = "float32"

# With `batch_shards=None`, a shard gets at least this many rows, the smallest measured:
# on a 2-core AMD EPYC, batches of 16 in two shards of 8 trained 1.25x (GRU) and 1.61x
# (LSTM) as fast as in one loop, and inferred 1.08x and 1.21x (100 steps x 256 units;
# `benchmarks/recurrent.py --batch 16 --shards 1`).
MIN_SHARD_ROWS = 8
# How far up the calling frames `_directions` looks for a Bidirectional: from its
# `call` to the layer's `_shards_for` there are 10 on TensorFlow.
_FRAMES_TO_BIDIRECTIONAL = 40


def _check_rate(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"Argument `{name}` must be a float in [0, 1), received {name}={value!r}."
        )
    return float(value)


def _activation_name(function) -> str:
    return keras.activations.serialize(function) if function else "linear"


# The derivative of an activation written through its output y = phi(a), phi'(a) = f(y),
# for the activations the hand-written backward pass knows.
_DERIVATIVE_FROM_OUTPUT = {
    "tanh": lambda y: 1.0 - y * y,
    "sigmoid": lambda y: y * (1.0 - y),
    "relu": lambda y: ops.cast(y > 0, y.dtype),
    "linear": lambda y: ops.ones_like(y),
}


def derivative_from_output(function):
    """f with phi'(a) = f(phi(a)) for `function` = phi, or None when not known."""
    return _DERIVATIVE_FROM_OUTPUT.get(_activation_name(function))


def _on_torch() -> bool:
    return keras.backend.backend() == "torch"


def _cudnn_mask_ok(mask):
    """True where cuDNN can take the mask: right-padded, no fully masked row."""
    mask = ops.cast(mask, "bool")  # (batch, time)
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (batch,)
    steps = ops.arange(ops.shape(mask)[1], dtype="int32")  # (time,)
    right_padded = ops.expand_dims(steps, 0) < ops.expand_dims(lengths, 1)
    return ops.logical_and(ops.all(ops.equal(mask, right_padded)), ops.all(lengths > 0))


def _cudnn_mask_blocker(mask) -> str | None:
    """Why cuDNN cannot take `mask` ("" if it can), or None inside a tf.function,
    where the mask's values are known per batch only."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            return None
    if bool(_cudnn_mask_ok(mask)):
        return ""
    lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
    if not bool(ops.all(lengths > 0)):
        return "mask with a fully masked row"
    return "left-padded mask"


class RecurrentCell(keras.layers.Layer, DropoutRNNCell):
    """Base class of the rnnkit cells: validated arguments, weights, dropout masks.

    Subclasses set `num_gates`, implement `build`, `gate_weights` and `step`.
    `gate_weights()` returns the weights split per gate, with the input biases as a
    last row of the input kernels; `step` computes one time step from them and from
    inputs augmented by `augment_inputs` ([x_t, 1] with biases). `call` (the
    `keras.layers.RNN` cell contract) is `step` with freshly split weights, so a cell
    also works inside `keras.layers.RNN`.

    A cell that also implements `bptt_weights`, `bptt_forward`, `bptt_backward_context`,
    `bptt_backward` and `bptt_weight_gradients` (and sets `bptt_num_saved` and
    `bptt_num_emitted`) trains with the hand-written backward pass of `_bptt.run`.
    """

    num_gates = 1
    bptt_num_saved = None  # tensors stored per step by `bptt_forward`
    bptt_num_emitted = None  # tensors stored per step by `bptt_backward`

    def __init__(
        self,
        units,
        activation="tanh",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        seed=None,
        **kwargs,
    ):
        if not isinstance(units, int) or isinstance(units, bool) or units <= 0:
            raise ValueError(
                "Argument `units` must be a positive integer, "
                f"received units={units!r}."
            )
        super().__init__(**kwargs)
        self.units = units
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = keras.regularizers.get(recurrent_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.recurrent_constraint = keras.constraints.get(recurrent_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.dropout = _check_rate("dropout", dropout)
        self.recurrent_dropout = _check_rate("recurrent_dropout", recurrent_dropout)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed=seed)
        self.output_size = units

    def _add_kernels(self, input_dim: int) -> None:
        width = self.units * self.num_gates
        self.kernel = self.add_weight(
            shape=(input_dim, width),
            name="kernel",
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, width),
            name="recurrent_kernel",
            initializer=self.recurrent_initializer,
            regularizer=self.recurrent_regularizer,
            constraint=self.recurrent_constraint,
        )

    def _add_bias(self, shape, initializer) -> None:
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                shape=shape,
                name="bias",
                initializer=initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )

    def _split_gates(self, weight, axis=-1):
        """Splits a weight (in the compute dtype) into `num_gates` equal blocks."""
        weight = ops.cast(weight, self.compute_dtype)
        if self.num_gates == 1:
            return [weight]
        return ops.split(weight, self.num_gates, axis=axis)

    def augment_inputs(self, inputs):
        """[inputs, 1] along the last axis when the cell has biases (which
        `gate_weights()` puts in the last row of the input kernels), else `inputs`."""
        if not self.use_bias:
            return inputs
        return ops.concatenate([inputs, ops.ones_like(inputs[..., :1])], axis=-1)

    def _with_bias_row(self, kernel, bias):
        """[kernel; bias] (one more row), or `kernel` when `bias` is None."""
        if bias is None:
            return kernel
        return ops.concatenate([kernel, bias[None, :]], axis=0)

    def get_initial_state(self, batch_size=None):
        return [
            ops.zeros((batch_size, size), dtype=STATE_DTYPE)
            for size in self._state_sizes()
        ]

    def _state_sizes(self):
        size = self.state_size
        return list(size) if isinstance(size, (list, tuple)) else [size]

    def dropout_masks(self, inputs, state, training):
        """The input and recurrent dropout masks for this sequence (or None)."""
        if not training:
            return None, None
        input_mask = self.get_dropout_mask(inputs) if self.dropout > 0 else None
        recurrent_mask = (
            self.get_recurrent_dropout_mask(state)
            if self.recurrent_dropout > 0
            else None
        )
        return input_mask, recurrent_mask

    def bptt_blockers(self) -> list[str]:
        """Reasons this cell cannot use the hand-written backward pass (empty: it
        can)."""
        if self.bptt_num_saved is None:
            return ["no hand-written backward pass for this cell"]
        reasons = []
        if self.compute_dtype != "float32":
            reasons.append(f"compute dtype {self.compute_dtype}")
        if self.recurrent_dropout > 0:
            reasons.append(f"recurrent_dropout={self.recurrent_dropout} > 0")
        for name in ("activation", "recurrent_activation"):
            if hasattr(self, name) and not derivative_from_output(getattr(self, name)):
                reasons.append(f"{name}={_activation_name(getattr(self, name))}")
        return reasons

    def xla_pays(self, training: bool, side_by_side: bool = False) -> bool:
        """Whether the layer's loop, with `jit_compile=None`, runs compiled by XLA
        for a training (or an inference) call on a CPU where `rnnkit calibrate` has
        not measured it (`rnnkit.layers.calibration`): where it was measured to be
        faster than TensorFlow's plain loop on one CPU (`benchmarks/xla_loops.py`),
        for a loop alone or, `side_by_side`, one that runs beside others (the batch
        in one loop per core, `batch_shards`, or one direction of a
        `keras.layers.Bidirectional`). By default it does."""
        return True

    def loop_weights(self):
        """The weights the layer's own loop hands to every `step`: by default
        `gate_weights()`; a cell may lay them out otherwise for the active backend
        when that is measured to be faster (`step` accepts both)."""
        return self.gate_weights()

    def call(self, inputs, states, training=False):
        nested = isinstance(states, (list, tuple))
        states = list(states) if nested else [states]
        input_mask, recurrent_mask = self.dropout_masks(inputs, states[0], training)
        if input_mask is not None:
            input_mask = self.augment_inputs(input_mask)  # never drops the bias
        output, new_states = self.step(
            self.augment_inputs(inputs),
            states,
            self.gate_weights(),
            input_mask,
            recurrent_mask,
        )
        # A loop we do not own (keras.layers.RNN) carries states in the dtype it chose.
        new_states = [
            ops.cast(new, old.dtype)
            for new, old in zip(new_states, states, strict=True)
        ]
        # Give the states back in the structure they came in (as Keras cells do).
        return output, new_states if nested else new_states[0]

    def get_config(self):
        config = {
            "units": self.units,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": keras.initializers.serialize(
                self.recurrent_initializer
            ),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "recurrent_regularizer": keras.regularizers.serialize(
                self.recurrent_regularizer
            ),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "recurrent_constraint": keras.constraints.serialize(
                self.recurrent_constraint
            ),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
            "dropout": self.dropout,
            "recurrent_dropout": self.recurrent_dropout,
            "seed": self.seed,
        }
        return {**super().get_config(), **config}


def _run_loop(
    cell,
    options,
    sequences,
    initial_state,
    mask,
    weights,
    input_mask=None,
    recurrent_mask=None,
):
    """Keras' time loop over `cell.step` with the layer's `options` (go_backwards,
    unroll, zero_output_for_mask, return_sequences): (last output, outputs, states)."""
    go_backwards, unroll, zero_output_for_mask, return_sequences = options

    def step(inputs, states):
        return cell.step(inputs, states, weights, input_mask, recurrent_mask)

    return keras_backend.rnn(
        step,
        sequences,
        initial_state,
        go_backwards=go_backwards,
        mask=mask,
        unroll=unroll,
        input_length=sequences.shape[1],
        zero_output_for_mask=zero_output_for_mask,
        return_all_outputs=return_sequences,
    )


def _inter_op_threads() -> int:
    """The threads TensorFlow runs independent operations on at once: its inter-op
    pool, by default one per core this process may use."""
    import tensorflow as tf

    threads = tf.config.threading.get_inter_op_parallelism_threads()
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _local_replicas() -> int:
    """How many replicas of the `tf.distribute` strategy in scope run on this
    machine (its worker's devices), side by side: 1 without a strategy."""
    import tensorflow as tf

    if not tf.distribute.has_strategy():
        return 1
    try:
        return max(1, len(tf.distribute.get_strategy().extended.worker_devices))
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        return 1


def _run_sharded(run, shards, batch_major):
    """`run(sequences, initial_state, mask, input_mask, recurrent_mask)` on `shards`
    consecutive slices of the batch, as independent loops (TensorFlow runs them at
    once, one per inter-op thread), joined again: (last output, outputs, states) as
    for the whole batch. Slices differ in size by at most one row."""
    import tensorflow as tf

    sequences = batch_major[0]
    batch = sequences.shape[0]
    if batch is not None:
        sizes = [batch // shards + (i < batch % shards) for i in range(shards)]
    else:
        batch = tf.shape(sequences)[0]
        sizes = tf.stack([(batch + shards - 1 - i) // shards for i in range(shards)])

    def split(tensor):
        if tensor is None:
            return [None] * shards
        if isinstance(tensor, (list, tuple)):  # the initial states
            return [list(states) for states in zip(*map(split, tensor), strict=True)]
        return tf.split(tensor, sizes, axis=0)

    results = [run(*pieces) for pieces in zip(*map(split, batch_major), strict=True)]
    last, outputs, states = zip(*results, strict=True)
    return (
        tf.concat(last, axis=0),
        tf.concat(outputs, axis=0),
        [tf.concat(state, axis=0) for state in zip(*states, strict=True)],
    )


class RecurrentLayer(keras.layers.RNN):
    """A `keras.layers.RNN` whose time loop feeds a cell its pre-split weights.

    Subclasses pass their cell and may implement `_cudnn_blockers()` and
    `_run_cudnn()` to hand a qualifying configuration to the fused cuDNN kernel.
    After a call, `execution_path` says which path ran and why. It is set while the
    call is traced: eagerly that is every call, but inside a `tf.function` (as in
    `Model.fit`) it describes the trace, and a masked batch there chooses between
    cuDNN (right-padded) and the generic loop (left-padded) when it runs, which the
    string then says.
    """

    def __init__(
        self,
        cell,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        use_cudnn="auto",
        jit_compile=None,
        batch_shards=None,
        **kwargs,
    ):
        if use_cudnn not in ("auto", True, False):
            raise ValueError(
                "Argument `use_cudnn` must be 'auto', True or False, "
                f"received use_cudnn={use_cudnn!r}."
            )
        if jit_compile not in (None, True, False):
            raise ValueError(
                "Argument `jit_compile` must be None, True or False, "
                f"received jit_compile={jit_compile!r}."
            )
        if batch_shards is not None and (
            isinstance(batch_shards, bool)
            or not isinstance(batch_shards, int)
            or batch_shards < 1
        ):
            raise ValueError(
                "Argument `batch_shards` must be None or a positive integer (1: "
                f"never split the batch), received batch_shards={batch_shards!r}."
            )
        super().__init__(
            cell,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            **kwargs,
        )
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.use_cudnn = use_cudnn
        self.jit_compile = jit_compile
        self.batch_shards = batch_shards
        self.execution_path = "not run yet"
        if keras.backend.backend() == "tensorflow":
            # The cuDNN kernel cannot be compiled by XLA (as for keras.layers.LSTM);
            # the generic loop compiles its own loops where that pays
            # (`jit_compile`).
            self.supports_jit = False

    def _cudnn_blockers(self, training) -> list[str]:
        """Reasons this configuration cannot use cuDNN (empty: it can)."""
        return ["no fused kernel for this cell"]

    def _run_cudnn(self, sequences, initial_state, mask, training):
        raise NotImplementedError

    def _fused_activations(self) -> tuple[str, ...]:
        """The activations the fused kernel of this backend takes."""
        return ("tanh",)

    def _torch_kernel(self) -> str:
        """The name of PyTorch's kernel for this layer (`_torch_rnn.KERNELS`)."""
        raise NotImplementedError

    def _torch_weights(self):
        """The weights in the layout of `_torch_kernel` (`_torch_rnn.params`): by
        default the kernels transposed and the one bias."""
        from rnnkit.layers import _torch_rnn

        cell = self.cell
        bias = cell.bias.value if cell.use_bias else None
        return _torch_rnn.params(cell.kernel.value, cell.recurrent_kernel.value, bias)

    def _run_torch(self, sequences, initial_state, mask, training):
        """The fused path on the PyTorch backend: PyTorch's kernel, with the input
        dropout mask of the whole sequence applied first (as for cuDNN)."""
        from rnnkit.layers import _torch_rnn

        input_mask, _ = self.cell.dropout_masks(
            sequences[:, 0, :], initial_state[0], training
        )
        if input_mask is not None:
            sequences = sequences * ops.expand_dims(input_mask, 1)  # (batch, time, in)
        lengths = None
        if mask is not None:
            lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
        return _torch_rnn.run(
            self._torch_kernel(),
            ops.cast(sequences, self.compute_dtype),
            [ops.cast(state, self.compute_dtype) for state in initial_state],
            self._torch_weights(),
            lengths=lengths,
            return_sequences=self.return_sequences,
            go_backwards=self.go_backwards,
            training=bool(training),
            zero_output_for_mask=self.zero_output_for_mask,
        )

    def _generic_blockers(self, training) -> list[str]:
        """Reasons no fused kernel can run this layer: cuDNN on TensorFlow (a GPU
        visible), PyTorch's own kernels on PyTorch (CPU or GPU; `_torch_rnn`)."""
        cell = self.cell
        reasons = []
        backend = keras.backend.backend()
        if backend == "torch":
            if self.compute_dtype != "float32":
                reasons.append(f"compute dtype {self.compute_dtype}")
        elif backend != "tensorflow":
            reasons.append(f"backend is {backend}")
        elif not keras_backend.cudnn_ok(
            keras.activations.tanh, keras.activations.sigmoid, False, True
        ):
            reasons.append("no GPU visible")
        if _activation_name(cell.activation) not in self._fused_activations():
            reasons.append(f"activation={_activation_name(cell.activation)}")
        if self.unroll:
            reasons.append("unroll=True")
        if not cell.use_bias and backend != "torch":
            reasons.append("use_bias=False")
        if cell.recurrent_dropout > 0:
            reasons.append(f"recurrent_dropout={cell.recurrent_dropout} > 0")
        if self.use_cudnn is False:
            reasons.append("use_cudnn=False")
        return reasons

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        blockers = self._cudnn_blockers(training)
        generic_path, generic_loop = self._generic_path(
            sequences, initial_state, mask, training
        )
        if not blockers and mask is not None:
            # cuDNN takes right-padded masks without a fully masked row only (as
            # Keras' own check); anything else runs the generic loop. So do
            # PyTorch's kernels, given the lengths, but not read backwards.
            mask_blocker = _cudnn_mask_blocker(mask)
            if mask_blocker == "" and self.go_backwards and _on_torch():
                mask_blocker = "go_backwards with a mask"
            if mask_blocker is None:
                # Inside a tf.function the mask is known per batch only: both paths
                # are traced and the batch chooses (as Keras 2's LSTM did).
                try:
                    return self._cudnn_or_generic_per_batch(
                        sequences,
                        initial_state,
                        mask,
                        training,
                        generic_path,
                        generic_loop,
                    )
                except NotImplementedError:
                    mask_blocker = "the cuDNN kernel rejected this input"
            if mask_blocker:
                blockers = [mask_blocker]
        if not blockers:
            try:
                if _on_torch():
                    outputs = self._run_torch(sequences, initial_state, mask, training)
                    path = f"fused kernel: PyTorch's torch.{self._torch_kernel()}"
                else:
                    outputs = self._run_cudnn(sequences, initial_state, mask, training)
                    path = "cudnn: fused kernel"
                self.execution_path = path
                return outputs
            except NotImplementedError:
                blockers = ["the cuDNN kernel rejected this input"]
        if self.use_cudnn is True:
            raise ValueError(
                f"`use_cudnn=True` but {self.name} cannot use cuDNN: "
                f"{'; '.join(blockers)}. Pass use_cudnn='auto' to fall back to the "
                "generic loop."
            )
        self.execution_path = f"{generic_path}: {'; '.join(blockers)}"
        return generic_loop()

    def _generic_path(self, sequences, initial_state, mask, training):
        """The generic loop's name ("generic loop, XLA-compiled, hand-written
        BPTT") and runner."""
        hand_written = False
        bptt = ""
        if training:
            # Only a training call takes the hand-written backward pass: its forward
            # loop stores what the backward loop needs, which inference need not pay.
            reasons = self._bptt_blockers()
            hand_written = not reasons
            bptt = (
                ", hand-written BPTT"
                if hand_written
                else f", autodiff BPTT ({'; '.join(reasons)})"
            )
        shards, beside = self._shards_for(sequences)
        compiled, error = self._use_xla(
            sequences, training, hand_written, shards > 1 or beside > 1
        )
        path = (
            "generic loop"
            + (", XLA-compiled" if compiled else "")
            + bptt
            + (f", batch in {shards} shards side by side" if shards > 1 else "")
        )

        def generic_loop():
            if error:  # raised only when the generic loop runs (not for cuDNN)
                raise ValueError(error)
            return self._generic_loop(
                sequences, initial_state, mask, training, hand_written, compiled, shards
            )

        return path, generic_loop

    def _use_xla(self, sequences, training, hand_written, side_by_side=False):
        """(Whether the generic loop runs XLA-compiled, and the error message when
        `jit_compile=True` cannot be honoured); see `jit_compile`."""
        from rnnkit.layers import _xla

        backend = keras.backend.backend()
        if self.jit_compile is False or backend == "jax":
            return False, None  # JAX compiles the whole step anyway
        reason = None
        if backend != "tensorflow":
            reason = f"backend is {backend}"
        elif self.unroll:
            reason = "unroll=True"
        elif training and not hand_written:
            reason = "the autodiff backward pass is not compiled"
        elif not _xla.available():
            reason = "this TensorFlow cannot compile with XLA"
        if self.jit_compile:
            if reason:
                return False, (
                    f"{self.name}: jit_compile=True cannot be honoured: {reason}. "
                    "Pass jit_compile=None to fall back to the uncompiled loop."
                )
            return True, None
        if reason:
            return False, None
        import tensorflow as tf

        # jit_compile=None: where it was measured to pay, on a CPU, inside a traced
        # function (Model.fit, predict, tf.function; an eager call is a one-off that
        # the 0.4-1.6 s compilation would slow down) and for a static number of steps
        # (XLA compiles once per shape: padding every batch to its own length would
        # compile again and again). Measured on this machine (`rnnkit calibrate`)
        # where it was, else as the cell's `xla_pays` says.
        if (
            tf.executing_eagerly()
            or sequences.shape[1] is None
            or tf.config.list_logical_devices("GPU")
        ):
            return False, None
        from rnnkit.layers import calibration

        measured = calibration.measured_choice(
            self.cell, bool(training), sequences.shape[1], sequences.shape[0]
        )
        if measured is None:
            return self.cell.xla_pays(bool(training), side_by_side), None
        return measured, None

    def _shards_for(self, sequences):
        """(How many shards of the batch the generic loop runs side by side, each
        its own loop (1: the whole batch in one), and how many copies of this loop
        run side by side without them: the directions of a `Bidirectional` times
        the replicas of a distribution strategy on this machine); see
        `batch_shards`."""
        if keras.backend.backend() != "tensorflow" or self.unroll:
            return 1, 1
        import tensorflow as tf

        batch = sequences.shape[0]
        beside = self._directions() * _local_replicas()
        if self.batch_shards is not None:
            shards = self.batch_shards
        else:
            # Only a traced call runs its shards at once (eagerly they run one after
            # the other), only on a CPU (a GPU runs one loop's kernels in parallel
            # already), and only for a batch size known when traced: one loop per
            # thread of TensorFlow's inter-op pool (one per core by default), each
            # of at least MIN_SHARD_ROWS rows. The two directions of a
            # Bidirectional, and the replicas of a strategy over this machine's
            # CPUs, run side by side already: they share the threads.
            if (
                batch is None
                or tf.executing_eagerly()
                or tf.config.list_logical_devices("GPU")
            ):
                return 1, beside
            shards = min(_inter_op_threads() // beside, batch // MIN_SHARD_ROWS)
        if batch is not None:
            shards = min(shards, batch)
        return max(shards, 1), beside

    def _directions(self):
        """2 when this layer is called as one direction of a
        `keras.layers.Bidirectional` (whose two loops TensorFlow runs side by
        side), else 1. Read from the calling frames, once per trace."""
        frame = sys._getframe(1)
        for _ in range(_FRAMES_TO_BIDIRECTIONAL):
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            if isinstance(owner, keras.layers.Bidirectional) and self in (
                owner.forward_layer,
                owner.backward_layer,
            ):
                return 2
            frame = frame.f_back
        return 1

    def _cudnn_or_generic_per_batch(
        self, sequences, initial_state, mask, training, generic_path, generic_loop
    ):
        import tensorflow as tf

        def same_structure(loop):
            def run():
                last_output, outputs, states = loop()
                return last_output, outputs, list(states)

            return run

        def cudnn():
            return self._run_cudnn(sequences, initial_state, mask, training)

        self.execution_path = (
            "per batch in this trace: cudnn: fused kernel for right-padded masks, "
            f"{generic_path}: left-padded mask or fully masked row otherwise"
        )
        return tf.cond(
            _cudnn_mask_ok(mask), same_structure(cudnn), same_structure(generic_loop)
        )

    def _bptt_blockers(self) -> list[str]:
        """Reasons a training call cannot use the hand-written backward pass."""
        reasons = []
        if keras.backend.backend() != "tensorflow":
            reasons.append(f"backend is {keras.backend.backend()}")
        if self.unroll:
            reasons.append("unroll=True")
        return reasons + self.cell.bptt_blockers()

    def _generic_loop(
        self,
        sequences,
        initial_state,
        mask,
        training,
        hand_written=False,
        compiled=False,
        shards=1,
    ):
        cell = self.cell
        # Split the weights and draw the dropout masks once per sequence, outside the
        # loop: every step reuses them (variational dropout, Gal & Ghahramani 2016).
        input_mask, recurrent_mask = cell.dropout_masks(
            sequences[:, 0, :], initial_state[0], training
        )
        if input_mask is not None:
            input_mask = cell.augment_inputs(input_mask)  # never drops the bias
        sequences = cell.augment_inputs(sequences)  # [x_t, 1], once per sequence
        initial_state = [ops.cast(state, STATE_DTYPE) for state in initial_state]
        if hand_written:
            weights = cell.bptt_weights()

            def run(sequences, initial_state, mask, input_mask, recurrent_mask):
                return self._hand_written_bptt_loop(
                    sequences, initial_state, mask, input_mask, weights, compiled
                )

        else:
            weights = cell.loop_weights()

            def run(sequences, initial_state, mask, input_mask, recurrent_mask):
                if compiled:
                    return self._compiled_loop(sequences, initial_state, mask, weights)
                return _run_loop(
                    cell,
                    self._loop_options(),
                    sequences,
                    initial_state,
                    mask,
                    weights,
                    input_mask,
                    recurrent_mask,
                )

        batch_major = (sequences, initial_state, mask, input_mask, recurrent_mask)
        if shards == 1:
            return run(*batch_major)
        return _run_sharded(run, shards, batch_major)

    def _loop_options(self):
        return (
            self.go_backwards,
            self.unroll,
            self.zero_output_for_mask,
            self.return_sequences,
        )

    def _compiled_loop(self, sequences, initial_state, mask, weights):
        """`_run_loop` (no dropout) compiled by XLA; its gradient, when one is
        asked for, differentiates the uncompiled loop run again (XLA cannot hand the
        loop's intermediate values to TensorFlow's automatic differentiation)."""
        import tensorflow as tf

        from rnnkit.layers import _xla

        options = self._loop_options()
        compiled = _xla.shared_function(
            self.cell,
            ("loop", options),
            lambda cell: tf.function(
                functools.partial(_run_loop, cell, options),
                jit_compile=True,
                reduce_retracing=True,
            ),
        )
        leaves = tf.nest.flatten(weights)  # None where a cell has no such weight

        def rebuild(tensors):
            tensors = iter(tensors)
            return tf.nest.pack_sequence_as(
                weights, [None if leaf is None else next(tensors) for leaf in leaves]
            )

        num_states = len(initial_state)

        @tf.custom_gradient
        def loop(inputs, *args):
            states, weights_ = list(args[:num_states]), args[num_states:]
            last, outputs, new_states = compiled(
                tf.stop_gradient(inputs),
                [tf.stop_gradient(s) for s in states],
                mask,
                rebuild([tf.stop_gradient(w) for w in weights_]),
            )

            def gradient(*upstream):
                with tf.GradientTape() as tape:
                    tape.watch([inputs, *args])
                    again = _run_loop(
                        self.cell, options, inputs, states, mask, rebuild(weights_)
                    )
                again = [again[0], again[1], *again[2]]
                upstream = [
                    tf.zeros_like(a) if u is None else u
                    for a, u in zip(again, upstream, strict=True)
                ]
                return tape.gradient(again, [inputs, *args], output_gradients=upstream)

            return (last, outputs, *new_states), gradient

        results = loop(
            sequences,
            *initial_state,
            *[leaf for leaf in leaves if leaf is not None],
        )
        return results[0], results[1], list(results[2:])

    def _hand_written_bptt_loop(
        self, sequences, initial_state, mask, input_mask, weights, compiled=False
    ):
        """`_generic_loop` with the backward pass of `_bptt.run`; returns what
        `keras_backend.rnn` returns, with the same masking semantics."""
        from rnnkit.layers import _bptt

        if input_mask is not None:
            sequences = sequences * input_mask[:, None, :]
        inputs = ops.transpose(sequences, (1, 0, 2))  # time-major
        if mask is not None:
            mask = ops.transpose(ops.cast(mask, "bool"), (1, 0))[..., None]
        if self.go_backwards:
            inputs = ops.flip(inputs, axis=0)
            mask = None if mask is None else ops.flip(mask, axis=0)
        hidden, final_states = _bptt.run(
            self.cell,
            inputs,
            mask,
            initial_state,
            weights,
            all_steps=self.return_sequences,
            jit_compile=compiled,
        )
        # As keras_backend.rnn: a masked step outputs zeros (zero_output_for_mask) or
        # repeats the last output, which is zeros before the first kept step.
        if mask is None:
            shown = None
        elif self.zero_output_for_mask:
            shown = mask
        else:
            shown = ops.cumsum(ops.cast(mask, "int32"), axis=0) > 0
        if not self.return_sequences:
            # The last step's h_t is the final state (a masked step keeps it).
            last = final_states[0]
            if shown is not None:
                last = ops.where(shown[-1], last, ops.zeros_like(last))
            return last, last[:, None, :], final_states
        if shown is not None:
            hidden = ops.where(shown, hidden, ops.zeros_like(hidden))
        return hidden[-1], ops.transpose(hidden, (1, 0, 2)), final_states

    def call(self, sequences, initial_state=None, mask=None, training=False):
        return super().call(
            sequences, mask=mask, training=training, initial_state=initial_state
        )

    def get_config(self):
        config = super().get_config()
        del config["cell"]
        cell_config = self.cell.get_config()
        for key in ("name", "trainable", "dtype"):
            cell_config.pop(key, None)
        return {
            **config,
            **cell_config,
            "use_cudnn": self.use_cudnn,
            "jit_compile": self.jit_compile,
            "batch_shards": self.batch_shards,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


_FORWARDED = frozenset(
    [
        "units",
        "activation",
        "recurrent_activation",
        "use_bias",
        "kernel_initializer",
        "recurrent_initializer",
        "bias_initializer",
        "unit_forget_bias",
        "kernel_regularizer",
        "recurrent_regularizer",
        "bias_regularizer",
        "kernel_constraint",
        "recurrent_constraint",
        "bias_constraint",
        "dropout",
        "recurrent_dropout",
        "reset_after",
        "seed",
    ]
)


def _forward_to_cell(name):
    return property(
        lambda self: getattr(self.cell, name),
        doc=f"The cell's `{name}` argument.",
    )


for _name in _FORWARDED:
    setattr(RecurrentLayer, _name, _forward_to_cell(_name))
