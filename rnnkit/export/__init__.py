"""SavedModel, LiteRT (TFLite) and ONNX export of rnnkit models and runs.

`rnnkit.export.convert` turns a Keras model or a `tf.function` into a LiteRT
flatbuffer with builtin ops only (`to_tflite`) or an ONNX model (`to_onnx`), and
runs either in its own runtime (`run_tflite`, `run_onnx`).
"""
