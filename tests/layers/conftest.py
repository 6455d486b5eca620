"""Full float32 for the layer tests on a GPU. There, float32 matrix products may run
in TF32 (10-bit mantissas, differences near 1e-3): PyTorch's cuDNN kernels do by
default, as do TensorFlow and JAX's default precision. These tests check the layers'
equations to 1e-5 against float32 references (numpy, Keras, PyTorch), so they ask
each backend for float32 products. On a CPU this changes nothing."""

import keras

if keras.backend.backend() == "torch":
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
elif keras.backend.backend() == "jax":
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
else:
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(False)
