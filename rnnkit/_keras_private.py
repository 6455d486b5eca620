"""Every private Keras and TensorFlow symbol that rnnkit uses, gathered in one module.

Keras does not export these, so a Keras release may move or rename them. rnnkit is
tested with the Keras versions in `TESTED_KERAS` (pinned in pyproject.toml); importing
this module checks that each symbol is where rnnkit expects it and, if one is not,
fails at once with an error that names the symbol and the tested versions, instead of
an `AttributeError` deep inside a layer call.

- `backend.rnn`: the time loop of Keras' recurrent layers (masks, `go_backwards`,
  `unroll`), which rnnkit's generic loop and decoder also run through.
- `backend.lstm`, `backend.gru`: the fused cuDNN kernels with Keras' weight layout.
- `backend.cudnn_ok`: whether a GPU and an activation pair allow those kernels.
- `backend.get_keras_mask`: the Keras mask a tensor carries (e.g. from
  `Embedding(mask_zero=True)`), which the Transformer blocks read when no padding
  mask is given, as keras-hub's blocks do.
- `DropoutRNNCell`: the mix-in that `keras.layers.RNN` recognises to refresh a cell's
  per-sequence dropout masks.
- `LossFunctionWrapper`: a loss given by name ("mse") as a `Loss` whose reduction the
  multi-worker loop can turn off (`rnnkit.training.multi_worker`).

Private methods and attributes of Keras objects, each behind a function named for
what it does (the methods are checked with the symbols above; the attributes, which
Keras creates in `__init__` or `build`, fail at their first use with the same message):

- `variable_index`, `adam_moments`: the slot of a variable in an optimizer and Adam's
  moment estimates for it (`BaseOptimizer._get_variable_index`, `Adam._momentums`,
  `Adam._velocities`), for `rnnkit.optimizers.LayerwiseAdam`'s own update step.
- `variable_key`: the optimizer's key of a variable, the same for its replicas under
  a distribution strategy (`BaseOptimizer._var_key`).
- `nested_layers`: every layer inside a layer, at any depth (`Layer._flatten_layers`).
- `initial_epoch`, `clear_initial_epoch`: where `BackupAndRestore` leaves the epoch a
  resumed run starts from (`Trainer._initial_epoch`), for the multi-worker loop.
- `fit_iterators_per_epoch`: how many iterators `fit` takes from a `tf.data` training
  set an epoch (`EpochIterator` makes the next epoch's at the end of one, then
  another when that epoch begins), so that a resumed run moves a reshuffling set on
  as far as the uninterrupted run had. Behaviour, not a symbol: a test counts it.
- `symbolic_build`: `Model._symbolic_build`, which `fit` calls (under a strategy) to
  create the compiled metrics' and the optimizer's variables; the multi-worker loop
  calls it under its strategy and, if a Keras release drops it (this returns None),
  logs the losses only; `runner.build_before_tracing` calls it before every `fit`
  and, without it, leaves the variables to fit's first trace (a second trace of
  the train step, not an error).

Private TensorFlow, in `TF_SYMBOLS`, is used by four functions, and resolved when
they are called, not on import, so this module does not import TensorFlow's
internals for runs that need neither:

- `limit_cluster_registration` (best effort) bounds a worker's wait for the chief
  through TensorFlow's coordination service, and leaves TensorFlow's default when a
  symbol has moved.
- `freeze_function`: a concrete function with its variables read into constants
  (`convert_variables_to_constants_v2`, what TensorFlow's own LiteRT converter and
  tf2onnx freeze with), so that a LiteRT file holds its weights and keeps the
  names of its signature.
- `dynamic_update_slice`: TensorFlow's `XlaDynamicUpdateSlice` op, not in
  `tf.raw_ops`, which the LiteRT converter turns into the builtin
  DYNAMIC_UPDATE_SLICE (the export loop, `rnnkit.layers._export`), and XLA updates
  in place (the scan layers' compiled loops, `rnnkit.layers._scan_tf`).
- `read_profile`: a TensorFlow profile (`*.xplane.pb`, the `XSpace` protocol
  buffer that `tf.profiler` writes), for the op-time benchmark.

Private Keras Tuner, in `TUNER_SYMBOLS` (keras-tuner exports no chief/worker API of its
own beyond environment variables; tested with `TESTED_KERAS_TUNER`), resolved when a
distributed search runs (`rnnkit.tuning.cluster`):

- `tuner_request_timeout`: how long a worker's request waits for the chief
  (`oracle_client.TIMEOUT`, an hour in Keras Tuner), bounded for one search.
- `serve_tuner_oracle`: the chief's gRPC servicer of an oracle
  (`oracle_chief.OracleServicer`) added to a server (`protos.get_service_grpc`).

"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import keras

TESTED_KERAS = ">=3.15,<3.16"
TESTED_KERAS_TUNER = ">=1.4.7,<1.5"

log = logging.getLogger("rnnkit")

SYMBOLS = (
    ("keras.src.backend", "rnn"),
    ("keras.src.backend", "lstm"),
    ("keras.src.backend", "gru"),
    ("keras.src.backend", "cudnn_ok"),
    ("keras.src.layers.rnn.dropout_rnn_cell", "DropoutRNNCell"),
    ("keras.src.losses.losses", "LossFunctionWrapper"),
    # The layer calls in progress: how a recurrent layer learns that it is one
    # direction of a Bidirectional (rnnkit/layers/_batch_shards.py).
    ("keras.src.backend.common.global_state", "get_global_attribute"),
    # The Keras mask a tensor carries, read by the Transformer blocks when the
    # caller gives no padding mask (rnnkit/layers/_transformer.py).
    ("keras.src.backend", "get_keras_mask"),
    ("keras.src.optimizers.base_optimizer", "BaseOptimizer._get_variable_index"),
    ("keras.src.optimizers.base_optimizer", "BaseOptimizer._var_key"),
    ("keras.src.layers.layer", "Layer._flatten_layers"),
)

# Resolved when `limit_cluster_registration` runs (see the module docstring).
TF_SYMBOLS = (
    ("tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2", "CoordinatedJob"),
    ("tensorflow.python.distribute.multi_worker_util", "normalize_cluster_spec"),
    ("tensorflow.python.distribute.multi_worker_util", "coordination_leader"),
    ("tensorflow.python.eager.context", "context"),
    ("tensorflow.python.eager.context", "Context.configure_coordination_service"),
    ("tensorflow.python.training.server_lib", "ClusterSpec"),
    # `freeze_function`, for the LiteRT export (rnnkit/export/convert.py).
    (
        "tensorflow.python.framework.convert_to_constants",
        "convert_variables_to_constants_v2",
    ),
    # `dynamic_update_slice`, for the LiteRT export loop (rnnkit/layers/_export.py)
    # and the scan layers' compiled loops (rnnkit/layers/_scan_tf.py).
    ("tensorflow.compiler.tf2xla.python.xla", "dynamic_update_slice"),
    # `read_profile`, for benchmarks/profile_recurrent.py.
    ("tensorflow.tsl.profiler.protobuf.xplane_pb2", "XSpace"),
)

# Resolved when a distributed search runs (see the module docstring).
TUNER_SYMBOLS = (
    ("keras_tuner.src.distribute.oracle_client", "TIMEOUT"),
    ("keras_tuner.src.distribute.oracle_chief", "OracleServicer"),
    ("keras_tuner.src.protos", "get_service_grpc"),
)


def _advice(what: str) -> str:
    return (
        f"rnnkit needs the private Keras symbol {what}, which Keras "
        f"{keras.__version__} does not have; rnnkit is tested with "
        f"keras{TESTED_KERAS}: pip install 'keras{TESTED_KERAS}'"
    )


def resolve(module_name: str, name: str) -> Any:
    """`module_name.name` (`name` may be dotted: `Class.method`), or an ImportError
    that names it and the tested versions."""
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError:
        raise ImportError(_advice(f"{module_name}.{name}")) from None
    for part in name.split("."):
        if not hasattr(found, part):
            raise ImportError(_advice(f"{module_name}.{name}"))
        found = getattr(found, part)
    return found


for _module_name, _name in SYMBOLS:
    resolve(_module_name, _name)

backend: ModuleType = importlib.import_module("keras.src.backend")
DropoutRNNCell: type = resolve(
    "keras.src.layers.rnn.dropout_rnn_cell", "DropoutRNNCell"
)
LossFunctionWrapper: type = resolve("keras.src.losses.losses", "LossFunctionWrapper")
get_global_attribute = resolve(
    "keras.src.backend.common.global_state", "get_global_attribute"
)
get_keras_mask = resolve("keras.src.backend", "get_keras_mask")


def _attribute(owner: Any, name: str, where: str) -> Any:
    """`owner.name`, or the ImportError of a moved symbol (`where` names it)."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise ImportError(_advice(f"{where}.{name}")) from None


def variable_index(optimizer: keras.optimizers.Optimizer, variable: Any) -> int:
    """The place of `variable` in the lists of per-variable state of `optimizer`."""
    return optimizer._get_variable_index(variable)


def adam_moments(optimizer: keras.optimizers.Adam, index: int) -> tuple[Any, Any]:
    """Adam's first and second moment estimates of the variable at `index`."""
    where = "keras.src.optimizers.adam.Adam"
    momentums = _attribute(optimizer, "_momentums", where)
    velocities = _attribute(optimizer, "_velocities", where)
    return momentums[index], velocities[index]


def variable_key(optimizer: keras.optimizers.Optimizer, variable: Any) -> Any:
    """The key by which `optimizer` knows `variable`, one for all of its replicas."""
    return optimizer._var_key(variable)


def nested_layers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """Every layer inside `layer` (not `layer` itself), at any depth."""
    return list(layer._flatten_layers(include_self=False))


def initial_epoch(model: keras.Model) -> int:
    """The epoch `BackupAndRestore` restored `model` to in `on_train_begin` (0 if
    none)."""
    where = "keras.src.trainers.trainer.Trainer"
    return int(_attribute(model, "_initial_epoch", where) or 0)


def clear_initial_epoch(model: keras.Model) -> None:
    """Forgets a restored epoch, as `fit` does before its callbacks begin."""
    _attribute(model, "_initial_epoch", "keras.src.trainers.trainer.Trainer")
    model._initial_epoch = None


def fit_iterators_per_epoch(dataset: Any) -> int | None:
    """How many iterators `Model.fit` (one device, `steps_per_epoch` None, one step
    per execution) takes from `dataset` each epoch: 2 where its length is known, 1
    where it is not (the epoch ends on the iterator running out). None for an
    infinite dataset, from which `fit` keeps one iterator across epochs."""
    import tensorflow as tf

    length = int(dataset.cardinality())
    if length == tf.data.INFINITE_CARDINALITY:
        return None
    return 2 if length > 0 else 1


def symbolic_build(model: keras.Model) -> Any:
    """`model._symbolic_build` (call it with `data_batch=`), or None when this
    Keras has no such method."""
    return getattr(model, "_symbolic_build", None)


def freeze_function(function: Any) -> Any:
    """`function` (a concrete function) with every variable it reads replaced by
    the variable's value, as a constant: a function of its inputs alone, called
    with them flat, returning its outputs flat."""
    convert = resolve(
        "tensorflow.python.framework.convert_to_constants",
        "convert_variables_to_constants_v2",
    )
    return convert(function, lower_control_flow=False)


def read_profile(data: bytes) -> Any:
    """The `XSpace` (planes of lines of timed events) of a `*.xplane.pb` profile."""
    space = resolve("tensorflow.tsl.profiler.protobuf.xplane_pb2", "XSpace")()
    space.ParseFromString(data)
    return space


def dynamic_update_slice(operand: Any, update: Any, start: Any) -> Any:
    """`operand` with `update` written over it from index `start` (one index per
    axis): TensorFlow's `XlaDynamicUpdateSlice` op."""
    write = resolve("tensorflow.compiler.tf2xla.python.xla", "dynamic_update_slice")
    return write(operand, update, start)


def limit_cluster_registration(cluster: dict[str, list[str]], seconds: float) -> bool:
    """Bounds a worker's wait for the chief by `seconds` (`cluster`: TF_CONFIG's
    "cluster" entry) through TensorFlow's coordination service.

    Best effort: False, and TensorFlow's default timeout, when the service already
    runs or a symbol of `TF_SYMBOLS` has moved.
    """
    try:
        tf_symbols = {name: resolve(module, name) for module, name in TF_SYMBOLS}
        spec = tf_symbols["normalize_cluster_spec"](tf_symbols["ClusterSpec"](cluster))
        context = tf_symbols["context"]()
        if context.coordination_service is not None:
            return False
        context.configure_coordination_service(
            service_type="standalone",
            service_leader=tf_symbols["coordination_leader"](spec),
            coordinated_jobs=[
                tf_symbols["CoordinatedJob"](name=job, num_tasks=spec.num_tasks(job))
                for job in ("chief", "worker")
                if job in spec.jobs
            ],
            cluster_register_timeout_in_ms=int(seconds * 1000),
        )
    except (ImportError, AttributeError, TypeError, ValueError):
        log.debug("cannot set the registration timeout; TensorFlow's default applies")
        return False
    return True


__all__ = [
    "SYMBOLS",
    "TESTED_KERAS",
    "TF_SYMBOLS",
    "DropoutRNNCell",
    "LossFunctionWrapper",
    "adam_moments",
    "backend",
    "clear_initial_epoch",
    "fit_iterators_per_epoch",
    "get_global_attribute",
    "get_keras_mask",
    "initial_epoch",
    "limit_cluster_registration",
    "nested_layers",
    "resolve",
    "symbolic_build",
    "variable_index",
    "variable_key",
]


def _tuner_symbol(module_name: str, name: str) -> Any:
    """`module_name.name` of `TUNER_SYMBOLS`, or an ImportError that names it and the
    tested keras-tuner versions."""
    try:
        return resolve(module_name, name)
    except ImportError:
        raise ImportError(
            f"rnnkit's distributed search needs the private Keras Tuner symbol "
            f"{module_name}.{name}, which this keras-tuner does not have; rnnkit is "
            f"tested with keras-tuner{TESTED_KERAS_TUNER}: "
            f"pip install 'keras-tuner{TESTED_KERAS_TUNER}'"
        ) from None


@contextlib.contextmanager
def tuner_request_timeout(seconds: float) -> Iterator[None]:
    """Within the block, a Keras Tuner worker's request to the chief waits at most
    `seconds`; Keras Tuner's own limit is restored afterwards."""
    module_name, name = TUNER_SYMBOLS[0]
    saved = _tuner_symbol(module_name, name)
    client = importlib.import_module(module_name)
    setattr(client, name, seconds)
    try:
        yield
    finally:
        setattr(client, name, saved)


def serve_tuner_oracle(oracle: Any, server: Any) -> Any:
    """Keras Tuner's chief servicer of `oracle`, added to the gRPC `server`
    (not yet started); returns the servicer."""
    servicer = _tuner_symbol(*TUNER_SYMBOLS[1])(oracle)
    _tuner_symbol(*TUNER_SYMBOLS[2])().add_OracleServicer_to_server(servicer, server)
    return servicer
