"""Losses for sequence outputs: sparse cross-entropy with label smoothing and padding,
and the quantile (pinball) loss and the negative log-likelihood of probabilistic
forecasts.

`keras.losses.SparseCategoricalCrossentropy` takes integer targets and skips a padding
class (`ignore_class`) but has no label smoothing; `CategoricalCrossentropy` smooths but
needs one-hot targets, which for a sequence model's output (batch x length x
vocabulary) costs a tensor as large as the logits and has no `ignore_class`.
`SparseLabelSmoothingCrossentropy` does both on integer targets. With smoothing
epsilon over K classes the target distribution is (1 - epsilon) on the true class
plus epsilon / K on every class (Szegedy et al. 2016, as in Keras'
`CategoricalCrossentropy`), so the loss per token is

    (1 - epsilon) * (-log p_y) + epsilon * mean_k(-log p_k)

Tokens whose target is `ignore_class` contribute nothing, and the mean is taken over
the other tokens, as Keras' own `ignore_class` does. With `label_smoothing=0` it
computes exactly what `SparseCategoricalCrossentropy(ignore_class=...)` computes.

    >>> import numpy as np
    >>> loss = SparseLabelSmoothingCrossentropy(
    ...     label_smoothing=0.1, from_logits=True, ignore_class=0
    ... )
    >>> logits = np.zeros((1, 3, 4), "float32")  # uniform over 4 classes
    >>> round(float(loss(np.array([[2, 3, 0]]), logits)), 4)  # = log 4
    1.3863
"""

from __future__ import annotations

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="rnnkit")
class SparseLabelSmoothingCrossentropy(keras.losses.Loss):
    """Cross-entropy on integer targets with label smoothing and an ignored class.

    Args:
        label_smoothing: epsilon in [0, 1): the probability mass spread evenly over
            all classes.
        from_logits: whether predictions are logits (else probabilities).
        ignore_class: a target id (padding) that contributes no loss and is not
            counted in the mean; None counts every token.
        reduction, name, dtype: as for every `keras.losses.Loss`.
    """

    def __init__(
        self,
        label_smoothing: float = 0.0,
        from_logits: bool = False,
        ignore_class: int | None = None,
        reduction: str = "sum_over_batch_size",
        name: str = "sparse_label_smoothing_crossentropy",
        dtype=None,
    ):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(
                f"label_smoothing must be in [0, 1), got {label_smoothing!r}"
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.label_smoothing = float(label_smoothing)
        self.from_logits = from_logits
        self.ignore_class = ignore_class

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        if self.from_logits:
            log_probs = ops.log_softmax(y_pred, axis=-1)
        else:
            epsilon = keras.config.epsilon()
            log_probs = ops.log(ops.clip(y_pred, epsilon, 1.0 - epsilon))
        y_true = ops.cast(y_true, "int32")
        if len(y_true.shape) == len(log_probs.shape):  # a trailing axis of 1
            y_true = ops.squeeze(y_true, axis=-1)
        valid = None
        if self.ignore_class is not None:
            valid = ops.not_equal(y_true, self.ignore_class)
            y_true = ops.where(valid, y_true, ops.zeros_like(y_true))
        true_log_prob = ops.take_along_axis(
            log_probs, ops.expand_dims(y_true, -1), axis=-1
        )[..., 0]
        losses = -true_log_prob
        if self.label_smoothing:
            losses = (1.0 - self.label_smoothing) * losses - (
                self.label_smoothing * ops.mean(log_probs, axis=-1)
            )
        if valid is None:
            return losses
        valid = ops.cast(valid, losses.dtype)
        if self.reduction != "sum_over_batch_size":
            return losses * valid
        # Zero the ignored tokens and scale the others by all / valid, so that the
        # mean over all tokens ("sum_over_batch_size") is the mean over the valid
        # ones: what Keras' ignore_class does through the mask.
        total = ops.cast(ops.size(valid), losses.dtype)
        scale = total / ops.maximum(ops.sum(valid), 1.0)
        return losses * valid * scale

    def get_config(self):
        config = super().get_config()
        config.update(
            label_smoothing=self.label_smoothing,
            from_logits=self.from_logits,
            ignore_class=self.ignore_class,
        )
        return config


@keras.saving.register_keras_serializable(package="rnnkit")
class QuantileLoss(keras.losses.Loss):
    """The pinball loss of forecasts at several quantiles, averaged over them.

    For a quantile q, a target y and a forecast f the loss is q (y - f) when y >= f
    and (1 - q) (f - y) otherwise (Koenker and Bassett 1978): its expectation is
    least at the q-quantile of y's distribution, so a model trained on it forecasts
    that quantile. With q = 0.5 it is half the absolute error.

    Targets are (batch, ...) and predictions (batch, ..., len(quantiles)); the loss
    per target is the mean over the quantiles, so a `sample_weight` of the targets'
    shape (for example 0 at a missing value, or one over a series' scale) weights
    each target.

        >>> import numpy as np
        >>> loss = QuantileLoss(quantiles=(0.1, 0.5, 0.9))
        >>> y = np.array([[1.0]], "float32")
        >>> f = np.array([[[0.0, 1.0, 3.0]]], "float32")  # under, exact, over
        >>> round(float(loss(y, f)), 4)  # (0.1 * 1 + 0 + 0.1 * 2) / 3
        0.1

    Args:
        quantiles: the levels in (0, 1), in the order of the predictions' last axis.
        reduction, name, dtype: as for every `keras.losses.Loss`.
    """

    def __init__(
        self,
        quantiles=(0.1, 0.5, 0.9),
        reduction: str = "sum_over_batch_size",
        name: str = "quantile_loss",
        dtype=None,
    ):
        quantiles = tuple(float(q) for q in quantiles)
        if not quantiles or not all(0.0 < q < 1.0 for q in quantiles):
            raise ValueError(
                "Argument `quantiles` must be levels in (0, 1), "
                f"received {quantiles!r}."
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.quantiles = quantiles

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        if y_pred.shape[-1] != len(self.quantiles):
            raise ValueError(
                f"QuantileLoss: predictions hold {y_pred.shape[-1]} values per target "
                f"for {len(self.quantiles)} quantiles {self.quantiles}."
            )
        y_true = ops.cast(y_true, y_pred.dtype)
        error = ops.expand_dims(y_true, -1) - y_pred  # (batch, ..., quantiles)
        levels = ops.convert_to_tensor(self.quantiles, dtype=y_pred.dtype)
        pinball = ops.maximum(levels * error, (levels - 1.0) * error)
        return ops.mean(pinball, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(quantiles=list(self.quantiles))
        return config


PARAMETERS = {
    "gaussian": ("mean", "deviation"),
    "student_t": ("location", "scale", "degrees_of_freedom"),
    "negative_binomial": ("mean", "dispersion"),
}
LIKELIHOODS = ("quantile", *PARAMETERS)  # the forecaster's `likelihood` values


def lgamma(x):
    """The log of the gamma function, elementwise (each backend's own)."""
    backend = keras.config.backend()
    x = ops.convert_to_tensor(x)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.math.lgamma(x)
    if backend == "jax":
        import jax.scipy.special

        return jax.scipy.special.gammaln(x)
    import torch

    return torch.lgamma(x)


def negative_log_likelihood(values, parameters, likelihood: str):
    """-log p(values), elementwise, of each value (...) under the distribution of
    its `parameters` (..., P), as `distribution_parameters` gives them."""
    check_likelihood(likelihood)
    y = ops.cast(values, "float32")
    p = ops.cast(parameters, "float32")
    if likelihood == "gaussian":
        mean, deviation = p[..., 0], p[..., 1]
        z = (y - mean) / deviation
        return 0.5 * math.log(2 * math.pi) + ops.log(deviation) + 0.5 * ops.square(z)
    if likelihood == "student_t":
        centre, spread, nu = p[..., 0], p[..., 1], p[..., 2]
        z = (y - centre) / spread
        log_density = (
            lgamma((nu + 1.0) / 2.0)
            - lgamma(nu / 2.0)
            - 0.5 * ops.log(nu * math.pi)
            - ops.log(spread)
            - (nu + 1.0) / 2.0 * ops.log1p(ops.square(z) / nu)
        )
        return -log_density
    mean, alpha = p[..., 0], p[..., 1]
    r = 1.0 / alpha
    log_total = ops.log(r + mean)
    log_density = (
        lgamma(y + r)
        - lgamma(y + 1.0)
        - lgamma(r)
        + r * (ops.log(r) - log_total)
        + y * (ops.log(mean) - log_total)
    )
    return -log_density


def check_likelihood(likelihood: str, allowed: tuple[str, ...] | None = None) -> None:
    """A `ValueError` naming the argument unless `likelihood` is one of `allowed`
    (default: the parametric ones, `PARAMETERS`)."""
    allowed = tuple(PARAMETERS) if allowed is None else allowed
    if likelihood not in allowed:
        raise ValueError(
            f"Argument `likelihood` must be one of {allowed}, received {likelihood!r}."
        )


@keras.saving.register_keras_serializable(package="rnnkit")
class NegativeLogLikelihood(keras.losses.Loss):
    """The negative log-likelihood of targets under forecast distributions.

    Targets are (batch, ...) and predictions (batch, ..., P): the parameters of each
    target's distribution in the order of `PARAMETERS[likelihood]` (Gaussian: mean,
    deviation; Student's t: location, scale, degrees of freedom; negative binomial:
    mean and dispersion alpha, the variance being mean + alpha mean^2). The loss per
    target is -log p(target), so a `sample_weight` of the targets' shape (0 at a
    missing value) weights each target.

        >>> import numpy as np
        >>> loss = NegativeLogLikelihood("gaussian")
        >>> y = np.array([[0.0]], "float32")
        >>> params = np.array([[[0.0, 1.0]]], "float32")  # the standard normal
        >>> round(float(loss(y, params)), 4)  # log(2 pi) / 2
        0.9189

    Args:
        likelihood: "gaussian", "student_t" or "negative_binomial".
        reduction, name, dtype: as for every `keras.losses.Loss`.
    """

    def __init__(
        self,
        likelihood: str = "gaussian",
        reduction: str = "sum_over_batch_size",
        name: str = "negative_log_likelihood",
        dtype=None,
    ):
        check_likelihood(likelihood)
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.likelihood = likelihood

    def call(self, y_true, y_pred):
        y_pred = ops.convert_to_tensor(y_pred)
        count = len(PARAMETERS[self.likelihood])
        if y_pred.shape[-1] != count:
            raise ValueError(
                f"NegativeLogLikelihood: predictions hold {y_pred.shape[-1]} values "
                f"per target for the {count} parameters of {self.likelihood}."
            )
        return negative_log_likelihood(y_true, y_pred, self.likelihood)

    def get_config(self):
        return {**super().get_config(), "likelihood": self.likelihood}
