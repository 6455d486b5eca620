"""The real-gated linear recurrent unit (RG-LRU) of Hawk and Griffin (De et al., 2024):

    r_t = sigmoid(x_t W_a + b_a)              (recurrence gate)
    i_t = sigmoid(x_t W_i + b_i)              (input gate)
    log a_t = -c r_t softplus(-Lambda)        (a_t = sigmoid(Lambda)^(c r_t), c = 8)
    h_t = a_t * h_{t-1} + sqrt(1 - a_t^2) * (i_t * x~_t),   x~_t = phi(x_t W_h + b_h)

Lambda is a learned vector, one decay per unit, initialised so that sigmoid(Lambda)^c
lies in [0.9, 0.999] (the paper's range). The gates read x_t only, so the recurrence
is h_t = a_t * h_{t-1} + b_t and runs as a prefix scan like minGRU's
(`rnnkit.layers.min_rnn`). Hawk's block around the layer (a temporal convolution and
a gated branch) is left to the model; here x~_t is the input projected to `units`
(the block's linear branch), so the layer takes inputs of any width.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from rnnkit.layers._cell_math import STATE_DTYPE
from rnnkit.layers.min_rnn import _InputGatedCell, _ScanLayer

# The paper's constant c, and the range of sigmoid(Lambda)^c at initialisation.
DECAY_POWER = 8.0
INITIAL_DECAY = (0.9, 0.999)
_FLOOR = 1e-12


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@keras.saving.register_keras_serializable(package="rnnkit")
class RGLRUCell(_InputGatedCell):
    """One step of the RG-LRU: `kernel` is [W_a W_i W_h], `bias` [b_a b_i b_h], and
    `decay` holds Lambda, (units,).

    Args: as for `MinGRUCell`.
    """

    num_gates = 3

    def build(self, input_shape):
        super().build(input_shape)
        low, high = (_logit(p ** (1.0 / DECAY_POWER)) for p in INITIAL_DECAY)
        self.decay = self.add_weight(
            shape=(self.units,),
            name="decay",
            initializer=keras.initializers.RandomUniform(low, high, seed=self.seed),
        )

    def extra_weights(self):
        return [ops.cast(self.decay, STATE_DTYPE)]

    def log_decay(self, projected, decay):
        r = ops.sigmoid(ops.cast(projected[0], STATE_DTYPE))
        return -DECAY_POWER * r * ops.softplus(-decay)

    def decay_and_input(self, projected, decay):
        log_a = self.log_decay(projected, decay)
        a = ops.exp(log_a)
        i = ops.sigmoid(ops.cast(projected[1], STATE_DTYPE))
        # sqrt(1 - a^2), kept off 0, whose square root has no gradient (a = 1 needs
        # r_t = 0 or an infinite Lambda).
        scale = ops.sqrt(ops.maximum(1.0 - a * a, _FLOOR))
        return a, scale * i * self.candidate(projected[2])


@keras.saving.register_keras_serializable(package="rnnkit")
class RGLRU(_ScanLayer):
    """The RG-LRU over a sequence (De et al., 2024, "Griffin: Mixing Gated Linear
    Recurrences with Local Attention for Efficient Language Models").

    `RGLRUCell`'s recurrence, whose gates read x_t only, run as a prefix scan or as
    the cell's step loop (`scan`), with the arguments and behaviour of `MinGRU`.

    Example:
    >>> tuple(RGLRU(4, return_sequences=True)(np.zeros((2, 10, 8))).shape)
    (2, 10, 4)
    """

    cell_class = RGLRUCell


__all__ = ["RGLRU", "RGLRUCell"]
