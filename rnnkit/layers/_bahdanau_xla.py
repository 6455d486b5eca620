"""Bahdanau scores for a sequence of queries, compiled by XLA, for TensorFlow.

The scores e_ij = v_a^T tanh(W_q q_i + W_k k_j) of every query-key pair need one
tanh per (example, query, key, unit). Written with TensorFlow's own kernels, each of
add, tanh and the dot product with v_a is a pass over a (batch, Tv, units) tensor
per query, and on the backward pass (the outer product with v_a, the tanh gradient,
the two sums) five more. XLA fuses each group into one loop over that tensor, which
stays in the cache, so the per-query loop no longer pays for memory traffic
(`benchmarks/attention.py` measures it against the broadcast formulation).

The forward pass keeps nothing but the scores. The backward pass is written by hand:
it runs the queries again, recomputes tanh and accumulates

    dW_k k = sum_i g_i,   dW_q q_i = sum_j g_ij,   dv_a = sum_ij h_ij de_ij,

with h_ij = tanh(W_q q_i + W_k k_j) and g_ij = (1 - h_ij^2) v_a de_ij, so its
memory, like the forward pass', is one (batch, Tv, units) tensor.

XLA compiles each new shape once (0.3-0.5 s on a 2-core CPU, the backward pass
included) and then reuses it.
"""

from __future__ import annotations

import functools


def _forward(projected_query, projected_key, score_vector):
    """(Tq, batch, units), (batch, Tv, units), (units,) -> scores (Tq, batch, Tv)."""
    import tensorflow as tf

    def one_query(query):  # (batch, units)
        hidden = tf.tanh(query[:, None, :] + projected_key)  # (batch, Tv, units)
        return tf.linalg.matvec(hidden, score_vector)  # (batch, Tv)

    return tf.map_fn(one_query, projected_query, parallel_iterations=1)


def _backward(projected_query, projected_key, score_vector, d_scores):
    """Gradients of the three inputs of `_forward` from d scores (Tq, batch, Tv)."""
    import tensorflow as tf

    steps = tf.shape(projected_query)[0]

    def body(i, d_key, d_vector, d_query_ta):
        hidden = tf.tanh(projected_query[i][:, None, :] + projected_key)
        d_score = d_scores[i]  # (batch, Tv)
        d_vector += tf.einsum("bju,bj->u", hidden, d_score)
        # (1 - h^2) * (v_a de): the tanh gradient through its output.
        d_hidden = tf.raw_ops.TanhGrad(y=hidden, dy=d_score[..., None] * score_vector)
        d_query_ta = d_query_ta.write(i, tf.reduce_sum(d_hidden, axis=1))
        return i + 1, d_key + d_hidden, d_vector, d_query_ta

    _, d_key, d_vector, d_query_ta = tf.while_loop(
        lambda i, *_: i < steps,
        body,
        (
            0,
            tf.zeros_like(projected_key),
            tf.zeros_like(score_vector),
            tf.TensorArray(
                projected_query.dtype,
                steps,
                element_shape=projected_query.shape[1:],
            ),
        ),
    )
    return d_query_ta.stack(), d_key, d_vector


@functools.cache
def _compiled():
    """The XLA-compiled forward and backward functions (built on first use)."""
    from rnnkit.layers import _xla

    return _xla.compiled(_forward), _xla.compiled(_backward)


def sequence_scores(projected_query, projected_key, score_vector):
    """Scores (batch, Tq, Tv) from W_q q (batch, Tq, units), W_k k + b
    (batch, Tv, units) and v_a (units,), differentiable in all three."""
    import tensorflow as tf

    forward, backward = _compiled()

    @tf.custom_gradient
    def scores(query, key, vector):
        # stop_gradient: the tape must not record inside the compiled function
        # (XLA cannot hand its loop state out); the gradient is `grad` below.
        outputs = forward(
            tf.stop_gradient(query), tf.stop_gradient(key), tf.stop_gradient(vector)
        )

        def grad(d_scores):
            return backward(query, key, vector, d_scores)

        return outputs, grad

    queries = tf.transpose(projected_query, (1, 0, 2))  # (Tq, batch, units)
    return tf.transpose(scores(queries, projected_key, score_vector), (1, 0, 2))
