"""`SignatureModel`: a function of named tensors as a Keras model, for the converters.

A recipe's LiteRT / ONNX artefact is often not the trained model itself but a view
of it: the classifier after its text layer, one step of a language model, the encoder
or one decoder step of a sequence-to-sequence model. `SignatureModel` wraps such a
function, `function(dict of inputs) -> dict of outputs`, with the models whose
weights it reads (so that they are tracked), and is what the converters trace. It is
an export-time object: never saved as `.keras`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras


class SignatureModel(keras.Model):
    """A Keras model calling `function(dict of inputs) -> dict of outputs`.

    Args:
        function: the computation, traceable by TensorFlow.
        models: the layers and models whose weights `function` reads.
        **kwargs: `keras.Model` arguments (`name`).
    """

    def __init__(
        self,
        function: Callable[[dict], dict],
        models: Sequence[keras.Layer] = (),
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._function = function
        self.sources = list(models)
        self.built = True

    def call(self, inputs):
        return dict(self._function(dict(inputs)))
