"""Text from a language model: the prompt continued by sampling
(`rnnkit.decoding.sample_sequence`), read by a copy of the model for one stream, or
by the Transformer through its key/value cache (`CachedContext`).

`reader` makes (and keeps, while the model lives) copies of a recurrent model for
other batch sizes: evaluation reads a split by several streams, generation by one.
A Transformer carries no state and reads any batch size itself.
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
    cleared (the Transformer itself: it has no state)."""
    if getattr(model, "architecture", "rnn") == "transformer":
        return model
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
    tokens = list(sampled(model, prompt, config))
    return joined(prompt, tokens, config.data.level)


def joined(prompt: str, tokens: list[str], level: str) -> str:
    """The text of a prompt and the tokens sampled after it."""
    from rnnkit_recipes.language_model.data import EOS

    if level == "char":
        return prompt + "".join(tokens)
    words = [prompt.strip(), *tokens]
    return " ".join(words).replace(f" {EOS} ", "\n").replace(f" {EOS}", "\n")


def pieces(model: keras.Model, prompt: str, config: LanguageModelConfig):
    """The text as it is generated, for streaming: the prompt, then what each
    sampled token adds to `generate`'s text (a character; a space and a word; a
    line end). Joined, they are the text `generate` returns for the same seed."""
    level = config.data.level
    tokens: list[str] = []
    shown = joined(prompt, tokens, level)
    yield shown
    for token in sampled(model, prompt, config):
        tokens.append(token)
        text = joined(prompt, tokens, level)
        if text.startswith(shown):  # a line end may wait for the next token
            yield text[len(shown) :]
            shown = text


def sampled(model: keras.Model, prompt: str, config: LanguageModelConfig):
    """The tokens sampled after `prompt`, one at a time."""
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
    if getattr(model, "architecture", "rnn") == "transformer":
        next_logits = CachedContext(model)
    else:
        next_logits = reader(model, 1, stateful=True).predict_on_batch
    for token in decoding.sampled_tokens(
        next_logits,
        prompt_ids,
        evaluation.length,
        temperature=evaluation.temperature,
        top_k=evaluation.top_k,
        top_p=evaluation.top_p,
        seed=evaluation.seed,
    ):
        yield model.tokens[token]


class CachedContext:
    """`next_logits` for `sample_sequence` from a Transformer language model: the
    new tokens go through the key/value cache, so each sampled token costs one pass
    of that token through the blocks.

    The model reads at most `context_length` tokens. The first call keeps the last
    `context_length` tokens of the prompt; when a later token would not fit, the
    context restarts from the last `context_length // 2` tokens (recomputed once),
    so the cost stays O(context) per token, never a full pass per token.
    """

    def __init__(self, model: keras.Model) -> None:
        import keras
        import tensorflow as tf

        self.model = model
        self.window = model.context_length
        self.history: list[int] = []
        self.caches = None
        self.step = 0
        decode = model.decode
        if keras.backend.backend() == "tensorflow":
            # One trace for the prompt's length and one for single tokens.
            decode = tf.function(decode, reduce_retracing=True)
        self._decode = decode

    def __call__(self, ids):
        import numpy as np
        from keras import ops

        new = [int(i) for i in np.asarray(ids).reshape(-1)]
        self.history.extend(new)
        if self.caches is None or self.step + len(new) > self.window:
            keep = self.window if self.caches is None else max(self.window // 2, 1)
            new = self.history[-keep:]
            self.caches, self.step = self.model.initial_cache(1), 0
        logits, self.caches = self._decode(
            ops.convert_to_tensor([new], "int32"),
            self.caches,
            ops.convert_to_tensor(self.step, "int32"),
        )
        self.step += len(new)
        return np.asarray(logits)[:, -1]  # (1, vocabulary)
