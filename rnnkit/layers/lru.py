"""The linear recurrent unit (LRU) of Orvieto et al. (2023), "Resurrecting Recurrent
Neural Networks for Long Sequences", in its real-valued diagonal form:

    lambda = exp(-exp(nu))                     (one decay per unit, in (0, 1))
    gamma = sqrt(1 - lambda^2)                 (the paper's normalisation)
    h_t = lambda * h_{t-1} + gamma * (x_t B + b)

`nu` is learned: the exponential parameterisation keeps every decay in (0, 1), so the
recurrence stays stable whatever the step size of the optimiser, and it is
initialised so that lambda is uniform on the ring [0.9, 0.999] in lambda^2 (the
paper's r_min and r_max). gamma keeps the state's scale at that of the input whatever
the decay. The paper's complex form (lambda = exp(-exp(nu) + i exp(theta)), an
output Re(C h_t) + D x_t) adds a rotation per unit; here the output is the state and
C, D are the model's (a Dense layer and a skip connection). The decay reads nothing,
so the recurrence is h_t = a_t * h_{t-1} + b_t with a_t = lambda and runs as a prefix
scan like minGRU's (`rnnkit.layers.min_rnn`).
"""

from __future__ import annotations

import keras
from keras import ops

from rnnkit.layers._cell_math import STATE_DTYPE
from rnnkit.layers.min_rnn import _InputGatedCell, _ScanLayer

# The paper's ring of initial decays: |lambda| in [r_min, r_max].
INITIAL_DECAY = (0.9, 0.999)
_FLOOR = 1e-12


@keras.saving.register_keras_serializable(package="rnnkit")
class LRUCell(_InputGatedCell):
    """One step of the real-valued LRU: `kernel` is B, `bias` b, and `decay` holds
    nu, (units,): lambda = exp(-exp(nu)).

    Args:
        units, activation, use_bias, ...: As for `MinGRUCell` (`activation`,
            linear by default, is applied to x_t B + b).
    """

    num_gates = 1

    def build(self, input_shape):
        super().build(input_shape)
        low, high = (r * r for r in INITIAL_DECAY)
        ring = keras.initializers.RandomUniform(low, high, seed=self.seed)

        def initial_nu(shape, dtype=None):
            # lambda^2 = u uniform on [r_min^2, r_max^2]: nu = log(-log(u) / 2).
            return ops.log(-0.5 * ops.log(ring(shape, dtype)))

        self.decay = self.add_weight(
            shape=(self.units,), name="decay", initializer=initial_nu
        )

    def extra_weights(self):
        return [ops.cast(self.decay, STATE_DTYPE)]

    def log_decay(self, projected, nu):
        shape = ops.shape(projected[0])
        return ops.broadcast_to(-ops.exp(nu), shape)

    def decay_and_input(self, projected, nu):
        a = ops.exp(self.log_decay(projected, nu))
        scale = ops.sqrt(ops.maximum(1.0 - a * a, _FLOOR))
        return a, scale * self.candidate(projected[0])


@keras.saving.register_keras_serializable(package="rnnkit")
class LRU(_ScanLayer):
    """The real-valued LRU over a sequence (Orvieto et al., 2023).

    `LRUCell`'s recurrence, whose decay reads nothing, run as a prefix scan or as
    the cell's step loop (`scan`), with the arguments and behaviour of `MinGRU`.

    Example:
    >>> tuple(LRU(4, return_sequences=True)(np.zeros((2, 10, 8))).shape)
    (2, 10, 4)
    """

    cell_class = LRUCell


__all__ = ["LRU", "LRUCell"]
