"""Tests for rnnkit.data.vocabulary: word and subword vocabularies on real text."""

import io

import pytest

from rnnkit.data import parallel_text as pt
from rnnkit.data import vocabulary as vb
from tests.shared_data import SHARED_DATA, require

SHARED = SHARED_DATA / "translation"


def test_vocabulary_order_encode_decode():
    sentences = [["b", "a", "a"], ["c", "a", "b"], ["d"]]
    vocabulary = vb.Vocabulary.build(sentences)
    assert vocabulary.tokens[:4] == list(vb.SPECIAL_TOKENS)
    assert vocabulary.tokens[4:] == ["a", "b", "c", "d"]  # by count, then token
    assert len(vb.Vocabulary.build(sentences, min_frequency=2)) == 6
    assert len(vb.Vocabulary.build(sentences, max_size=5)) == 5
    ids = vocabulary.encode(["a", "zzz"], add_start=True, add_end=True)
    assert ids == [vb.START_ID, 4, vb.UNK_ID, vb.END_ID]
    assert vocabulary.decode(ids + [5, 0]) == ["a", "[UNK]"]
    with pytest.raises(ValueError, match="special tokens"):
        vb.Vocabulary(["a", "b"])
    with pytest.raises(ValueError, match="max_size"):
        vb.Vocabulary.build(sentences, max_size=4)


def multi30k_words(split: str, lang: str, count: int) -> list[list[str]]:
    path = require(SHARED / f"multi30k_{split}.{lang}.gz")
    options = pt.TextOptions()
    return [pt.tokenize(line, options) for line in pt._read_text(path)[:count]]


def test_subword_vocabulary_round_trips_real_sentences_without_unknowns():
    """BPE pieces of 2,000 Multi30k sentences spell out unseen German words."""
    train = multi30k_words("train", "de", 2000)
    held_out = multi30k_words("val", "de", 300)
    subword = vb.SubwordVocabulary.build(train, 1500)
    word = vb.Vocabulary.build(train, min_frequency=2)
    assert len(subword) == 1500 and subword.tokens[:4] == list(vb.SPECIAL_TOKENS)
    seen = {character for sentence in train for w in sentence for character in w}
    spelled = [s for s in held_out if set("".join(s)) <= seen]
    assert len(spelled) > 250
    encoded = [subword.encode(s, add_start=True, add_end=True) for s in spelled]
    assert all(ids[0] == vb.START_ID and ids[-1] == vb.END_ID for ids in encoded)
    # Encoding then decoding gives the words, and so the text, back.
    assert [subword.decode(ids) for ids in encoded] == spelled
    assert [pt.detokenize(subword.decode(ids)) for ids in encoded] == [
        pt.detokenize(s) for s in spelled
    ]
    assert vb.count_unknown(subword.decode(ids) for ids in encoded) == 0
    # The word level loses the rare words of most of these sentences.
    word_level = [word.decode(word.encode(s)) for s in spelled]
    assert vb.count_unknown(word_level) > len(spelled) // 2
    # Long words are cut into pieces; frequent ones stay whole.
    pieces = subword.pieces(["ein", "bergsteiger"])
    assert pieces[0] == "\u2581ein" and len(pieces) > 2
    assert pieces[1].startswith("\u2581") and not pieces[2].startswith("\u2581")
    # Training is deterministic (the tokenizers library's BPE/WordPiece is not).
    assert vb.SubwordVocabulary.build(train, 1500).tokens == subword.tokens


def test_subword_tokens_alone_rebuild_the_tokenizer():
    """What the model stores (the piece list) encodes as SentencePiece's own model."""
    import sentencepiece

    train = multi30k_words("train", "en", 1000)
    # The reference: SentencePiece's BPE model as its trainer writes it, with its
    # own scores and settings.
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=(" ".join(sentence) for sentence in train),
        model_writer=model, model_type="bpe", vocab_size=800,
        character_coverage=1.0, normalization_rule_name="identity",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="[PAD]",
        unk_piece="[UNK]", bos_piece="[START]", eos_piece="[END]", minloglevel=2,
    )  # fmt: skip
    reference = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    pieces = [reference.id_to_piece(i) for i in range(reference.get_piece_size())]
    rebuilt = vb.SubwordVocabulary(["", *pieces[1:]])
    assert rebuilt.tokens == vb.SubwordVocabulary.build(train, 800).tokens
    sentences = multi30k_words("val", "en", 300)
    assert [rebuilt.encode(s) for s in sentences] == [
        reference.encode(" ".join(s)) for s in sentences
    ]
    # A character never seen in training is unknown, and only that character.
    assert rebuilt.decode(rebuilt.encode(["a", "日本", "dog"])) == ["a", vb.UNK, "dog"]
    assert rebuilt.encode([]) == [] and rebuilt.decode([vb.END_ID, 9]) == []
    with pytest.raises(ValueError, match="max_size"):
        vb.SubwordVocabulary.build(train, 4)
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        vb.vocabulary_class("bpe")


def test_count_unknown_counts_sentences_not_tokens():
    sentences = [["a", vb.UNK, vb.UNK], ["b"], [vb.UNK], [], ["w" + vb.UNK + "rd"]]
    assert vb.count_unknown(sentences) == 3
