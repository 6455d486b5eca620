"""Greedy and beam search for encoder-decoder models, and sampling for language models.

- `greedy_search` (`rnnkit.decoding.greedy`) and `beam_search`
  (`rnnkit.decoding.beam`) drive any model that offers `encode`,
  `initial_decoder_state` and `decode_step` (as `rnnkit.models.EncoderDecoder` and
  `rnnkit.models.ImageCaptioner` do), in one compiled time loop per model and setting;
  the interface, the length limits and the `SearchResult` they return are described
  in `rnnkit.decoding.search`. `greedy_loop` is the greedy loop as tensors, for a
  graph of your own (the exported SavedModels' `translate` and `caption`).
- `sampling_probabilities`, `sample_next`, `sample_sequence` and `sampled_tokens`
  (`rnnkit.decoding.sampling`) draw the next token of a language model with a
  temperature, top-k and nucleus (top-p) filtering, seeded.
"""

from rnnkit.decoding.beam import beam_search
from rnnkit.decoding.greedy import greedy_loop, greedy_search
from rnnkit.decoding.sampling import (
    sample_next,
    sample_sequence,
    sampled_tokens,
    sampling_probabilities,
)
from rnnkit.decoding.search import SearchResult, length_penalty

__all__ = [
    "SearchResult",
    "beam_search",
    "greedy_loop",
    "greedy_search",
    "length_penalty",
    "sample_next",
    "sample_sequence",
    "sampled_tokens",
    "sampling_probabilities",
]
