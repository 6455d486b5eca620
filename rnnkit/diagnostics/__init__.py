"""Gradient-flow diagnostics: why a vanilla RNN forgets and an LSTM or GRU does not.

Backpropagation through time multiplies the gradient of the loss at the last step T by
one Jacobian per step it travels back:

    dL_T/dh_t = dL_T/dh_T * prod_{s=t+1..T} dh_s/dh_{s-1}

For a simple RNN, h_s = phi(x_s W + h_{s-1} U + b), so dh_s/dh_{s-1} = U diag(phi'),
and ||dL_T/dh_t|| <= ||dL_T/dh_T|| (gamma sigma_max(U))^(T-t), with gamma the bound of
|phi'| (1 for tanh): below 1 the gradient vanishes exponentially with T - t
(Bengio et al. 1994; Pascanu et al. 2013). The LSTM's additive cell state (and the
GRU's interpolation) gives the gradient a path whose factor is the forget (update) gate
instead.

Measuring (`rnnkit.diagnostics.gradients`):

- `state_gradient_norms` measures ||dL/dh_t|| for every step t of a stack of rnnkit
  cells, stepped one at a time under a `tf.GradientTape` (TensorFlow backend).
- `language_model_gradient_norms` does it for a `LanguageModel`, with L the
  cross-entropy of the next token after the window.
- `spectral_norms` gives sigma_max of every recurrent kernel (per gate too);
  `SpectralNormTracker` records them during training (a Keras callback).
- `train_with_clipping` trains with global-norm clipping and records the gradient norm
  before and after clipping at every step.

Reporting (`rnnkit.diagnostics.report`): `diagnose_language_model` puts it together
and writes `diagnostics/*.csv` and `*.png`; `compare_models` trains fresh models first.

Where memory is needed (`rnnkit.diagnostics.memory_tasks`, `memory_report`): the
adding problem and the copy-memory task, trained per cell and length with and without
clipping (`rnnkit diagnose --task adding,copy`); the gradient norms are measured on the
same trained models. A language model needs little long-range memory, so its trained
gated cells need not keep their gradients; these tasks cannot be solved without.

What `rnnkit diagnose` diagnoses (`rnnkit.diagnostics.language_models`): `text_recipe`
(the text that fresh cells read), `check_run`, `fresh_and_trained`,
`fresh_language_models` and `diagnose`. The command loads recipes and runs; these
functions are handed the objects.
"""

from rnnkit.diagnostics.gradients import (
    SpectralNormTracker,
    language_model_gradient_norms,
    spectral_norms,
    state_gradient_norms,
    train_with_clipping,
)
from rnnkit.diagnostics.language_models import (
    FRESH_CELLS,
    TEXT_RECIPE,
    check_run,
    diagnose,
    fresh_and_trained,
    fresh_language_models,
    text_recipe,
)
from rnnkit.diagnostics.memory_report import memory_sweep
from rnnkit.diagnostics.report import (
    compare_models,
    diagnose_language_model,
    probe_windows,
    random_batches,
    write_spectral_norms,
)

__all__ = [
    "FRESH_CELLS",
    "TEXT_RECIPE",
    "SpectralNormTracker",
    "check_run",
    "compare_models",
    "diagnose",
    "diagnose_language_model",
    "fresh_and_trained",
    "fresh_language_models",
    "language_model_gradient_norms",
    "memory_sweep",
    "probe_windows",
    "random_batches",
    "spectral_norms",
    "state_gradient_norms",
    "text_recipe",
    "train_with_clipping",
    "write_spectral_norms",
]
