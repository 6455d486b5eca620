"""The public bases of rnnkit's recurrent layers: `RecurrentCell` and `RecurrentLayer`.

A cell keeps the Keras weight layout (`kernel`, `recurrent_kernel`, `bias`, gates side
by side along the last axis), so weights move to and from the Keras built-ins with
`get_weights`/`set_weights`. Inside the step each gate multiplies by its own block,
split once per sequence outside the time loop (`gate_weights`), with the input biases
folded into the input kernels as a last row: [x_t, 1] [W_g; b_g] = x_t W_g + b_g, so
a bias's gradient comes out of the kernel's matmul instead of a reduction over the
batch at every step. Why these pay: docs/performance.md.

How a layer runs its sequence lives in private modules: `_kernels` (cuDNN, PyTorch's
kernels), `_loops` (the generic loop, compiled or not, with the hand-written backward
pass of `_bptt`), `_xla_policy` (`jit_compile`) and `_batch_shards` (`batch_shards`).

Over 500 lines: the two bases are one contract (the cell's hooks that the layer's
loops call), mostly docstrings; split apart, neither would read without the other.
"""

from __future__ import annotations

import contextlib

import keras
from keras import ops

# The dropout-cell mix-in is private: it comes from the one module that checks such
# symbols (see its docstring).
from rnnkit._keras_private import DropoutRNNCell
from rnnkit.layers import _export, _kernels, _loops, _xla
from rnnkit.layers._cell_math import (
    STATE_DTYPE,
    activation_name,
    check_rate,
    derivative_from_output,
)


class RecurrentCell(keras.layers.Layer, DropoutRNNCell):
    """Base class of rnnkit's cells: validated arguments, weights, dropout masks.

    A cell is one time step. It follows the cell contract of `keras.layers.RNN`, so
    it also works inside `keras.layers.RNN`, `keras.layers.Bidirectional` and
    stacked cells:

    - `state_size`: an integer (one state) or a list of integers (one per state,
      e.g. `[units, units]` for h and c). Set it in `__init__`.
    - `output_size`: an integer, the size of the output (`units` by default).
    - `call(inputs, states, training=False)`: one step, x_t of shape
      (batch, input_dim) and the states of shapes (batch, size), returning
      `(output, new_states)` with the states in the structure they came in. The base
      class implements it from `gate_weights` and `step`.
    - `get_initial_state(batch_size=None)`: the zero states (float32; see below).

    rnnkit's own loop (`RecurrentLayer`) asks for more, which a subclass provides:

    - `num_gates`: how many gate blocks `kernel` and `recurrent_kernel` hold side by
      side along their last axis.
    - `build(input_shape)`: the weights, through `_add_kernels(input_dim)` and
      `_add_bias(shape, initializer)` (Keras' names and layout).
    - `gate_weights()`: the weights split per gate, in the compute dtype, with the
      input biases as a last row of the input kernels (`_with_bias_row`); the
      recurrent kernel read through `recurrent_kernel_in_use()`, so that
      `weight_dropout` reaches it.
    - `step(inputs, states, weights, input_mask=None, recurrent_mask=None)`: one step
      from `gate_weights()`, where `inputs` is [x_t, 1] (`augment_inputs`) and the
      masks are the dropout masks of the sequence (or None). Returns
      `(output, new_states)` as a list; keep carried states in `STATE_DTYPE`.
    - `augment_inputs(inputs)`: [inputs, 1] when the cell has biases. Inherited.
    - `loop_weights()`: what the layer's loop hands to every `step`; by default
      `gate_weights()`. A cell may lay them out otherwise for a backend where that
      is faster (`step` must accept both).
    - `xla_pays(training, side_by_side=False, batch=None)`: whether
      `jit_compile=None` compiles this cell's loop where no calibration decides; by
      default it does.
    - `bptt_blockers()`: why the hand-written backward pass cannot run (empty: it
      can). Inherited; it checks the dtype, recurrent dropout and activations.
    - The hand-written backward pass (optional, TensorFlow): `bptt_num_saved`,
      `bptt_num_emitted`, `bptt_weights()`, `bptt_forward(x_t, states, weights)`,
      `bptt_backward_context(weights)`, `bptt_backward(d_states, saved, context)`
      and `bptt_weight_gradients(inputs, previous, emitted, weights)`; see
      `rnnkit.layers._bptt.run`. Without them a training call differentiates the
      loop automatically.

    Precision: under a mixed policy the products run in the compute dtype, the
    built-in cells' gates in it too under float16 and in float32 under bfloat16
    (`_cell_math.activation_dtype`), and the carried states (h, the LSTM's c)
    accumulate in float32 (`STATE_DTYPE`), so small updates are not rounded away;
    on a TensorFlow CPU a `mixed_bfloat16` layer's loop computes in float32
    throughout, which is faster there, but for a call whose step is large enough on
    a CPU with AMX or AVX512_BF16 (`_kernels.bfloat16_loop`).
    Why, and the measurements: docs/guides/layers.md and docs/performance.md.

    Args:
        units: Positive integer, the size of the state.
        activation, use_bias, dropout, recurrent_dropout, seed: As for
            `keras.layers.SimpleRNNCell`, with the same defaults, as are the
            initializers, regularizers and constraints of the three weights.
        weight_dropout: DropConnect on the recurrent kernel (Wan et al. 2013), as
            AWD-LSTM's weight drop (Merity, Keskar & Socher 2018): in training, each
            entry of `recurrent_kernel` is zeroed with this probability and the rest
            scaled by 1 / (1 - rate), one mask per call shared by every step and
            every sequence of the batch. Only the layer's own loop can hold a mask
            for a whole sequence, so a training call of the cell alone (in
            `keras.layers.RNN`) refuses it. Default: 0.

    A complete new cell, registered and used by name: docs/guides/own-cell.md.
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
        weight_dropout=0.0,
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
        self.dropout = check_rate("dropout", dropout)
        self.recurrent_dropout = check_rate("recurrent_dropout", recurrent_dropout)
        self.weight_dropout = check_rate("weight_dropout", weight_dropout)
        self._dropped_recurrent_kernel = None  # set by `dropped_weights` only
        self.seed = seed
        # None in the clone a shared compiled loop is made from (see _xla.making_clone).
        self.seed_generator = (
            None if _xla.making_clone.get() else keras.random.SeedGenerator(seed=seed)
        )
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

    def get_dropout_mask(self, step_input):
        # Traced for export (inference): no mask, and no draw from the seed
        # generator, whose state update LiteRT's converter could not freeze.
        if _export.active():
            return None
        return super().get_dropout_mask(step_input)

    def get_recurrent_dropout_mask(self, step_input):
        if _export.active():
            return None
        return super().get_recurrent_dropout_mask(step_input)

    def recurrent_kernel_in_use(self):
        """The recurrent kernel the weights of this call are made of: inside
        `dropped_weights` in training, the kernel with weight dropout's mask applied;
        otherwise the variable."""
        if self._dropped_recurrent_kernel is not None:
            return self._dropped_recurrent_kernel
        return self.recurrent_kernel

    @contextlib.contextmanager
    def dropped_weights(self, training):
        """Within it, a training call's `gate_weights()` (and `bptt_weights()`,
        `loop_weights()`) read the recurrent kernel with one weight-dropout mask,
        drawn on entry (`weight_dropout`)."""
        if not training or self.weight_dropout == 0 or _export.active():
            yield
            return
        self._dropped_recurrent_kernel = keras.random.dropout(
            self.recurrent_kernel.value, self.weight_dropout, seed=self.seed_generator
        )
        try:
            yield
        finally:
            self._dropped_recurrent_kernel = None

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
        if self.compute_dtype not in ("float32", "bfloat16"):
            reasons.append(f"compute dtype {self.compute_dtype}")
        if self.recurrent_dropout > 0:
            reasons.append(f"recurrent_dropout={self.recurrent_dropout} > 0")
        for name in ("activation", "recurrent_activation"):
            if hasattr(self, name) and not derivative_from_output(getattr(self, name)):
                reasons.append(f"{name}={activation_name(getattr(self, name))}")
        return reasons

    def xla_pays(
        self, training: bool, side_by_side: bool = False, batch: int | None = None
    ) -> bool:
        """Whether the layer's loop, with `jit_compile=None`, runs compiled by XLA
        for a training (or an inference) call, on a CPU where no loaded calibration
        has measured it (`rnnkit.layers.calibration`); `side_by_side`: for a loop
        that runs beside others (the batch in one loop per core, `batch_shards`, or
        one direction of a `keras.layers.Bidirectional`); `batch`: the rows of the
        batch (None: not known when traced). By default it does."""
        return True

    def loop_weights(self):
        """The weights the layer's own loop hands to every `step`: by default
        `gate_weights()`; a cell may lay them out otherwise for the active backend
        where that is faster (`step` accepts both)."""
        return self.gate_weights()

    def call(self, inputs, states, training=False):
        if training and self.weight_dropout > 0 and not _export.active():
            raise ValueError(
                f"weight_dropout={self.weight_dropout} draws one mask of the recurrent "
                "kernel per sequence, which only the layer's own loop holds; run the "
                "cell in its rnnkit layer (e.g. rnnkit.layers.LSTM), not "
                "keras.layers.RNN, or set weight_dropout=0."
            )
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
            "weight_dropout": self.weight_dropout,
        }
        return {**super().get_config(), **config}


class _CellArgument:
    """A read-only layer attribute that is its cell's argument of the same name, as
    on `keras.layers.LSTM` (`AttributeError` where the cell has no such argument)."""

    def __set_name__(self, owner, name):
        self.name = name
        self.__doc__ = f"The cell's `{name}` argument."

    def __get__(self, layer, owner=None):
        if layer is None:
            return self
        return getattr(layer.cell, self.name)

    def __set__(self, layer, value):
        raise AttributeError(f"`{self.name}` is the cell's: set it on `layer.cell`")


class RecurrentLayer(keras.layers.RNN):
    """A `keras.layers.RNN` whose time loop feeds a `RecurrentCell` its pre-split
    weights.

    A call runs the first of these paths that can serve it, and `execution_path`
    says afterwards which one ran and why the others could not:

    1. The backend's fused kernel (`use_cudnn`), tried as Keras' `LSTM.inner_loop`
       tries its own: it raises `NotImplementedError` where it cannot serve the
       call, and the layer falls back. On TensorFlow that is cuDNN, where all of
       these hold:
        1. a GPU is visible;
        2. the activation is tanh (and the subclass's own conditions, e.g. a
           sigmoid `recurrent_activation`);
        3. `use_bias=True`;
        4. `recurrent_dropout=0`;
        5. `unroll=False`;
        6. the mask, if any, is right-padded with no fully masked row (inside a
           `tf.function` both paths are traced and each batch chooses);
        7. `use_cudnn` is not `False`.
       On PyTorch it is PyTorch's own kernel (`torch.lstm`, ...), on the CPU too,
       in float32, for right-padded masks read forwards. JAX has none.
    2. The generic loop over the cell's `step`: on TensorFlow XLA-compiled where
       that pays (`jit_compile`), the batch in shards side by side
       (`batch_shards`), and in training with the hand-written backward pass
       where the cell has one.
    3. Traced for export (`rnnkit.export.convert`), neither: the plain loop in
       operations that LiteRT runs with builtin ops and ONNX carries, with the
       same numbers (`rnnkit.layers._export`).

    `execution_path` is set while a call is traced (inside `Model.fit`: once).

    Under a mixed policy the outputs are in the compute dtype and the state in
    float32 (`RecurrentCell`, "Precision").

    A subclass sets `cell_class` (for `rnnkit.layers.get_recurrent`), passes its
    cell, and may implement the kernel hooks `_cudnn_blockers`, `_run_cudnn`,
    `_torch_kernel`, `_torch_weights`, `_fused_activations` (`_kernels`).

    Args:
        cell: A `RecurrentCell`.
        return_sequences, return_state, go_backwards, stateful, unroll: As for
            `keras.layers.RNN`.
        use_cudnn: `"auto"` (the fused kernel where it can serve the call),
            `True` (an error where it cannot) or `False`. Default: `"auto"`.
        jit_compile: On TensorFlow, whether the generic loop runs XLA-compiled.
            None (default): where that is faster, in a traced call on a CPU with a
            static number of steps; per this machine where a calibration is
            loaded (`rnnkit.layers.calibration.load`), else by the cell's
            `xla_pays`. True: always (an error where it cannot be). False: never.
            Evidence: docs/performance.md, "XLA-compiled loops".
        batch_shards: On TensorFlow, run the generic loop as this many loops over
            consecutive slices of the batch, side by side; the results are those
            of one loop. None (default): one per inter-op thread, each of at least
            8 rows, shared with the other direction of a `keras.layers.Bidirectional`
            and the replicas of a strategy on this machine, in a traced call on a
            CPU with a batch size known when traced. 1: never. Evidence:
            docs/performance.md, "One loop per core: `batch_shards`".
    """

    cell_class = None

    units = _CellArgument()
    activation = _CellArgument()
    recurrent_activation = _CellArgument()
    use_bias = _CellArgument()
    kernel_initializer = _CellArgument()
    recurrent_initializer = _CellArgument()
    bias_initializer = _CellArgument()
    unit_forget_bias = _CellArgument()
    kernel_regularizer = _CellArgument()
    recurrent_regularizer = _CellArgument()
    bias_regularizer = _CellArgument()
    kernel_constraint = _CellArgument()
    recurrent_constraint = _CellArgument()
    bias_constraint = _CellArgument()
    dropout = _CellArgument()
    recurrent_dropout = _CellArgument()
    weight_dropout = _CellArgument()
    reset_after = _CellArgument()
    seed = _CellArgument()

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
        if _kernels.blocks_model_jit():
            self.supports_jit = False
        if _kernels.loop_in_float32(self):
            # The cell computes in float32: its weights are float32 variables
            # under the policy anyway, so nothing saved changes.
            self.cell.dtype_policy = "float32"

    def _cudnn_blockers(self, training) -> list[str]:
        """Reasons this configuration cannot use the fused kernel (empty: it can)."""
        return ["no fused kernel for this cell"]

    def _run_cudnn(self, sequences, initial_state, mask, training):
        """cuDNN's (last output, outputs, states), or `NotImplementedError`."""
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
        return _kernels.torch_weights(self)

    def _bptt_blockers(self) -> list[str]:
        """Reasons a training call cannot use the hand-written backward pass."""
        return _loops.bptt_blockers(self)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        generic_path, generic_loop = _loops.generic_path(
            self, sequences, initial_state, mask, training
        )
        if _export.active():  # no fused kernel converts (`_export`)
            self.execution_path = generic_path
            return generic_loop()
        try:
            outputs, self.execution_path = _kernels.run_fused(
                self,
                sequences,
                initial_state,
                mask,
                training,
                generic_path,
                generic_loop,
            )
            return outputs
        except NotImplementedError as unavailable:
            blockers = str(unavailable)
        if self.use_cudnn is True:
            raise ValueError(
                f"`use_cudnn=True` but {self.name} cannot use cuDNN: "
                f"{blockers}. Pass use_cudnn='auto' to fall back to the "
                "generic loop."
            )
        self.execution_path = f"{generic_path}: {blockers}"
        return generic_loop()

    def call(self, sequences, initial_state=None, mask=None, training=False):
        # Once per sequence and before Keras draws the dropout masks from it: the cell
        # may compute in float32 under mixed_bfloat16 (`_kernels.loop_in_float32`),
        # or in bfloat16 for this call (`_kernels.bfloat16_loop`).
        with _kernels.loop_dtype(self, sequences, training):
            sequences = ops.cast(sequences, self.cell.compute_dtype)
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


__all__ = ["RecurrentCell", "RecurrentLayer"]
