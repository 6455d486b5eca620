"""Long short-term memory: `LSTMCell` (one step) and `LSTM` (a whole sequence)."""

from __future__ import annotations

import keras
from keras import ops

from rnnkit._keras_private import backend as keras_backend
from rnnkit.layers import _kernels
from rnnkit.layers._cell_math import (
    activation_dtype,
    activation_name,
    derivative_from_output,
)
from rnnkit.layers.recurrent import RecurrentCell, RecurrentLayer

INPUT_GATE, FORGET_GATE, CANDIDATE, OUTPUT_GATE = range(4)


@keras.saving.register_keras_serializable(package="rnnkit")
class LSTMCell(RecurrentCell):
    """One time step of a long short-term memory network.

    With x_t the input, h_{t-1} and c_{t-1} the previous hidden and cell states, and
    one weight block per gate (sigma = `recurrent_activation`, phi = `activation`):

        i_t = sigma(x_t W_i + h_{t-1} U_i + b_i)      input gate
        f_t = sigma(x_t W_f + h_{t-1} U_f + b_f)      forget gate
        g_t = phi(x_t W_c + h_{t-1} U_c + b_c)        candidate cell
        o_t = sigma(x_t W_o + h_{t-1} U_o + b_o)      output gate
        c_t = f_t * c_{t-1} + i_t * g_t               cell state
        h_t = o_t * phi(c_t)                          hidden state (output)

    The weights are stored as in `keras.layers.LSTMCell`: `kernel` is
    [W_i W_f W_c W_o] with shape (input_dim, 4 * units), `recurrent_kernel` is
    [U_i U_f U_c U_o] with shape (units, 4 * units), and `bias` has 4 * units entries.

    Args:
        units: Positive integer, dimensionality of the hidden and cell states.
        activation: phi, for the candidate and the output. Default: `"tanh"`.
        recurrent_activation: sigma, for the gates. Default: `"sigmoid"`.
        use_bias: Whether the gates have biases. Default: `True`.
        kernel_initializer: Initializer for `kernel`. Default: `"glorot_uniform"`.
        recurrent_initializer: Initializer for `recurrent_kernel`.
            Default: `"orthogonal"`.
        bias_initializer: Initializer for `bias`. Default: `"zeros"`.
        unit_forget_bias: Add 1 to the forget-gate bias at initialisation
            (Jozefowicz et al., 2015). Default: `True`.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: Regularizers of
            the three weights. Default: `None`.
        kernel_constraint, recurrent_constraint, bias_constraint: Constraints of
            the three weights. Default: `None`.
        dropout: Fraction of the input units to drop, with one mask per sequence.
            Default: 0.
        recurrent_dropout: Fraction of h_{t-1} to drop before the recurrent
            matmuls, one mask per sequence. Default: 0.
        seed: Seed of the dropout masks. Default: `None`.
        weight_dropout: Fraction of the recurrent kernel's entries to drop in
            training, one mask per call (AWD-LSTM's weight drop; `RecurrentCell`).
            Default: 0.

    Call arguments:
        inputs: x_t, shape (batch, input_dim).
        states: [h_{t-1}, c_{t-1}], each (batch, units).
        training: Whether dropout is active.

    Returns:
        `(h_t, [h_t, c_t])`.

    Example:
    >>> cell = LSTMCell(4)
    >>> tuple(keras.layers.RNN(cell)(np.zeros((2, 10, 8))).shape)
    (2, 4)

    Reference:
        Hochreiter & Schmidhuber (1997), "Long Short-Term Memory";
        Gers, Schmidhuber & Cummins (2000), "Learning to Forget".
    """

    num_gates = 4

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias=True,
        **kwargs,
    ):
        super().__init__(
            units,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            **kwargs,
        )
        self.recurrent_activation = keras.activations.get(recurrent_activation)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.state_size = [units, units]

    def build(self, input_shape):
        self._add_kernels(input_shape[-1])
        initializer = self.bias_initializer
        if self.unit_forget_bias:

            def initializer(_, *args, **kwargs):
                units = self.units
                return ops.concatenate(
                    [
                        self.bias_initializer((units,), *args, **kwargs),  # b_i
                        keras.initializers.Ones()((units,), *args, **kwargs),  # b_f
                        self.bias_initializer((2 * units,), *args, **kwargs),  # b_c b_o
                    ]
                )

        self._add_bias((4 * self.units,), initializer)

    def gate_weights(self):
        """Per gate g in (i, f, c, o) the stacked [W_g; b_g; U_g], shape
        (input_dim + 1 + units, units) ([W_g; U_g] without bias).

        By the concatenation identity [x_t, 1, h_{t-1}] [W_g; b_g; U_g]
        = x_t W_g + b_g + h_{t-1} U_g, each gate's pre-activation is then one matmul
        of [x_t, 1, h_{t-1}] (the 1 comes from `augment_inputs`).
        """
        biases = self._split_gates(self.bias) if self.use_bias else [None] * 4
        return [
            ops.concatenate(  # (input_dim [+ 1] + units, units)
                [self._with_bias_row(kernel, bias), recurrent_kernel], axis=0
            )
            for kernel, bias, recurrent_kernel in zip(
                self._split_gates(self.kernel),
                biases,
                self._split_gates(self.recurrent_kernel_in_use()),
                strict=True,
            )
        ]

    SMALL_STEP = 8192  # batch x units up to which one XLA loop beats the plain one

    def xla_pays(self, training, side_by_side=False, batch=None):
        """Where the loop runs beside others (the batch split into one loop per
        core, `batch_shards`, or one direction of a `Bidirectional`), in training
        and inference; in one loop alone only for a small step (`batch` x `units`
        at most `SMALL_STEP`, the batch known when traced), where the plain loop's
        per-operation cost outweighs its matmuls: a large step's four gate matmuls
        run side by side on the cores in the plain loop, which XLA's CPU loop does
        not do. `jit_compile=True` always compiles. Evidence: docs/performance.md,
        "XLA-compiled loops"."""
        if side_by_side:
            return True
        return batch is not None and batch * self.units <= self.SMALL_STEP

    def loop_weights(self):
        """`gate_weights()`, or on JAX the four stacks side by side in one
        (input_dim [+ 1] + units, 4 units) matrix, for one matmul per step: faster
        on JAX, slower on TensorFlow (whose four matmuls run side by side on the
        cores), no different on PyTorch (docs/performance.md).
        """
        stacked = self.gate_weights()
        if keras.backend.backend() == "jax":
            return [ops.concatenate(stacked, axis=-1)]
        return stacked

    def _pre_activations(self, x_t, h_in, stacked):
        """x_t W_g + b_g + h_{t-1} U_g for g in (i, f, c, o), each (batch, units);
        `x_t` is [x_t, 1] with biases. `stacked` holds one [W_g; b_g; U_g] per gate
        (`gate_weights()`) or the four side by side in one matrix (`loop_weights()`
        on JAX)."""
        xh = ops.concatenate([x_t, h_in], axis=-1)  # (batch, input_dim [+ 1] + units)
        if len(stacked) == 1:
            return ops.split(ops.matmul(xh, stacked[0]), 4, axis=-1)
        return [ops.matmul(xh, stacked[gate]) for gate in range(4)]

    def _gate_values(self, x_t, h_in, stacked):
        """(i_t, f_t, g_t, o_t) from [x_t, 1] and h_{t-1}: the products in the compute
        dtype, the activations in `activation_dtype`."""
        dtype = activation_dtype(self.compute_dtype)
        z = [ops.cast(a, dtype) for a in self._pre_activations(x_t, h_in, stacked)]
        return (
            self.recurrent_activation(z[INPUT_GATE]),
            self.recurrent_activation(z[FORGET_GATE]),
            self.activation(z[CANDIDATE]),
            self.recurrent_activation(z[OUTPUT_GATE]),
        )

    def step(self, inputs, states, weights, input_mask=None, recurrent_mask=None):
        """One step from `gate_weights()`; `inputs` = [x_t, 1] (`augment_inputs`),
        `states` = [h_{t-1}, c_{t-1}]."""
        h_prev, c_prev = states
        x_t = inputs if input_mask is None else inputs * input_mask
        h_in = ops.cast(h_prev, self.compute_dtype)
        if recurrent_mask is not None:
            h_in = h_in * recurrent_mask
        i_t, f_t, g_t, o_t = self._gate_values(x_t, h_in, weights)
        c_t = ops.cast(f_t, c_prev.dtype) * c_prev + ops.cast(i_t * g_t, c_prev.dtype)
        h_t = o_t * self.activation(ops.cast(c_t, o_t.dtype))
        return ops.cast(h_t, self.compute_dtype), [ops.cast(h_t, h_prev.dtype), c_t]

    # The hand-written backward pass (`_bptt.run`). With dh, dc the gradients of h_t
    # and c_t, and a' the derivative of each gate's pre-activation a:
    #   dc~ = dc + dh o_t phi'(c_t)         (all of c_t's gradient)
    #   i' = dc~ g_t sigma'   f' = dc~ c_{t-1} sigma'   g' = dc~ i_t phi'
    #   o' = dh phi(c_t) sigma'
    #   dL/dh_{t-1} = [i' f' g' o'] U^T     dL/dc_{t-1} = dc~ f_t
    # Each is dh or dc~ times a factor that the forward step stores.
    bptt_num_saved = 4  # factors of [i' f' g'], of o' and of dc~; f_t
    bptt_num_emitted = 1  # G = [i' f' g' o']

    def bptt_weights(self):
        return tuple(self.gate_weights())

    def bptt_forward(self, x_t, states, weights):
        h_prev, c_prev = states
        # The products in the compute dtype, the gates in float32 (`activation_dtype`:
        # this pass runs in float32 or bfloat16 only, `bptt_blockers`).
        i_t, f_t, g_t, o_t = self._gate_values(
            x_t, ops.cast(h_prev, self.compute_dtype), weights
        )
        c_t = f_t * c_prev + i_t * g_t
        phi_c = self.activation(c_t)
        sigma_prime = derivative_from_output(self.recurrent_activation)
        phi_prime = derivative_from_output(self.activation)
        saved = (
            ops.concatenate(
                [
                    g_t * sigma_prime(i_t),
                    c_prev * sigma_prime(f_t),
                    i_t * phi_prime(g_t),
                ],
                axis=-1,
            ),
            phi_c * sigma_prime(o_t),
            o_t * phi_prime(phi_c),
            f_t,
        )
        return [o_t * phi_c, c_t], saved

    def _input_and_recurrent_blocks(self, stacked):
        """([W_i W_f W_c W_o] with the bias row, [U_i U_f U_c U_o]) from the per-gate
        stacks [W_g; b_g; U_g] of `gate_weights()`."""
        rows = stacked[0].shape[0] - self.units
        return tuple(
            ops.concatenate([w[part] for w in stacked], axis=-1)
            for part in (slice(None, rows), slice(rows, None))
        )

    def bptt_backward_context(self, weights):
        return ops.transpose(self._input_and_recurrent_blocks(weights)[1])  # U^T

    def bptt_backward(self, d_states, saved, recurrent_t):
        dh, dc = d_states
        factors_ifg, factor_o, factor_c, f_t = saved
        dc = dc + dh * factor_c
        g = ops.concatenate(
            [ops.concatenate([dc, dc, dc], axis=-1) * factors_ifg, dh * factor_o],
            axis=-1,
        )
        return [ops.matmul(g, recurrent_t), dc * f_t], (g,)

    def bptt_weight_gradients(self, inputs, previous, emitted, weights):
        g = ops.reshape(emitted[0], (-1, 4 * self.units))
        input_rows = inputs.shape[-1]
        # d[W_g; b_g; U_g] = [x_t, 1, h_{t-1}]^T G_g, summed over steps and batch.
        xh = ops.reshape(
            ops.concatenate([inputs, previous], axis=-1), (-1, input_rows + self.units)
        )
        d_stacked = ops.split(ops.matmul(ops.transpose(xh), g), 4, axis=-1)
        kernel = self._input_and_recurrent_blocks(weights)[0]
        d_inputs = ops.reshape(ops.matmul(g, ops.transpose(kernel)), ops.shape(inputs))
        return d_inputs, tuple(d_stacked)

    def gate_activations(self, inputs, states):
        """The four gates of one step, for teaching: dict of (batch, units) tensors.

        Returns `{"input", "forget", "candidate", "output", "cell", "hidden"}`.
        """
        inputs = self.augment_inputs(ops.cast(inputs, self.compute_dtype))
        h_prev = ops.cast(states[0], self.compute_dtype)
        c_prev = ops.cast(states[1], activation_dtype(self.compute_dtype))
        names = ("input", "forget", "candidate", "output")
        gates = dict(
            zip(
                names,
                self._gate_values(inputs, h_prev, self.gate_weights()),
                strict=True,
            )
        )
        gates["cell"] = gates["forget"] * c_prev + gates["input"] * gates["candidate"]
        gates["hidden"] = gates["output"] * self.activation(gates["cell"])
        return gates

    def get_config(self):
        return {
            **super().get_config(),
            "recurrent_activation": activation_name(self.recurrent_activation),
            "unit_forget_bias": self.unit_forget_bias,
        }


@keras.saving.register_keras_serializable(package="rnnkit")
class LSTM(RecurrentLayer):
    """Long short-term memory layer (Hochreiter & Schmidhuber, 1997).

    Runs `LSTMCell` over a sequence. Takes the arguments of `keras.layers.LSTM` and
    stores the same weights, so `lstm.set_weights(keras_lstm.get_weights())` (and the
    reverse) gives the same outputs. It runs the first path that can serve a call
    (`RecurrentLayer`; `execution_path` says which ran and why):

    1. The fused cuDNN kernel, with the very same weights, on the TensorFlow backend
       where all of these hold:
        1. a GPU is visible;
        2. `activation="tanh"` and `recurrent_activation="sigmoid"`;
        3. `use_bias=True`;
        4. `recurrent_dropout=0`;
        5. `unroll=False`;
        6. no mask, or a right-padded one without a fully masked row;
        7. `use_cudnn` is not `False`.
    2. On the PyTorch backend, on the CPU too, PyTorch's own `torch.lstm`
       (`rnnkit.layers._torch_rnn`) under the same conditions (float32, no GPU
       needed, right-padded masks read forwards).
    3. On TensorFlow, an inference call of a batch of one in float32 without a mask,
       more than 256 and at most 512 units, at least 5 steps known when traced, and
       `jit_compile` not `True`, on a CPU where it measured faster (with AMX): a loop
       that projects every step's input before it and runs per step only the
       recurrent product, in two halves side by side, and the gates
       (`rnnkit.layers._one_sequence`).
    4. Otherwise the generic loop over the cell; a training call on TensorFlow
       differentiates it with the hand-written backward pass of
       `rnnkit.layers._bptt` (weight gradients as one matmul over all steps).

    Args:
        units, activation, recurrent_activation, use_bias: As for `LSTMCell`.
        kernel_initializer, recurrent_initializer, bias_initializer: As for
            `LSTMCell`.
        unit_forget_bias: As for `LSTMCell`.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: As for
            `LSTMCell`.
        kernel_constraint, recurrent_constraint, bias_constraint: As for
            `LSTMCell`.
        dropout, recurrent_dropout, seed, weight_dropout: As for `LSTMCell`.
        activity_regularizer: Regularizer of the output. Default: `None`.
        return_sequences: Return h_t for every step, not only the last.
            Default: `False`.
        return_state: Also return the final [h_T, c_T]. Default: `False`.
        go_backwards: Read the sequence backwards and return the reversed
            sequence. Default: `False`.
        stateful: Carry the final states of batch i into batch i + 1; clear them with
            `reset_state()`. Needs a fixed batch size. Default: `False`.
        unroll: Unroll the loop (short sequences only). Default: `False`.
        use_cudnn: `"auto"` (use the fused kernel when possible: cuDNN, or
            PyTorch's on that backend), `True` (fail if not possible) or `False`.
            Default: `"auto"`.
        jit_compile: None (default), True or False: whether the generic loop runs
            XLA-compiled on TensorFlow (`RecurrentLayer`); None follows a loaded
            calibration, else `LSTMCell.xla_pays`. Evidence:
            docs/performance.md, "XLA-compiled loops".
        batch_shards: None (default) or a positive integer: the generic loop's
            batch in this many loops side by side on TensorFlow
            (`RecurrentLayer`). Evidence: docs/performance.md, "One loop per core:
            `batch_shards`".

    Call arguments:
        sequences: (batch, time, features).
        initial_state: Optional [h_0, c_0], each (batch, units).
        mask: Optional (batch, time) booleans; masked steps keep the previous state.
            Propagated from `Embedding(mask_zero=True)` or `Masking`.
        training: Whether dropout is active.

    Returns:
        (batch, units), or (batch, time, units) with `return_sequences`; with
        `return_state`, followed by h_T and c_T.

    Example:
    >>> tuple(LSTM(4)(np.zeros((32, 10, 8))).shape)
    (32, 4)
    >>> outputs, h, c = LSTM(4, return_sequences=True, return_state=True)(
    ...     np.zeros((32, 10, 8)))
    >>> tuple(outputs.shape), tuple(h.shape), tuple(c.shape)
    ((32, 10, 4), (32, 4), (32, 4))

    Reference:
        Hochreiter & Schmidhuber (1997), "Long Short-Term Memory".
    """

    cell_class = LSTMCell

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias=True,
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        seed=None,
        weight_dropout=0.0,
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
        cell = LSTMCell(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            weight_dropout=weight_dropout,
            dtype=kwargs.get("dtype"),
            trainable=kwargs.get("trainable", True),
            name="lstm_cell",
        )
        super().__init__(
            cell,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            use_cudnn=use_cudnn,
            jit_compile=jit_compile,
            batch_shards=batch_shards,
            activity_regularizer=activity_regularizer,
            **kwargs,
        )

    def _cudnn_blockers(self, training):
        reasons = _kernels.fused_blockers(self)
        recurrent = activation_name(self.cell.recurrent_activation)
        if recurrent != "sigmoid":
            reasons.append(f"recurrent_activation={recurrent}")
        return reasons

    def _torch_kernel(self):
        return "lstm"  # gates (i, f, c, o) in Keras' order

    def _run_cudnn(self, sequences, initial_state, mask, training):
        input_mask, _ = self.cell.dropout_masks(
            sequences[:, 0, :], initial_state[0], training
        )
        if input_mask is not None:
            sequences = sequences * ops.expand_dims(input_mask, 1)  # (batch, time, in)
        return keras_backend.lstm(
            sequences,
            initial_state[0],
            initial_state[1],
            mask,
            kernel=self.cell.kernel,
            recurrent_kernel=self.cell.recurrent_kernel,
            bias=self.cell.bias,
            activation=self.cell.activation,
            recurrent_activation=self.cell.recurrent_activation,
            return_sequences=self.return_sequences,
            go_backwards=self.go_backwards,
            unroll=self.unroll,
        )


__all__ = ["LSTMCell", "LSTM"]
