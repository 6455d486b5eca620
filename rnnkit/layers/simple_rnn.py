"""The Elman recurrent network: `SimpleRNNCell` (one step) and `SimpleRNN`."""

from __future__ import annotations

import keras
from keras import ops

from rnnkit.layers import _kernels
from rnnkit.layers._cell_math import (
    activation_dtype,
    activation_name,
    derivative_from_output,
)
from rnnkit.layers.recurrent import RecurrentCell, RecurrentLayer


@keras.saving.register_keras_serializable(package="rnnkit")
class SimpleRNNCell(RecurrentCell):
    """One time step of a fully-connected (Elman) recurrent network.

        h_t = phi(x_t W_xh + h_{t-1} W_hh + b_h)

    which is the same as `[x_t, h_{t-1}] [W_xh; W_hh] + b_h`: one matmul of the
    concatenated input and state with the stacked weights. The weights are stored as
    in `keras.layers.SimpleRNNCell`: `kernel` = W_xh (input_dim, units),
    `recurrent_kernel` = W_hh (units, units), `bias` = b_h (units,).

    Args:
        units: Positive integer, dimensionality of the state.
        activation: phi. Default: `"tanh"`.
        use_bias: Whether to add b_h. Default: `True`.
        kernel_initializer, recurrent_initializer, bias_initializer: Initializers.
            Default: `"glorot_uniform"`, `"orthogonal"`, `"zeros"`.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: Default `None`.
        kernel_constraint, recurrent_constraint, bias_constraint: Default `None`.
        dropout: Fraction of the input units to drop (one mask per sequence).
            Default: 0.
        recurrent_dropout: Fraction of h_{t-1} to drop before W_hh. Default: 0.
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
    >>> tuple(keras.layers.RNN(SimpleRNNCell(4))(np.zeros((2, 10, 8))).shape)
    (2, 4)

    Reference:
        Elman (1990), "Finding Structure in Time".
    """

    def __init__(self, units, activation="tanh", use_bias=True, **kwargs):
        super().__init__(units, activation=activation, use_bias=use_bias, **kwargs)
        self.state_size = units

    def build(self, input_shape):
        self._add_kernels(input_shape[-1])
        self._add_bias((self.units,), self.bias_initializer)

    def gate_weights(self):
        """([W_xh; b_h] (or W_xh without bias), W_hh), in the compute dtype."""
        (kernel,) = self._split_gates(self.kernel)
        (recurrent_kernel,) = self._split_gates(self.recurrent_kernel_in_use())
        bias = self._split_gates(self.bias)[0] if self.use_bias else None
        return self._with_bias_row(kernel, bias), recurrent_kernel

    def xla_pays(self, training, side_by_side=False, batch=None):
        """Inference, and training where the loop runs beside others (the batch
        split into one loop per core, `batch_shards`, or in a `Bidirectional`): its
        one matmul and one tanh per step leave XLA little to fuse in one loop
        alone. Evidence: docs/performance.md, "XLA-compiled loops"."""
        return side_by_side or not training

    def step(self, inputs, states, weights, input_mask=None, recurrent_mask=None):
        """One step from `gate_weights()`; `inputs` = [x_t, 1] (`augment_inputs`),
        `states` = [h_{t-1}]."""
        (h_prev,) = states
        kernel, recurrent_kernel = weights
        x_t = inputs if input_mask is None else inputs * input_mask
        h_in = ops.cast(h_prev, self.compute_dtype)
        if recurrent_mask is not None:
            h_in = h_in * recurrent_mask
        # [x_t, 1] [W_xh; b_h] + h_{t-1} W_hh = x_t W_xh + h_{t-1} W_hh + b_h
        z_t = ops.matmul(x_t, kernel) + ops.matmul(h_in, recurrent_kernel)  # (b, u)
        z_t = ops.cast(z_t, activation_dtype(self.compute_dtype))
        h_t = self.activation(z_t) if self.activation is not None else z_t
        return ops.cast(h_t, self.compute_dtype), [ops.cast(h_t, h_prev.dtype)]

    # The hand-written backward pass (`_bptt.run`): with dh = dL/dh_t,
    #   a' = dh phi'(a_t)      dL/dh_{t-1} = a' W_hh^T
    bptt_num_saved = 1  # phi'(a_t)
    bptt_num_emitted = 1  # a'

    def bptt_weights(self):
        return tuple(self.gate_weights())

    def bptt_forward(self, x_t, states, weights):
        _, (h_t,) = self.step(x_t, states, weights)
        return [h_t], (derivative_from_output(self.activation)(h_t),)

    def bptt_backward_context(self, weights):
        return ops.transpose(weights[1])

    def bptt_backward(self, d_states, saved, recurrent_t):
        g = d_states[0] * saved[0]
        return [ops.matmul(g, recurrent_t)], (g,)

    def bptt_weight_gradients(self, inputs, previous, emitted, weights):
        kernel, _ = weights
        g = ops.reshape(emitted[0], (-1, self.units))
        x = ops.reshape(inputs, (-1, inputs.shape[-1]))
        h = ops.reshape(previous, (-1, self.units))
        d_inputs = ops.reshape(ops.matmul(g, ops.transpose(kernel)), ops.shape(inputs))
        return d_inputs, (
            ops.matmul(ops.transpose(x), g),
            ops.matmul(ops.transpose(h), g),
        )


@keras.saving.register_keras_serializable(package="rnnkit")
class SimpleRNN(RecurrentLayer):
    """Fully-connected recurrent layer: h_t = phi(x_t W_xh + h_{t-1} W_hh + b_h).

    Runs `SimpleRNNCell` over a sequence. Takes the arguments of
    `keras.layers.SimpleRNN` and stores the same weights, so
    `rnn.set_weights(keras_rnn.get_weights())` (and the reverse) gives the same
    outputs. cuDNN has no kernel for this cell, so on TensorFlow it runs the generic
    loop, and a training call differentiates it with the hand-written backward pass of
    `rnnkit.layers._bptt`. With the PyTorch backend a tanh or relu layer without
    `recurrent_dropout` or `unroll` (right-padded masks read forwards) runs PyTorch's
    own `torch.rnn_tanh`/`rnn_relu` (`rnnkit.layers._torch_rnn`). `execution_path`
    says which path the last call took and why.

    Args:
        units, activation, use_bias: As for `SimpleRNNCell`.
        kernel_initializer, recurrent_initializer, bias_initializer: As for
            `SimpleRNNCell`.
        kernel_regularizer, recurrent_regularizer, bias_regularizer: As for
            `SimpleRNNCell`.
        kernel_constraint, recurrent_constraint, bias_constraint: As for
            `SimpleRNNCell`.
        dropout, recurrent_dropout, seed, weight_dropout: As for `SimpleRNNCell`.
        activity_regularizer: Regularizer of the output. Default: `None`.
        return_sequences: Return h_t for every step. Default: `False`.
        return_state: Also return the final h_T. Default: `False`.
        go_backwards: Read the sequence backwards and return the reversed sequence.
            Default: `False`.
        stateful: Carry the final state of batch i into batch i + 1; clear it with
            `reset_state()`. Default: `False`.
        unroll: Unroll the loop (short sequences only). Default: `False`.
        jit_compile: None (default), True or False: whether the generic loop runs
            XLA-compiled on TensorFlow (`RecurrentLayer`); None follows a loaded
            calibration, else `SimpleRNNCell.xla_pays`. Evidence:
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
    >>> tuple(SimpleRNN(4)(np.zeros((32, 10, 8))).shape)
    (32, 4)

    Reference:
        Elman (1990), "Finding Structure in Time".
    """

    cell_class = SimpleRNNCell

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
        jit_compile=None,
        batch_shards=None,
        **kwargs,
    ):
        kwargs.pop("use_cudnn", None)
        cell = SimpleRNNCell(
            units,
            activation=activation,
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
            seed=seed,
            weight_dropout=weight_dropout,
            dtype=kwargs.get("dtype"),
            trainable=kwargs.get("trainable", True),
            name="simple_rnn_cell",
        )
        super().__init__(
            cell,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            use_cudnn="auto",  # not an argument of SimpleRNN (nor of Keras')
            jit_compile=jit_compile,
            batch_shards=batch_shards,
            activity_regularizer=activity_regularizer,
            **kwargs,
        )

    def _cudnn_blockers(self, training):
        # cuDNN has no kernel for this cell; PyTorch's torch.rnn_tanh and
        # torch.rnn_relu (`_torch_rnn`) have.
        return _kernels.fused_blockers(self, cudnn=False)

    def _fused_activations(self):
        return ("tanh", "relu")

    def _torch_kernel(self):
        return f"rnn_{activation_name(self.cell.activation)}"

    def get_config(self):
        config = super().get_config()
        del config["use_cudnn"]
        return config


__all__ = ["SimpleRNNCell", "SimpleRNN"]
