"""PyTorch's own recurrent kernels, for rnnkit's layers on the PyTorch backend.

`torch.lstm`, `torch.gru`, `torch.rnn_tanh` and `torch.rnn_relu` (ATen's functions
behind `torch.nn.LSTM`, `GRU` and `RNN`) run a whole sequence in C++, through cuDNN on
a GPU, where the layers' own loop dispatches every operation of every step from
Python. They compute the cells' equations; only the weight layout differs. PyTorch
keeps one (gates * units, inputs) matrix per input, the GRU's gates in the order
(r, z, n) where Keras has (z, r, h), and a recurrent bias beside the input bias.
`benchmarks/recurrent.py` measures what this path gains.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

KERNELS = {
    "lstm": torch.lstm,
    "gru": torch.gru,
    "rnn_tanh": torch.rnn_tanh,
    "rnn_relu": torch.rnn_relu,
}


def params(kernel, recurrent_kernel, input_bias=None, recurrent_bias=None):
    """ATen's weight list from Keras' (inputs, gates * units) kernels: transposed,
    with a zero recurrent bias where the cell has one bias only. Each is contiguous:
    on a GPU cuDNN views the weights into one flat buffer, which a transposed view
    refuses ("view size is not compatible with input tensor's size and stride")."""
    weights = [kernel.T.contiguous(), recurrent_kernel.T.contiguous()]
    if input_bias is not None:
        if recurrent_bias is None:
            recurrent_bias = torch.zeros_like(input_bias)
        weights += [input_bias, recurrent_bias]
    return weights


def gru_gate_order(weight, units):
    """Keras' (z, r, h) gate blocks (last axis) in PyTorch's order (r, z, n)."""
    z, r, h = torch.split(weight, units, dim=-1)
    return torch.cat([r, z, h], dim=-1)


def run(
    kind,
    sequences,
    states,
    weights,
    *,
    lengths=None,
    return_sequences=False,
    go_backwards=False,
    training=False,
    zero_output_for_mask=False,
):
    """The kernel `kind` over (batch, time, features) `sequences` from `states`
    ([h] or [h, c], each (batch, units)), as `keras.backend`'s `lstm`/`gru` return
    it: (last output, outputs, final states). With `lengths` (batch,), the sequences
    are right-padded: each row runs its own number of steps (packed, as
    `torch.nn.utils.rnn.pack_padded_sequence` does), its final state is that of its
    last real step and its outputs past that step repeat its last output, as
    Keras' loop carries it, or are zero with `zero_output_for_mask` (as in Keras'
    loop, and as cuDNN always gives them: `Bidirectional` asks for zeros)."""
    function = KERNELS[kind]
    has_biases = len(weights) == 4
    # The kernels' `train` flag: with dropout 0 it changes no number, but cuDNN keeps
    # what its backward pass needs only in training mode and refuses gradients
    # otherwise ("cudnn RNN backward can only be called in training mode"), so a
    # gradient taken outside `fit` (diagnostics, saliency, a custom loop) asks for it.
    train = bool(training) or _gradients_wanted(sequences, *states, *weights)
    if go_backwards:
        sequences = torch.flip(sequences, dims=(1,))
    hidden = [state.unsqueeze(0) for state in states]  # (layers=1, batch, units)
    if lengths is None:
        initial = tuple(hidden) if kind == "lstm" else hidden[0]
        with _weights_compacted_per_call():
            outputs, *final = function(
                sequences, initial, weights, has_biases, 1, 0.0, train, False, True
            )
        final = [state[0] for state in final]
    else:
        rnn_utils = torch.nn.utils.rnn
        packed = rnn_utils.pack_padded_sequence(
            sequences, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        hidden = [state.index_select(1, packed.sorted_indices) for state in hidden]
        initial = tuple(hidden) if kind == "lstm" else hidden[0]
        with _weights_compacted_per_call():
            data, *final = function(
                packed.data,
                packed.batch_sizes,
                initial,
                weights,
                has_biases,
                1,
                0.0,
                train,
                False,
            )
        outputs, _ = rnn_utils.pad_packed_sequence(
            rnn_utils.PackedSequence(
                data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices
            ),
            batch_first=True,
            total_length=sequences.shape[1],
        )
        final = [state[0].index_select(0, packed.unsorted_indices) for state in final]
        if not zero_output_for_mask:
            # Past its end a row repeats its last output, as Keras' loop carries it.
            steps = torch.arange(sequences.shape[1], device=outputs.device)
            valid = steps.unsqueeze(0) < lengths.to(outputs.device).unsqueeze(1)
            outputs = torch.where(valid.unsqueeze(-1), outputs, final[0].unsqueeze(1))
    last = final[0]
    if not return_sequences:
        outputs = last.unsqueeze(1)
    return last, outputs, final


def _gradients_wanted(*tensors) -> bool:
    """Whether autograd records this call: a backward pass may follow."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


@contextlib.contextmanager
def _weights_compacted_per_call():
    """On a GPU, cuDNN copies weights that are not one flat buffer into one at each
    call, and PyTorch warns about it every time; the layers hand their weights over
    per call by design (they are Keras variables, laid out as Keras lays them)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="RNN module weights are not part of single contiguous"
        )
        yield
