"""Tests for rnnkit.models._vocabularies: the vocabularies both encoder-decoders take
as token lists or sizes (their `.keras` round trips are in test_encoder_decoder.py and
test_transformer_encoder_decoder.py)."""

import pytest

from rnnkit.models.encoder_decoder import EncoderDecoder
from rnnkit.models.transformer_encoder_decoder import TransformerEncoderDecoder

TOKENS = ["", "[UNK]", "[START]", "[END]", "a", "b"]
MODELS = [
    (EncoderDecoder, dict(embedding_dim=4, units=4)),
    (TransformerEncoderDecoder, dict(model_dim=8, num_heads=2, feedforward_dim=8)),
]


@pytest.mark.parametrize(("model_class", "kwargs"), MODELS)
def test_token_lists_and_sizes_survive_the_config(model_class, kwargs):
    model = model_class(TOKENS, 9, **kwargs)
    assert (model.source_vocabulary_size, model.source_tokens) == (6, TOKENS)
    assert (model.target_vocabulary_size, model.target_tokens) == (9, None)
    config = model.get_config()
    assert config["source_vocabulary"] == TOKENS and config["target_vocabulary"] == 9
    again = model_class.from_config(config)
    assert again.source_tokens == TOKENS and again.target_vocabulary_size == 9


@pytest.mark.parametrize(("model_class", "kwargs"), MODELS)
@pytest.mark.parametrize("vocabulary", [0, [], "abc", True])
def test_a_bad_vocabulary_is_an_error_naming_the_argument(
    model_class, kwargs, vocabulary
):
    with pytest.raises(ValueError, match="Argument `target_vocabulary` must be"):
        model_class(TOKENS, vocabulary, **kwargs)
