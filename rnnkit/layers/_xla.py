"""XLA on TensorFlow: whether this build can compile, for the layers that use it.

rnnkit's layers compile their inner loops with XLA (`tf.function(jit_compile=True)`)
where it was measured to be faster: the Bahdanau per-query loop (`_bahdanau_xla`) and
the recurrent layers' time loops (`_bptt`, `_loops`). XLA fuses each step's
element-wise operations into one pass and runs the loop without TensorFlow's
per-operation dispatch; it compiles once per input shape.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import json
import warnings


@functools.cache
def available() -> bool:
    """Whether this TensorFlow can XLA-compile on the CPU (tried once, eagerly)."""
    import tensorflow as tf

    def tiny(x):
        return tf.while_loop(
            lambda i, y: i < 2, lambda i, y: (i + 1, tf.tanh(y)), (0, x)
        )

    try:
        # init_scope: run eagerly even when first asked inside a tf.function trace.
        with tf.init_scope(), tf.device("/CPU:0"):
            compiled = tf.function(tiny, jit_compile=True, autograph=False)
            compiled(tf.zeros((1, 1)))[1].numpy()
    except (tf.errors.OpError, NotImplementedError, ValueError):
        return False
    return True


_SHARED_MAX = 64
_shared = collections.OrderedDict()
# True while `shared_function` makes its clone of a cell. The clone runs inside the
# compiled loops, which take the dropout masks as arguments, so it draws none and
# gets no seed generator (rnnkit.layers.recurrent): the generator's state is a
# variable, and a variable created during a `tf.function` trace (the clone is made
# at the first call, often inside `fit`'s train step) makes TensorFlow trace that
# function a second time.
making_clone = contextvars.ContextVar("rnnkit_making_loop_clone", default=False)


def compiled(function):
    """`function` as rnnkit compiles its own loops: XLA (`jit_compile`), one trace for
    inputs of varying shapes where it can (`reduce_retracing`), and no autograph: the
    loops are explicit `tf.while_loop`s and `keras.ops` (written for `jax.jit` too),
    and converting them again in every new process took a second or more of each
    run's first trace."""
    import tensorflow as tf

    return tf.function(
        function, jit_compile=True, reduce_retracing=True, autograph=False
    )


def shared_function(owner, purpose, make):
    """The compiled function `make(clone)` for `owner` (a cell), shared by every cell
    with the same class and config, so that XLA compiles once per process and input
    shape however many models are built alike (tuning trials, rebuilt models, the two
    directions of a `Bidirectional`). `clone` is a fresh cell from `owner`'s config:
    the loops read only the config and take the weights as arguments, and the cache
    keeps no model alive. A cell class from outside rnnkit, a config with a function
    in it (a custom activation), or one that cannot be written as JSON, gets a
    function of its own, kept on `owner`.

    `purpose` is a hashable that names what `make` builds (and its options)."""
    key = None
    with warnings.catch_warnings():  # Keras warns when it serialises a lambda
        warnings.simplefilter("ignore")
        config = {k: v for k, v in owner.get_config().items() if k != "name"}
    # Functions (a lambda, a custom activation) are not shared: equal configs of
    # two functions need not mean equal functions (closures, later redefinitions).
    # Nor are subclasses from outside rnnkit: their config may not hold all they are.
    if type(owner).__module__.startswith("rnnkit.layers.") and not any(
        isinstance(value, dict)
        and value.get("class_name") in ("function", "__lambda__")
        for value in config.values()
    ):
        try:
            key = (type(owner), purpose, json.dumps(config, sort_keys=True))
        except (TypeError, ValueError):
            key = None
    if key is None:
        functions = owner.__dict__.setdefault("_rnnkit_compiled", {})
        if purpose not in functions:
            functions[purpose] = make(owner)
        return functions[purpose]
    if key in _shared:
        _shared.move_to_end(key)
        return _shared[key]
    marked = making_clone.set(True)
    try:
        clone = type(owner).from_config(config)
    finally:
        making_clone.reset(marked)
    function = make(clone)
    _shared[key] = function
    if len(_shared) > _SHARED_MAX:
        _shared.popitem(last=False)
    return function
