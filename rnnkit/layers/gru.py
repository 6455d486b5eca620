"""Gated recurrent unit: `GRUCell` (one step) and `GRU` (a whole sequence)."""

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

UPDATE_GATE, RESET_GATE, CANDIDATE = range(3)


@keras.saving.register_keras_serializable(package="rnnkit")
class GRUCell(RecurrentCell):
    """One time step of a gated recurrent unit.

    With x_t the input, h_{t-1} the previous state and one weight block per gate
    (sigma = `recurrent_activation`, phi = `activation`):

        z_t = sigma(x_t W_z + b_z + h_{t-1} U_z + b'_z)       update gate
        r_t = sigma(x_t W_r + b_r + h_{t-1} U_r + b'_r)       reset gate
        reset_after=True (cuDNN's form, the Keras default):
            n_t = phi(x_t W_h + b_h + r_t * (h_{t-1} U_h + b'_h))
        reset_after=False (Cho et al., 2014):
            n_t = phi(x_t W_h + b_h + (r_t * h_{t-1}) U_h)
        h_t = z_t * h_{t-1} + (1 - z_t) * n_t

    The weights are stored as in `keras.layers.GRUCell`: `kernel` [W_z W_r W_h]
    (input_dim, 3 * units), `recurrent_kernel` [U_z U_r U_h] (units, 3 * units), and
    `bias` of shape (2, 3 * units) with the input biases b in row 0 and the recurrent
    biases b' in row 1 when `reset_after=True`, or (3 * units,) = b otherwise.

    Args:
        units: Positive integer, dimensionality of the state.
        activation: phi, for the candidate. Default: `"tanh"`.
        recurrent_activation: sigma, for the gates. Default: `"sigmoid"`.
        use_bias: Whether the gates have biases. Default: `True`.
        kernel_initializer, recurrent_initializer, bias_initializer: Initializers.
            Default: `"glorot_uniform"`, `"orthogonal"`, `"zeros"`.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: Default `None`.
        kernel_constraint, recurrent_constraint, bias_constraint: Default `None`.
        dropout: Fraction of the input units to drop (one mask per sequence).
            Default: 0.
        recurrent_dropout: Fraction of h_{t-1} to drop before the recurrent matmuls.
            Default: 0.
        reset_after: Apply the reset gate after the recurrent matmul.
            Default: `True`.
        seed: Seed of the dropout masks. Default: `None`.
        weight_dropout: Fraction of the recurrent kernel's entries to drop in
            training, one mask per call (AWD-LSTM's weight drop; `RecurrentCell`).
            Default: 0.

    Call arguments:
        inputs: x_t, shape (batch, input_dim).
        states: [h_{t-1}], shape (batch, units).
        training: Whether dropout is active.

    Returns:
        `(h_t, h_t)`.

    Example:
    >>> tuple(keras.layers.RNN(GRUCell(4))(np.zeros((2, 10, 8))).shape)
    (2, 4)

    Reference:
        Cho et al. (2014), "Learning Phrase Representations using RNN
        Encoder-Decoder for Statistical Machine Translation".
    """

    num_gates = 3

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        reset_after=True,
        **kwargs,
    ):
        super().__init__(units, activation=activation, use_bias=use_bias, **kwargs)
        self.recurrent_activation = keras.activations.get(recurrent_activation)
        self.reset_after = bool(reset_after)
        self.state_size = units

    def build(self, input_shape):
        self._add_kernels(input_shape[-1])
        shape = (2, 3 * self.units) if self.reset_after else (3 * self.units,)
        self._add_bias(shape, self.bias_initializer)

    def gate_weights(self):
        """([W_z; b], [W_r; b], [W_h; b]), U, b'_h or None.

        The input kernels carry as a last row every bias that is added outside the
        reset gate: with `reset_after=True` that is b_z + b'_z, b_r + b'_r and b_h
        (only b'_h, which r_t multiplies, stays apart); with `reset_after=False` it is
        b_z, b_r, b_h. Without bias the kernels are W_z, W_r, W_h. The recurrent
        kernel stays whole for one matmul per step, U = [U_z U_r U_h] with
        `reset_after=True`; with `reset_after=False` it is the pair ([U_z U_r], U_h),
        because U_h multiplies r_t * h_{t-1}.
        """
        kernels = self._split_gates(self.kernel)
        recurrent = ops.cast(self.recurrent_kernel_in_use(), self.compute_dtype)
        if not self.reset_after:
            recurrent = (recurrent[:, : 2 * self.units], recurrent[:, 2 * self.units :])
        input_biases, candidate_bias = [None] * 3, None
        if self.use_bias and self.reset_after:
            bias = ops.cast(self.bias, self.compute_dtype)
            b, b_prime = ops.split(bias[0], 3), ops.split(bias[1], 3)
            input_biases = [
                b[UPDATE_GATE] + b_prime[UPDATE_GATE],
                b[RESET_GATE] + b_prime[RESET_GATE],
                b[CANDIDATE],
            ]
            candidate_bias = b_prime[CANDIDATE]
        elif self.use_bias:
            input_biases = self._split_gates(self.bias)
        kernels = [
            self._with_bias_row(kernel, bias)
            for kernel, bias in zip(kernels, input_biases, strict=True)
        ]
        return kernels, recurrent, candidate_bias

    def _gates(self, x_t, h_in, weights):
        """(z_t, r_t, n_t, h_{t-1} U_h + b'_h) from [x_t, 1] and h_{t-1} (both in the
        compute dtype); the last is None with `reset_after=False`. The products in
        the compute dtype, the rest in `activation_dtype`."""
        kernels, recurrent, candidate_bias = weights
        dtype = activation_dtype(self.compute_dtype)

        def product(a, b):
            return ops.cast(ops.matmul(a, b), dtype)

        x_z, x_r, x_h = (product(x_t, kernel) for kernel in kernels)
        if self.reset_after:
            h_z, h_r, h_h = ops.split(product(h_in, recurrent), 3, axis=-1)
            if candidate_bias is not None:
                h_h = h_h + ops.cast(candidate_bias, dtype)
        else:
            h_z, h_r = ops.split(product(h_in, recurrent[0]), 2, axis=-1)
            h_h = None
        z_t = self.recurrent_activation(x_z + h_z)
        r_t = self.recurrent_activation(x_r + h_r)
        if self.reset_after:
            n_t = self.activation(x_h + r_t * h_h)
        else:
            reset = ops.cast(r_t, h_in.dtype) * h_in
            n_t = self.activation(x_h + product(reset, recurrent[1]))
        return z_t, r_t, n_t, h_h

    def step(self, inputs, states, weights, input_mask=None, recurrent_mask=None):
        """One step from `gate_weights()`; `inputs` = [x_t, 1] (`augment_inputs`),
        `states` = [h_{t-1}]."""
        (h_prev,) = states
        x_t = inputs if input_mask is None else inputs * input_mask
        h_in = ops.cast(h_prev, self.compute_dtype)
        if recurrent_mask is not None:
            h_in = h_in * recurrent_mask
        z_t, _, n_t, _ = self._gates(x_t, h_in, weights)
        n_t = ops.cast(n_t, h_prev.dtype)
        # z_t * h_{t-1} + (1 - z_t) * n_t, with one operation fewer per step.
        h_t = n_t + ops.cast(z_t, h_prev.dtype) * (h_prev - n_t)
        return ops.cast(h_t, self.compute_dtype), [h_t]

    # The hand-written backward pass (`_bptt.run`), for `reset_after=True`. With
    # dh = dL/dh_t, and a' the derivative of the pre-activation a of each gate:
    #   z' = dh (h_{t-1} - n_t) sigma'      n' = dh (1 - z_t) phi'
    #   r' = n' (h_{t-1} U_h + b'_h) sigma'  dL/d(h_{t-1} U_h + b'_h) = n' r_t
    #   dL/dh_{t-1} = dh z_t + [z' r' n' r_t] U^T
    # Each is dh times a factor that the forward step stores.
    bptt_num_saved = 3  # z_t, the factors of [z' r' n'] and of [z' r' n' r_t]
    bptt_num_emitted = 2  # G_x = [z' r' n'], G_h = [z' r' n' r_t]

    def xla_pays(self, training, side_by_side=False, batch=None):
        """Training and inference: XLA fuses the step's element-wise work (the
        split of the one recurrent matmul, the reset gate, the interpolation).
        Evidence: docs/performance.md, "XLA-compiled loops"."""
        return True

    def bptt_blockers(self):
        reasons = super().bptt_blockers()
        if not self.reset_after:
            reasons.append("reset_after=False")
        return reasons

    def bptt_weights(self):
        kernels, recurrent, candidate_bias = self.gate_weights()
        extra = () if candidate_bias is None else (candidate_bias,)
        return (*kernels, recurrent, *extra)

    def _bptt_unpack(self, weights):
        return weights[:3], weights[3], (weights[4] if len(weights) > 4 else None)

    def bptt_forward(self, x_t, states, weights):
        (h_prev,) = states
        # The products in the compute dtype, the gates in float32 (`activation_dtype`:
        # this pass runs in float32 or bfloat16 only, `bptt_blockers`).
        z_t, r_t, n_t, h_h = self._gates(
            x_t, ops.cast(h_prev, self.compute_dtype), self._bptt_unpack(weights)
        )
        difference = h_prev - n_t
        h_t = n_t + z_t * difference
        sigma_prime = derivative_from_output(self.recurrent_activation)
        n_factor = (1.0 - z_t) * derivative_from_output(self.activation)(n_t)
        z_r = ops.concatenate(
            [difference * sigma_prime(z_t), n_factor * h_h * sigma_prime(r_t)], axis=-1
        )
        saved = (
            z_t,
            ops.concatenate([z_r, n_factor], axis=-1),
            ops.concatenate([z_r, n_factor * r_t], axis=-1),
        )
        return [h_t], saved

    def bptt_backward_context(self, weights):
        return ops.transpose(weights[3])  # U^T, (3 units, units)

    def bptt_backward(self, d_states, saved, recurrent_t):
        (dh,) = d_states
        z_t, factors_x, factors_h = saved
        dh3 = ops.concatenate([dh, dh, dh], axis=-1)
        g_h = dh3 * factors_h
        return [dh * z_t + ops.matmul(g_h, recurrent_t)], (dh3 * factors_x, g_h)

    def bptt_weight_gradients(self, inputs, previous, emitted, weights):
        kernels, _, candidate_bias = self._bptt_unpack(weights)
        g_x, g_h = (ops.reshape(g, (-1, 3 * self.units)) for g in emitted)
        x = ops.reshape(inputs, (-1, inputs.shape[-1]))
        d_kernels = ops.split(ops.matmul(ops.transpose(x), g_x), 3, axis=-1)
        d_recurrent = ops.matmul(
            ops.transpose(ops.reshape(previous, (-1, self.units))), g_h
        )
        kernel = ops.concatenate(kernels, axis=-1)
        d_inputs = ops.reshape(
            ops.matmul(g_x, ops.transpose(kernel)), ops.shape(inputs)
        )
        extra = ()
        if candidate_bias is not None:
            extra = (ops.sum(g_h[:, 2 * self.units :], axis=0),)
        return d_inputs, (*d_kernels, d_recurrent, *extra)

    def gate_activations(self, inputs, states):
        """The gates of one step, for teaching: dict of (batch, units) tensors.

        Returns `{"update", "reset", "candidate", "hidden"}` (z_t, r_t, n_t, h_t).
        """
        inputs = self.augment_inputs(ops.cast(inputs, self.compute_dtype))
        states = states if isinstance(states, (list, tuple)) else [states]
        h_prev = ops.cast(states[0], self.compute_dtype)
        z_t, r_t, n_t, _ = self._gates(inputs, h_prev, self.gate_weights())
        hidden = z_t * ops.cast(h_prev, z_t.dtype) + (1.0 - z_t) * n_t
        return {"update": z_t, "reset": r_t, "candidate": n_t, "hidden": hidden}

    def get_config(self):
        return {
            **super().get_config(),
            "recurrent_activation": activation_name(self.recurrent_activation),
            "reset_after": self.reset_after,
        }


@keras.saving.register_keras_serializable(package="rnnkit")
class GRU(RecurrentLayer):
    """Gated recurrent unit layer (Cho et al., 2014).

    Runs `GRUCell` over a sequence. Takes the arguments of `keras.layers.GRU` and
    stores the same weights, so `gru.set_weights(keras_gru.get_weights())` (and the
    reverse) gives the same outputs. It runs the first path that can serve a call
    (`RecurrentLayer`; `execution_path` says which ran and why):

    1. The fused cuDNN kernel, with the same weights, on the TensorFlow backend
       where all of these hold:
        1. a GPU is visible;
        2. `activation="tanh"` and `recurrent_activation="sigmoid"`;
        3. `use_bias=True`;
        4. `reset_after=True`;
        5. `recurrent_dropout=0`;
        6. `unroll=False`;
        7. no mask, or a right-padded one without a fully masked row;
        8. `use_cudnn` is not `False`.
    2. On the PyTorch backend, on the CPU too, PyTorch's own `torch.gru`
       (`rnnkit.layers._torch_rnn`) under the same conditions (float32, no GPU
       needed, right-padded masks read forwards).
    3. Otherwise the generic loop over the cell; a training call on TensorFlow
       differentiates it with the hand-written backward pass of
       `rnnkit.layers._bptt` (weight gradients as one matmul over all steps).

    Args:
        units, activation, recurrent_activation, use_bias: As for `GRUCell`.
        kernel_initializer, recurrent_initializer, bias_initializer: As for
            `GRUCell`.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: As for
            `GRUCell`.
        kernel_constraint, recurrent_constraint, bias_constraint: As for
            `GRUCell`.
        dropout, recurrent_dropout, reset_after, seed, weight_dropout: As for `GRUCell`.
        activity_regularizer: Regularizer of the output. Default: `None`.
        return_sequences: Return h_t for every step. Default: `False`.
        return_state: Also return the final h_T. Default: `False`.
        go_backwards: Read the sequence backwards and return the reversed sequence.
            Default: `False`.
        stateful: Carry the final state of batch i into batch i + 1; clear it with
            `reset_state()`. Needs a fixed batch size. Default: `False`.
        unroll: Unroll the loop (short sequences only). Default: `False`.
        use_cudnn: `"auto"` (use the fused kernel when possible: cuDNN, or
            PyTorch's on that backend), `True` (fail if not possible) or `False`.
            Default: `"auto"`.
        jit_compile: None (default), True or False: whether the generic loop runs
            XLA-compiled on TensorFlow (`RecurrentLayer`); None follows a loaded
            calibration, else `GRUCell.xla_pays`. Evidence:
            docs/performance.md, "XLA-compiled loops".
        batch_shards: None (default) or a positive integer: the generic loop's
            batch in this many loops side by side on TensorFlow
            (`RecurrentLayer`). Evidence: docs/performance.md, "One loop per core:
            `batch_shards`".

    Call arguments:
        sequences: (batch, time, features).
        initial_state: Optional h_0, (batch, units).
        mask: Optional (batch, time) booleans; masked steps keep the previous state.
        training: Whether dropout is active.

    Returns:
        (batch, units), or (batch, time, units) with `return_sequences`; with
        `return_state`, followed by h_T.

    Example:
    >>> tuple(GRU(4, return_sequences=True)(np.zeros((32, 10, 8))).shape)
    (32, 10, 4)

    Reference:
        Cho et al. (2014), "Learning Phrase Representations using RNN
        Encoder-Decoder for Statistical Machine Translation".
    """

    cell_class = GRUCell

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
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
        reset_after=True,
        use_cudnn="auto",
        jit_compile=None,
        batch_shards=None,
        **kwargs,
    ):
        cell = GRUCell(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            reset_after=reset_after,
            seed=seed,
            weight_dropout=weight_dropout,
            dtype=kwargs.get("dtype"),
            trainable=kwargs.get("trainable", True),
            name="gru_cell",
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
        if not self.cell.reset_after:
            reasons.append("reset_after=False")
        return reasons

    def _torch_kernel(self):
        return "gru"  # reset_after=True: the reset gate scales h_{t-1} U_h + b'_h

    def _torch_weights(self):
        from rnnkit.layers import _torch_rnn

        cell = self.cell

        def reordered(weight):
            return _torch_rnn.gru_gate_order(weight, cell.units)

        biases = []
        if cell.use_bias:  # (2, 3 units): input and recurrent biases
            biases = [reordered(cell.bias.value[0]), reordered(cell.bias.value[1])]
        return _torch_rnn.params(
            reordered(cell.kernel.value),
            reordered(cell.recurrent_kernel.value),
            *biases,
        )

    def _run_cudnn(self, sequences, initial_state, mask, training):
        input_mask, _ = self.cell.dropout_masks(
            sequences[:, 0, :], initial_state[0], training
        )
        if input_mask is not None:
            sequences = sequences * ops.expand_dims(input_mask, 1)  # (batch, time, in)
        return keras_backend.gru(
            sequences,
            initial_state[0],
            mask,
            kernel=self.cell.kernel,
            recurrent_kernel=self.cell.recurrent_kernel,
            bias=self.cell.bias,
            activation=self.cell.activation,
            recurrent_activation=self.cell.recurrent_activation,
            return_sequences=self.return_sequences,
            go_backwards=self.go_backwards,
            unroll=self.unroll,
            reset_after=self.cell.reset_after,
        )


__all__ = ["GRUCell", "GRU"]
