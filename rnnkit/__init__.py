"""rnnkit: textbook-clear recurrent and attention layers for Keras 3, and recipes.

Importing `rnnkit` is cheap; `rnnkit.layers` imports Keras.
"""

__version__ = "0.1.0"
