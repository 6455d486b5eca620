"""rnnkit.testing.recurrent: the checks run on a correct layer and fail, naming the
check, on a wrong one (rnnkit's own layers pass them in tests/layers)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rnnkit.layers import SimpleRNN
from rnnkit.testing import check_recurrent_layer, recurrent_layer_checks, references


def simple_rnn_equations(x, weights, initial_states, mask, options):
    h0 = initial_states[0] if initial_states else None
    outputs, *_ = references.simple_rnn_forward(x, *weights, h0=h0, mask=mask)
    return outputs


def test_the_checks_that_apply_follow_the_references_given():
    bare = [name for name, _ in recurrent_layer_checks(SimpleRNN)]
    assert not any(name.startswith(("keras_parity", "numpy_")) for name in bare)
    assert {"stateful", "bidirectional", "fresh_process_reload"} <= set(bare)
    full = [
        name
        for name, _ in recurrent_layer_checks(
            SimpleRNN,
            numpy_forward=simple_rnn_equations,
            keras_reference=keras.layers.SimpleRNN,
        )
    ]
    assert full[:4] == [
        "keras_parity",
        "keras_parity_masked",
        "numpy_outputs_and_gradients",
        "numpy_masks",
    ]
    assert set(bare) < set(full)


def test_unknown_or_inapplicable_checks_are_named():
    with pytest.raises(ValueError, match="unknown check.*no_such_check"):
        recurrent_layer_checks(SimpleRNN, checks=["no_such_check"])
    with pytest.raises(ValueError, match="unknown check.*typo"):
        recurrent_layer_checks(SimpleRNN, skip=["typo"])
    with pytest.raises(ValueError, match="keras_parity cannot run.*keras_reference="):
        recurrent_layer_checks(SimpleRNN, checks=["keras_parity"])


def test_gradients_from_central_differences_pass_a_correct_layer():
    """Without hand-written numpy gradients, the layer's gradients are checked
    against central differences of the numpy equations."""
    ran = check_recurrent_layer(
        SimpleRNN,
        numpy_forward=simple_rnn_equations,
        checks=["numpy_outputs_and_gradients", "numpy_masks", "config_round_trip"],
    )
    assert ran == ["numpy_outputs_and_gradients", "numpy_masks", "config_round_trip"]


def test_wrong_equations_fail_naming_the_check_and_the_difference():
    def relu_equations(x, weights, initial_states, mask, options):
        kernel, recurrent_kernel, bias = weights
        h = initial_states[0] if initial_states else np.zeros((len(x), len(bias)))
        outputs = []
        for t in range(x.shape[1]):
            h = np.maximum(x[:, t] @ kernel + h @ recurrent_kernel + bias, 0.0)
            outputs.append(h)
        return np.stack(outputs, axis=1)

    with pytest.raises(
        AssertionError,
        match=r"check numpy_outputs_and_gradients failed: outputs: max abs diff",
    ):
        check_recurrent_layer(
            SimpleRNN,
            numpy_forward=relu_equations,
            checks=["numpy_outputs_and_gradients"],
        )


def test_wrong_gradients_fail_where_the_outputs_agree():
    def gradients_off_by_a_tenth(x, weights, output_weights, initial_states, options):
        h0 = initial_states[0] if initial_states else None
        grads = references.simple_rnn_bptt(x, *weights, output_weights, h0=h0)
        return {**grads, "recurrent_kernel": 1.1 * grads["recurrent_kernel"]}

    with pytest.raises(AssertionError, match=r"d loss / d recurrent_kernel"):
        check_recurrent_layer(
            SimpleRNN,
            numpy_forward=simple_rnn_equations,
            numpy_gradients=gradients_off_by_a_tenth,
            checks=["numpy_outputs_and_gradients"],
        )


class ForgetfulRNN(SimpleRNN):
    """Drops the state a stateful layer carries: each call starts from zeros."""

    def call(self, sequences, initial_state=None, mask=None, training=False):
        if self.stateful:
            self.reset_state()
        return super().call(sequences, initial_state, mask, training)


def test_a_layer_that_forgets_its_streamed_state_fails_the_stateful_check():
    with pytest.raises(AssertionError, match="check stateful failed: stateful halves"):
        check_recurrent_layer(ForgetfulRNN, checks=["stateful"])


def test_parity_with_a_keras_built_in_runs_through_the_list():
    ran = check_recurrent_layer(
        SimpleRNN,
        keras_reference=keras.layers.SimpleRNN,
        checks=["keras_parity", "keras_parity_masked", "bidirectional"],
    )
    assert ran == ["keras_parity", "keras_parity_masked", "bidirectional"]


def test_a_layer_of_another_package_reloads_where_its_module_is_imported(
    tmp_path, monkeypatch
):
    """The fresh process imports the layer's module (its own package, not rnnkit);
    told to import nothing, it cannot rebuild the layer and the check fails."""
    package = tmp_path / "my_cells"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cells.py").write_text(
        "import keras\n"
        "from rnnkit.layers import SimpleRNN\n\n\n"
        "@keras.saving.register_keras_serializable(package='my_cells')\n"
        "class MyRNN(SimpleRNN):\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from my_cells.cells import MyRNN

    assert check_recurrent_layer(MyRNN, checks=["fresh_process_reload"]) == [
        "fresh_process_reload"
    ]
    with pytest.raises(
        AssertionError, match="check fresh_process_reload failed: the model did not"
    ):
        check_recurrent_layer(MyRNN, checks=["fresh_process_reload"], reload_modules=[])


def test_rnnkits_own_layers_share_one_reload_process():
    """rnnkit's layer modules are imported by every reload process at its start, so
    they start no process of their own; another package's module does."""
    from rnnkit.testing._reload import _own_modules

    assert _own_modules(("rnnkit.layers.lstm", "rnnkit.layers")) == ()
    assert _own_modules(("rnnkit.layers.gru", "my_cells.cells")) == ("my_cells.cells",)
    assert _own_modules(("rnnkit.layersmith",)) == ("rnnkit.layersmith",)
