"""Independent numpy (float64) implementations of the equations rnnkit's layers compute.

Written from the textbook equations, with loops where that is clearer, and sharing no
code with the layers, so that a layer and its reference agree only if both are right.

Recurrent layers: forward passes follow the equations with masking as Keras defines it
(a masked step keeps the previous state and repeats the previous output); `*_bptt`
functions compute gradients by hand-written backpropagation through time for the loss
L = sum_t sum(outputs_t * output_weights_t) (all-steps outputs).

Attention: `masked_softmax`, `attention_mask` (the boolean mask built from padding
masks, an explicit mask and causality) and `numerical_gradients` (central differences
in float64, the reference gradients of any numpy function).

    from rnnkit.testing import references
    outputs, h_T, c_T, _ = references.lstm_forward(x, kernel, recurrent_kernel, bias)
"""

from __future__ import annotations

import numpy as np


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def _masked(new, old, keep):
    return np.where(keep[:, None], new, old)


# SimpleRNN
def simple_rnn_forward(x, kernel, recurrent_kernel, bias, h0=None, mask=None):
    """h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h); returns (outputs, h_T, cache)."""
    batch, steps, _ = x.shape
    units = kernel.shape[1]
    h = np.zeros((batch, units)) if h0 is None else h0.astype(np.float64)
    outputs, cache = [], []
    for t in range(steps):
        h_prev = h
        h_new = np.tanh(x[:, t] @ kernel + h_prev @ recurrent_kernel + bias)
        h = h_new if mask is None else _masked(h_new, h_prev, mask[:, t])
        cache.append((h_prev, h_new))
        outputs.append(h)
    return np.stack(outputs, 1), h, cache


def simple_rnn_bptt(x, kernel, recurrent_kernel, bias, output_weights, h0=None):
    """Gradients of sum(outputs * output_weights) by BPTT (no mask)."""
    _, _, cache = simple_rnn_forward(x, kernel, recurrent_kernel, bias, h0)
    grads = {
        "kernel": np.zeros_like(kernel),
        "recurrent_kernel": np.zeros_like(recurrent_kernel),
        "bias": np.zeros_like(bias),
        "x": np.zeros_like(x),
    }
    dh_next = np.zeros_like(cache[0][0])
    for t in reversed(range(x.shape[1])):
        h_prev, h_new = cache[t]
        dh = output_weights[:, t] + dh_next
        da = dh * (1.0 - h_new**2)  # through tanh
        grads["kernel"] += x[:, t].T @ da
        grads["recurrent_kernel"] += h_prev.T @ da
        grads["bias"] += da.sum(0)
        grads["x"][:, t] = da @ kernel.T
        dh_next = da @ recurrent_kernel.T
    grads["h0"] = dh_next
    return grads


# LSTM
def lstm_forward(x, kernel, recurrent_kernel, bias, h0=None, c0=None, mask=None):
    """Gates i, f, c, o in Keras column order; returns (outputs, h_T, c_T, cache)."""
    batch, steps, _ = x.shape
    units = recurrent_kernel.shape[0]
    h = np.zeros((batch, units)) if h0 is None else h0.astype(np.float64)
    c = np.zeros((batch, units)) if c0 is None else c0.astype(np.float64)
    outputs, cache = [], []
    for t in range(steps):
        z = x[:, t] @ kernel + h @ recurrent_kernel + bias
        z_i, z_f, z_c, z_o = np.split(z, 4, axis=1)
        i, f, g, o = sigmoid(z_i), sigmoid(z_f), np.tanh(z_c), sigmoid(z_o)
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        cache.append((h, c, i, f, g, o, c_new))
        if mask is not None:
            h_new = _masked(h_new, h, mask[:, t])
            c_new = _masked(c_new, c, mask[:, t])
        h, c = h_new, c_new
        outputs.append(h)
    return np.stack(outputs, 1), h, c, cache


def lstm_bptt(x, kernel, recurrent_kernel, bias, output_weights, h0=None, c0=None):
    _, _, _, cache = lstm_forward(x, kernel, recurrent_kernel, bias, h0, c0)
    grads = {
        "kernel": np.zeros_like(kernel),
        "recurrent_kernel": np.zeros_like(recurrent_kernel),
        "bias": np.zeros_like(bias),
        "x": np.zeros_like(x),
    }
    dh_next = np.zeros_like(cache[0][0])
    dc_next = np.zeros_like(cache[0][1])
    for t in reversed(range(x.shape[1])):
        h_prev, c_prev, i, f, g, o, c_new = cache[t]
        dh = output_weights[:, t] + dh_next
        tanh_c = np.tanh(c_new)
        do = dh * tanh_c
        dc = dh * o * (1.0 - tanh_c**2) + dc_next
        di, df, dg = dc * g, dc * c_prev, dc * i
        dz = np.concatenate(
            [
                di * i * (1 - i),
                df * f * (1 - f),
                dg * (1 - g**2),
                do * o * (1 - o),
            ],
            axis=1,
        )  # (batch, 4 * units)
        grads["kernel"] += x[:, t].T @ dz
        grads["recurrent_kernel"] += h_prev.T @ dz
        grads["bias"] += dz.sum(0)
        grads["x"][:, t] = dz @ kernel.T
        dh_next = dz @ recurrent_kernel.T
        dc_next = dc * f
    grads["h0"], grads["c0"] = dh_next, dc_next
    return grads


# GRU
def _gru_bias(bias, units, reset_after):
    if bias is None:
        zeros = np.zeros(3 * units)
        return zeros, zeros
    if reset_after:
        return bias[0], bias[1]
    return bias, np.zeros(3 * units)


def gru_forward(
    x, kernel, recurrent_kernel, bias, h0=None, mask=None, reset_after=True
):
    """Gates z, r, h in the Keras column order; returns (outputs, h_T, cache)."""
    batch, steps, _ = x.shape
    units = recurrent_kernel.shape[0]
    b_in, b_rec = _gru_bias(bias, units, reset_after)
    u_z, u_r, u_h = np.split(recurrent_kernel, 3, axis=1)
    h = np.zeros((batch, units)) if h0 is None else h0.astype(np.float64)
    outputs, cache = [], []
    for t in range(steps):
        xz, xr, xh = np.split(x[:, t] @ kernel + b_in, 3, axis=1)
        rz, rr, rh = np.split(b_rec, 3)
        z = sigmoid(xz + h @ u_z + rz)
        r = sigmoid(xr + h @ u_r + rr)
        if reset_after:
            recurrent_h = h @ u_h + rh
            n = np.tanh(xh + r * recurrent_h)
        else:
            recurrent_h = None
            n = np.tanh(xh + (r * h) @ u_h)
        h_new = z * h + (1 - z) * n
        cache.append((h, z, r, n, recurrent_h))
        if mask is not None:
            h_new = _masked(h_new, h, mask[:, t])
        h = h_new
        outputs.append(h)
    return np.stack(outputs, 1), h, cache


def gru_bptt(
    x, kernel, recurrent_kernel, bias, output_weights, h0=None, reset_after=True
):
    _, _, cache = gru_forward(
        x, kernel, recurrent_kernel, bias, h0, reset_after=reset_after
    )
    units = recurrent_kernel.shape[0]
    u_z, u_r, u_h = np.split(recurrent_kernel, 3, axis=1)
    grads = {
        "kernel": np.zeros_like(kernel),
        "recurrent_kernel": np.zeros_like(recurrent_kernel),
        "bias": np.zeros((2, 3 * units) if reset_after else (3 * units,)),
        "x": np.zeros_like(x),
    }
    dh_next = np.zeros_like(cache[0][0])
    for t in reversed(range(x.shape[1])):
        h_prev, z, r, n, recurrent_h = cache[t]
        dh = output_weights[:, t] + dh_next
        dz = dh * (h_prev - n)
        dn = dh * (1 - z)
        dh_prev = dh * z
        da_n = dn * (1 - n**2)  # pre-activation of the candidate
        if reset_after:
            dr = da_n * recurrent_h
            d_recurrent_h = da_n * r  # into h U_h + b'_h
        else:
            d_rh = da_n @ u_h.T  # into (r * h)
            dr = d_rh * h_prev
            dh_prev = dh_prev + d_rh * r
        da_z = dz * z * (1 - z)
        da_r = dr * r * (1 - r)
        d_input = np.concatenate([da_z, da_r, da_n], axis=1)  # (batch, 3 * units)
        grads["kernel"] += x[:, t].T @ d_input
        grads["x"][:, t] = d_input @ kernel.T
        if reset_after:
            d_recurrent = np.concatenate([da_z, da_r, d_recurrent_h], axis=1)
            grads["recurrent_kernel"] += h_prev.T @ d_recurrent
            dh_prev = dh_prev + d_recurrent @ recurrent_kernel.T
            grads["bias"][0] += d_input.sum(0)
            grads["bias"][1] += d_recurrent.sum(0)
        else:
            d_zr = np.concatenate([da_z, da_r], axis=1)
            grads["recurrent_kernel"][:, : 2 * units] += h_prev.T @ d_zr
            grads["recurrent_kernel"][:, 2 * units :] += (r * h_prev).T @ da_n
            dh_prev = dh_prev + d_zr @ np.concatenate([u_z, u_r], axis=1).T
            grads["bias"] += d_input.sum(0)
        dh_next = dh_prev
    grads["h0"] = dh_next
    return grads


# Attention
def masked_softmax(scores, mask=None):
    """Softmax over the allowed positions only; zero elsewhere and on empty rows."""
    allowed = (
        np.ones(scores.shape, bool)
        if mask is None
        else np.broadcast_to(mask, scores.shape)
    )
    shifted = np.where(allowed, scores, -np.inf)
    row_max = np.max(shifted, axis=-1, keepdims=True)
    exp = np.where(
        allowed, np.exp(scores - np.where(np.isfinite(row_max), row_max, 0)), 0
    )
    total = np.sum(exp, axis=-1, keepdims=True)
    return np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)


def attention_mask(
    query_length,
    value_length,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
):
    """The (batch or 1, Tq, Tv) boolean mask the equations use, built with loops."""
    mask = np.ones((1, query_length, value_length), bool)
    if query_mask is not None:
        mask = mask & np.asarray(query_mask, bool)[:, :, None]
    for padding in (value_mask, key_mask):
        if padding is not None:
            mask = mask & np.asarray(padding, bool)[:, None, :]
    if attention_mask is not None:
        mask = mask & np.asarray(attention_mask, bool)
    if use_causal_mask:
        causal = np.zeros((1, query_length, value_length), bool)
        for i in range(query_length):
            causal[0, i, : i + 1] = True
        mask = mask & causal
    return mask


def numerical_gradients(function, arrays, cotangent, step=1e-6):
    """Central differences of sum(function(*arrays) * cotangent), in float64."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    cotangent = np.asarray(cotangent, np.float64)
    gradients = []
    for array in arrays:
        gradient = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            original = array[index]
            array[index] = original + step
            plus = np.sum(function(*arrays) * cotangent)
            array[index] = original - step
            minus = np.sum(function(*arrays) * cotangent)
            array[index] = original
            gradient[index] = (plus - minus) / (2 * step)
        gradients.append(gradient)
    return gradients
