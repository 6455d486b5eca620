"""Additive attention with learned projections (Bahdanau et al., 2015)."""

import keras
from keras import ops

from rnnkit.layers import _attention, _bahdanau_xla, _export, _kernels, _xla

#: `BahdanauAttention.execution_path` for a sequence of queries on TensorFlow.
XLA_PATH = "XLA-compiled per-query loop, hand-written backward pass"
#: ... and elsewhere (followed by the reason).
REMAT_PATH = "per-query loop, recomputed on the backward pass (keras.remat)"
#: ... and for a single (batch, query_dim) query, a decoder step.
STEP_PATH = "one query step"
#: ... and a sequence of queries traced for export (`rnnkit.export`).
EXPORT_PATH = "all queries at once, for export (builtin ops)"


@keras.saving.register_keras_serializable(package="rnnkit")
class BahdanauAttention(keras.layers.Layer):
    """Additive attention: a one-hidden-layer network scores every query-key pair.

    For each query q_i (a decoder state) and keys k_j, values v_j (encoder states):

        e_ij = v_a^T tanh(W_q q_i + W_k k_j [+ b])     (Bahdanau et al., eq. 6)
        a_ij = softmax_j(e_ij)
        c_i  = sum_j a_ij v_j

    with learned `query_kernel` W_q (query_dim, units), `key_kernel` W_k
    (key_dim, units), `score_vector` v_a (units,) and, with `use_bias=True`, a
    `bias` b (units,). Unlike `keras.layers.AdditiveAttention`, which adds query and
    key as they are, the query and key may have different sizes.

    **Decoding step by step.** W_k k_j + b does not depend on the query, so compute
    it once per source sequence with `precompute_keys(key)` and pass it to every
    step as `projected_key`; a step with a (batch, query_dim) query then costs one
    (batch, query_dim) x (query_dim, units) product plus the (batch, Tv, units)
    add-tanh-dot. With a sequence of queries (teacher forcing), the scores are
    computed one query position at a time by that same step, with its activations
    recomputed on the backward pass: the naive broadcast would hold a
    (batch, Tq, Tv, units) tensor, this holds (batch, Tv, units). On TensorFlow
    that loop and its hand-written backward pass are compiled by XLA, which fuses
    the add, tanh and dot product of each query into one pass over the cache;
    `execution_path` names the path taken (speed: `benchmarks/attention.py`).

    Masks follow `keras.layers.MultiHeadAttention`: padded keys (`value_mask` /
    `key_mask`) get exactly zero weight, padded queries (`query_mask`) attend to
    nothing and get a zero context, `attention_mask` (batch, Tq, Tv) says which
    query may see which key, `use_causal_mask=True` lets query i see keys j <= i
    only. Keras masks on the inputs are used the same way; the query's mask is
    passed on to the output.

    Args:
        units: int, the size of the hidden scoring layer (of W_q q and W_k k).
        use_bias: bool, default False (the paper's equation has none). Add a
            learned bias b inside the tanh.
        kernel_initializer: initializer for `query_kernel`, `key_kernel` and
            `score_vector`, default "glorot_uniform".
        bias_initializer: initializer for `bias`, default "zeros".
        kernel_regularizer: regularizer for the kernels and `score_vector`,
            default None.
        bias_regularizer: regularizer for `bias`, default None.
        kernel_constraint: constraint for the kernels and `score_vector`,
            default None.
        bias_constraint: constraint for `bias`, default None.
        jit_compile: None (default), True or False. Whether the scores of a
            sequence of queries are computed by an XLA-compiled loop on the
            TensorFlow backend. None does so when this TensorFlow can compile with
            XLA; True requires it; False keeps TensorFlow's own kernels (XLA
            compiles each new input shape once, 0.3-0.5 s on a 2-core CPU, which
            a stream of ever-new shapes pays again and again). Not used on JAX,
            whose functions XLA compiles anyway, nor on PyTorch. Under
            mixed_bfloat16 on a CPU the compiled loop runs in float32 (XLA's CPU
            backend computes bfloat16 slower; docs/performance.md, "Mixed
            precision on a CPU").
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        query: (batch, Tq, query_dim), or (batch, query_dim) for a decoder step.
        value: (batch, Tv, value_dim).
        key: (batch, Tv, key_dim); defaults to `value`.
        query_mask: bool (batch, Tq) (or (batch,) for a single step).
        value_mask: bool (batch, Tv).
        key_mask: bool (batch, Tv).
        attention_mask: bool (batch, Tq, Tv) (or (batch, Tv) for a single step).
        use_causal_mask: bool, default False.
        return_attention_scores: bool, default False. Also return the weights.
        training: unused (the layer has no dropout); accepted for a uniform call.
        projected_key: (batch, Tv, units) from `precompute_keys(key)`; when given,
            `key` is not used.

    Returns:
        The context, (batch, Tq, value_dim) or (batch, value_dim) for a single step;
        with `return_attention_scores=True`, the pair `(context, weights)` with
        weights (batch, Tq, Tv) or (batch, Tv).

    Example:
    >>> encoder_states = np.random.rand(2, 7, 16).astype("float32")
    >>> decoder_state = np.random.rand(2, 32).astype("float32")
    >>> attention = BahdanauAttention(10)
    >>> attention.build((None, 32), encoder_states.shape)
    >>> keys = attention.precompute_keys(encoder_states)  # once per sentence
    >>> context, weights = attention(decoder_state, encoder_states,
    ...     projected_key=keys, return_attention_scores=True)  # every step
    >>> tuple(keys.shape), tuple(context.shape), tuple(weights.shape)
    ((2, 7, 10), (2, 16), (2, 7))

    Reference:
        - [Bahdanau et al., 2015](https://arxiv.org/abs/1409.0473)
    """

    def __init__(
        self,
        units,
        use_bias=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        jit_compile=None,
        **kwargs,
    ):
        if not isinstance(units, int) or isinstance(units, bool) or units <= 0:
            raise ValueError(f"`units` must be a positive integer. Received: {units!r}")
        if not isinstance(use_bias, bool):
            raise ValueError(
                f"`use_bias` must be True or False. Received: {use_bias!r}"
            )
        if jit_compile not in (None, True, False):
            raise ValueError(
                f"`jit_compile` must be None, True or False. Received: {jit_compile!r}"
            )
        super().__init__(**kwargs)
        self.units = units
        self.use_bias = use_bias
        self.jit_compile = jit_compile
        self.execution_path = None
        _attention.set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        self.supports_masking = True

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _attention.check_value_and_key(self.name, value_shape, key_shape)
        if len(query_shape) not in (2, 3):
            raise ValueError(
                f"{self.name} needs a query of shape (batch, Tq, dim) or "
                f"(batch, dim). Received: query_shape={query_shape}"
            )
        kernel_options = {
            "regularizer": self.kernel_regularizer,
            "constraint": self.kernel_constraint,
        }
        self.query_kernel = self.add_weight(
            name="query_kernel",
            shape=(query_shape[-1], self.units),
            initializer=_attention.clone_initializer(self.kernel_initializer),
            **kernel_options,
        )
        self.key_kernel = self.add_weight(
            name="key_kernel",
            shape=(key_shape[-1], self.units),
            initializer=_attention.clone_initializer(self.kernel_initializer),
            **kernel_options,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.units,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        self.score_vector = self.add_weight(
            name="score_vector",
            shape=(self.units,),
            initializer=_attention.clone_initializer(self.kernel_initializer),
            **kernel_options,
        )

    def precompute_keys(self, key):
        """W_k k + b for every key: (batch, Tv, key_dim) -> (batch, Tv, units).

        Call once per source sequence and pass the result as `projected_key` to
        each decoder step. The layer must be built (called once, or `build()`).
        """
        if not self.built:
            raise ValueError(
                f"{self.name} is not built yet: call it once or call "
                "`build(query_shape, value_shape)` before `precompute_keys`."
            )
        projected_key = ops.matmul(key, self.key_kernel)  # (batch, Tv, units)
        if self.use_bias:
            projected_key = projected_key + self.bias  # (batch, Tv, units)
        return projected_key

    def _step_scores(self, projected_query, projected_key, score_vector):
        """e_j = v_a^T tanh(W_q q + W_k k_j + b) for one query per example."""
        hidden = ops.tanh(
            ops.expand_dims(projected_query, 1) + projected_key
        )  # (batch, Tv, units)
        return ops.matmul(hidden, score_vector)  # (batch, Tv)

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        projected_key=None,
    ):
        query, query_mask, attention_mask, single_step = _attention.as_query_sequence(
            query, query_mask, attention_mask, use_causal_mask
        )
        if projected_key is None:
            projected_key = self.precompute_keys(value if key is None else key)
        projected_query = ops.matmul(query, self.query_kernel)  # (batch, Tq, units)
        # A copy, not the variable, goes into the rematerialised `score`: remat
        # differentiates its explicit arguments and, on TensorFlow, also the
        # variables read inside, so passing the variable would count it twice.
        score_vector = ops.copy(self.score_vector)
        if single_step:
            self.execution_path = STEP_PATH
            scores = self._step_scores(
                projected_query[:, 0], projected_key, score_vector
            )  # (batch, Tv)
            scores = ops.expand_dims(scores, 1)  # (batch, 1, Tv)
        elif _export.active():  # no loop: it would not convert (`_export`)
            self.execution_path = EXPORT_PATH
            scores = _export.bahdanau_scores(
                projected_query, projected_key, score_vector
            )  # (batch, Tq, Tv)
        elif self._use_xla():
            self.execution_path = XLA_PATH
            loop_dtype = projected_query.dtype
            if _kernels.loop_in_float32(self):
                # XLA's CPU backend computes bfloat16 slower than float32: the
                # per-query loop runs in float32, cast in once per call, and its
                # scores stay in float32 through the softmax (element-wise work,
                # no faster in bfloat16 on a CPU), cast out as weights below.
                loop_dtype = "float32"
                self.execution_path = f"{XLA_PATH}, in float32 under mixed_bfloat16"
            scores = _bahdanau_xla.sequence_scores(
                *(
                    ops.cast(tensor, loop_dtype)
                    for tensor in (projected_query, projected_key, score_vector)
                )
            )  # (batch, Tq, Tv)
        else:
            score = keras.remat(self._step_scores)
            scores = ops.map(
                lambda query_t: score(query_t, projected_key, score_vector),
                ops.swapaxes(projected_query, 0, 1),  # (Tq, batch, units)
            )  # (Tq, batch, Tv)
            scores = ops.swapaxes(scores, 0, 1)  # (batch, Tq, Tv)
        mask = _attention.combine_masks(
            query,
            value,
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
        )
        weights = _attention.masked_softmax(scores, mask)  # (batch, Tq, Tv)
        weights = ops.cast(weights, value.dtype)  # from float32 on a CPU, above
        context = ops.matmul(weights, value)  # (batch, Tq, value_dim)
        if single_step:
            context = ops.squeeze(context, 1)  # (batch, value_dim)
            weights = ops.squeeze(weights, 1)  # (batch, Tv)
        if return_attention_scores:
            return context, weights
        return context

    def _use_xla(self):
        """Whether a sequence of queries takes the XLA path; sets
        `execution_path` with the reason when it does not."""
        backend = keras.backend.backend()
        reason = None
        if backend != "tensorflow":
            reason = f"backend is {backend}"
        elif self.jit_compile is False:
            reason = "jit_compile=False"
        elif not _xla.available():
            reason = "this TensorFlow cannot compile with XLA"
        if reason is None:
            return True
        if self.jit_compile and backend != "jax":
            raise ValueError(
                f"{self.name}: jit_compile=True cannot be honoured: {reason}. "
                "Pass jit_compile=None to fall back to the uncompiled loop."
            )
        self.execution_path = f"{REMAT_PATH}: {reason}"
        return False

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "use_bias": self.use_bias,
                "jit_compile": self.jit_compile,
                **_attention.weight_options_config(self),
            }
        )
        return config
