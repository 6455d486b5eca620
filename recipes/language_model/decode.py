"""Text from a language model: the prompt continued by sampling
(`rnnkit.decoding.sample_sequence`), read by a copy of the model for one stream.

`reader` makes (and keeps, while the model lives) copies of a model for other batch
sizes: evaluation reads a split by several streams, generation by one.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import keras
    from rnnkit_recipes.language_model.config import LanguageModelConfig

# Copies of a model for other batch sizes, kept while the model lives, so that
# repeated evaluations and predictions reuse their compiled predict functions.
_readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def reader(model: keras.Model, batch_size: int, stateful: bool) -> keras.Model:
    """A copy of `model` with its current weights for `batch_size` rows, states
    cleared."""
    copies = _readers.setdefault(model, {})
    key = (batch_size, stateful)
    if key in copies:
        copies[key].set_weights(model.get_weights())
    else:
        copies[key] = model.with_batch_size(batch_size, stateful=stateful)
    copy = copies[key]
    copy.reset_states()
    return copy


def generate(model: keras.Model, prompt: str, config: LanguageModelConfig) -> str:
    """The prompt followed by `evaluation.length` sampled tokens."""
    from rnnkit_recipes.language_model.data import EOS, tokenize

    from rnnkit import decoding

    evaluation = config.evaluation
    level = config.data.level
    index = {token: i for i, token in enumerate(model.tokens)}
    prompt_tokens = tokenize(
        prompt, level, config.data.lowercase, config.data.standardize
    )
    if level == "word" and prompt_tokens and prompt_tokens[-1] == EOS:
        prompt_tokens = prompt_tokens[:-1]  # continue the line, do not end it
    if not prompt_tokens:
        prompt_tokens = [EOS] if EOS in index else [model.tokens[-1]]
    prompt_ids = [index.get(token, 0) for token in prompt_tokens]
    stream_reader = reader(model, 1, stateful=True)
    generated = decoding.sample_sequence(
        stream_reader.predict_on_batch,
        prompt_ids,
        evaluation.length,
        temperature=evaluation.temperature,
        top_k=evaluation.top_k,
        top_p=evaluation.top_p,
        seed=evaluation.seed,
    )
    tokens = [model.tokens[i] for i in generated]
    if level == "char":
        return prompt + "".join(tokens)
    words = [prompt.strip(), *tokens]
    return " ".join(words).replace(f" {EOS} ", "\n").replace(f" {EOS}", "\n")
