"""Vocabularies of parallel text: token <-> id mappings, by words or by subwords.

The first ids are the special tokens (padding, unknown, start, end); `Vocabulary`
keeps whole tokens, `SubwordVocabulary` cuts rare words into pieces. Both are
importable from `rnnkit.data.parallel_text` as well. Only the Python standard library
is imported here.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
SPECIAL_TOKENS = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = range(len(SPECIAL_TOKENS))


class Vocabulary:
    """A fixed token <-> id mapping whose first ids are the special tokens.

    Id 0 is padding, 1 the unknown token, 2 the start and 3 the end of a target
    sentence. Ordinary tokens follow by decreasing frequency, ties by the token, so
    the same corpus always gives the same ids.

    A subclass may spell the four special tokens otherwise (`special_tokens`; the
    captioning recipe's are `<unk>`, `<start>` and `<end>`); their ids stay 0 to 3.

    Args:
        tokens: every token, starting with `special_tokens`, each once.
    """

    special_tokens: tuple[str, ...] = SPECIAL_TOKENS

    def __init__(self, tokens: Sequence[str]) -> None:
        tokens = list(tokens)
        specials = self.special_tokens
        if tuple(tokens[: len(specials)]) != specials:
            raise ValueError(
                f"tokens must start with the special tokens {specials}; "
                f"received: {tokens[: len(specials)]}"
            )
        if len(set(tokens)) != len(tokens):
            repeated = [t for t, n in collections.Counter(tokens).items() if n > 1]
            raise ValueError(f"tokens must be unique; repeated: {repeated[:5]}")
        self.tokens = tokens
        self._ids = {token: index for index, token in enumerate(tokens)}

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        max_size: int | None = None,
        min_frequency: int = 1,
    ) -> Vocabulary:
        """Builds a vocabulary from tokenised sentences.

        Args:
            sentences: token lists (the training split only).
            max_size: the most tokens kept, special tokens included; None keeps all.
            min_frequency: tokens seen fewer times map to the unknown token.
        """
        specials = cls.special_tokens
        if max_size is not None and max_size <= len(specials):
            raise ValueError(
                f"max_size must be more than {len(specials)} (the special "
                f"tokens); received: {max_size}"
            )
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be >= 1; received: {min_frequency}")
        counts = collections.Counter(
            token for sentence in sentences for token in sentence
        )
        for special in specials:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        kept = [token for token, count in ranked if count >= min_frequency]
        if max_size is not None:
            kept = kept[: max_size - len(specials)]
        return cls([*specials, *kept])

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(
        self, tokens: Sequence[str], add_start: bool = False, add_end: bool = False
    ) -> list[int]:
        """Maps tokens to ids (unknown tokens to `UNK_ID`), optionally framed."""
        ids = [self._ids.get(token, UNK_ID) for token in tokens]
        return [START_ID] * add_start + ids + [END_ID] * add_end

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Maps ids to tokens, stopping at the end token and dropping pad/start."""
        tokens = []
        for index in ids:
            index = int(index)
            if index == END_ID:
                break
            if index not in (PAD_ID, START_ID):
                tokens.append(self.tokens[index])
        return tokens

    def pieces(self, tokens: Sequence[str]) -> list[str]:
        """The tokens the model reads for `tokens`: the words themselves here."""
        return list(tokens)


class SubwordVocabulary(Vocabulary):
    """A byte-pair-encoding subword vocabulary (SentencePiece) over the same words.

    Sentences are first split into words by `tokenize` (normalisation, lower-casing
    and punctuation splitting as for the word level); SentencePiece's BPE model
    (Sennrich et al. 2016; Kudo and Richardson 2018) then cuts each word into pieces
    by applying its learned merges, a piece that starts a word marked with "▁"
    (German "baumwolle" -> "▁baum", "wo", "lle"). Only a character never seen in
    training is unknown, so rare words, names and compounds are spelled out instead
    of becoming `[UNK]`. Training is deterministic: the same sentences give the same
    pieces.

    A BPE model is its pieces in merge order (SentencePiece scores piece i by -i), so
    the token list stored with the model (`EncoderDecoder.source_tokens`) rebuilds the
    tokenizer exactly. `encode` takes and `decode` gives words, as for `Vocabulary`,
    and `detokenize` turns the words into text.

    Args:
        tokens: every piece in merge order, starting with `SPECIAL_TOKENS`.
    """

    WORD_START = "\u2581"  # SentencePiece's "▁"
    _PAD_NAME = "[PAD]"  # SentencePiece needs a name for the empty pad token

    def __init__(self, tokens: Sequence[str]) -> None:
        import sentencepiece

        super().__init__(tokens)
        if self._PAD_NAME in self._ids:
            raise ValueError(f"{self._PAD_NAME!r} cannot be an ordinary token")
        self._processor = sentencepiece.SentencePieceProcessor(
            model_proto=self._model_proto(self.tokens)
        )

    @classmethod
    def _model_proto(cls, tokens: Sequence[str]) -> bytes:
        from sentencepiece import sentencepiece_model_pb2 as pb

        proto = pb.ModelProto()
        spec = proto.trainer_spec
        spec.model_type = pb.TrainerSpec.BPE
        spec.vocab_size = len(tokens)
        spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = (
            PAD_ID, UNK_ID, START_ID, END_ID,
        )  # fmt: skip
        spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = (
            cls._PAD_NAME, *SPECIAL_TOKENS[1:],
        )  # fmt: skip
        spec.unk_surface = UNK
        normalizer = proto.normalizer_spec
        normalizer.name = "identity"
        normalizer.add_dummy_prefix = True
        normalizer.remove_extra_whitespaces = True
        normalizer.escape_whitespaces = True
        Piece = pb.ModelProto.SentencePiece
        for index, token in enumerate(tokens):
            piece = proto.pieces.add()
            piece.piece = cls._PAD_NAME if index == PAD_ID else token
            piece.score = 0.0 if index < len(SPECIAL_TOKENS) else -float(index)
            piece.type = (
                Piece.UNKNOWN
                if index == UNK_ID
                else Piece.CONTROL
                if index < len(SPECIAL_TOKENS)
                else Piece.NORMAL
            )
        return proto.SerializeToString()

    def model_proto(self) -> bytes:
        """The SentencePiece model of these pieces (what `sentencepiece` and
        TensorFlow Text's `SentencepieceTokenizer` load)."""
        return self._model_proto(self.tokens)

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        max_size: int | None = 8000,
        min_frequency: int = 1,
    ) -> SubwordVocabulary:
        """Learns BPE pieces (SentencePiece) from tokenised sentences.

        Args:
            sentences: word lists (the training split only).
            max_size: pieces in the vocabulary, special tokens included; fewer when
                the text has fewer distinct pieces.
            min_frequency: not used (BPE merges stop at `max_size`); accepted so
                that both vocabularies build alike.
        """
        import io

        import sentencepiece

        if max_size is None or max_size <= len(SPECIAL_TOKENS):
            raise ValueError(
                f"max_size must be more than {len(SPECIAL_TOKENS)} (the special "
                f"tokens); received: {max_size}"
            )
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=(" ".join(sentence) for sentence in sentences),
            model_writer=model,
            model_type="bpe",
            vocab_size=max_size,
            hard_vocab_limit=False,  # small corpora: as many pieces as there are
            character_coverage=1.0,
            normalization_rule_name="identity",  # `tokenize` has normalised
            split_digits=False,
            max_sentence_length=1 << 16,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=START_ID,
            eos_id=END_ID,
            pad_piece=cls._PAD_NAME,
            unk_piece=UNK,
            bos_piece=START,
            eos_piece=END,
            num_threads=1,
            minloglevel=2,
        )
        trained = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
        pieces = [trained.id_to_piece(i) for i in range(trained.get_piece_size())]
        return cls([PAD, *pieces[1:]])

    def encode(
        self, tokens: Sequence[str], add_start: bool = False, add_end: bool = False
    ) -> list[int]:
        """Maps words to piece ids (unseen characters to `UNK_ID`), maybe framed."""
        ids = self._processor.encode(" ".join(tokens)) if tokens else []
        return [START_ID] * add_start + ids + [END_ID] * add_end

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Maps piece ids to words, stopping at the end token, dropping pad/start."""
        kept = []
        for index in map(int, ids):
            if index == END_ID:
                break
            if index not in (PAD_ID, START_ID):
                kept.append(index)
        return self._processor.decode(kept).split()

    def pieces(self, tokens: Sequence[str]) -> list[str]:
        """The pieces the words are cut into (what the model reads)."""
        return [self.tokens[i] for i in self.encode(tokens)]


def vocabulary_class(tokenizer: str) -> type[Vocabulary]:
    """`SubwordVocabulary` for "subword", `Vocabulary` for "word"."""
    classes = {"subword": SubwordVocabulary, "word": Vocabulary}
    if tokenizer not in classes:
        raise ValueError(
            f"tokenizer must be one of {sorted(classes)}; received: {tokenizer!r}"
        )
    return classes[tokenizer]


def count_unknown(sentences: Iterable[Sequence[str]]) -> int:
    """How many token lists hold the unknown token, alone or inside a word."""
    return sum(any(UNK in token for token in sentence) for sentence in sentences)
