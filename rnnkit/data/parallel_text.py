"""Parallel text for translation: readers, normalisation, tokens and vocabularies.

Two layouts are read:

- tab-separated sentence pairs in the Anki/Tatoeba layout (`English<TAB>Spanish`, an
  optional third attribution column), as a `.txt` file or the `.zip` the TensorFlow
  translation tutorial downloads (`spa-eng/spa.txt` inside);
- parallel plain-text files, one sentence per line, line *i* of one file translating
  line *i* of the other, optionally gzipped (Multi30k ships this way).

Every problem in the input (bad UTF-8, a line without a tab, files of different
lengths, empty sentences) raises `rnnkit.errors.DataError` naming the file and the line.
Only the Python standard library is imported here.
"""

from __future__ import annotations

import collections
import gzip
import os
import random
import re
import tempfile
import unicodedata
import urllib.error
import urllib.request
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rnnkit.errors import DataError

PAD, UNK, START, END = "", "[UNK]", "[START]", "[END]"
SPECIAL_TOKENS = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = range(len(SPECIAL_TOKENS))

ANKI_SPA_ENG_URL = (
    "http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
)

# Numbers keep their inner separators ("2:30", "1,000"); words keep inner hyphens and
# apostrophes ("t-shirt", "don't"); every other non-space character is its own token.
_TOKEN_PATTERN = re.compile(r"\d+(?:[.,:]\d+)+|\w+(?:[-'’]\w+)*|[^\w\s]")
_NO_SPACE_BEFORE = set(".,!?;:%)]}»”…")
_NO_SPACE_AFTER = set("([{¿¡«“")


@dataclass(frozen=True)
class TextOptions:
    """How raw sentences become tokens.

    Args:
        unicode_form: Unicode normalisation applied first ("NFC", "NFKC", "NFD",
            "NFKD"), so that one character has one encoding. Defaults to "NFKC".
        lowercase: lower-case every sentence. Defaults to True.
        split_punctuation: make each punctuation mark its own token; when False,
            tokens are the whitespace-separated words. Defaults to True.
    """

    unicode_form: str = "NFKC"
    lowercase: bool = True
    split_punctuation: bool = True

    def __post_init__(self) -> None:
        if self.unicode_form not in ("NFC", "NFKC", "NFD", "NFKD"):
            raise ValueError(
                "unicode_form must be one of NFC, NFKC, NFD, NFKD; "
                f"received: {self.unicode_form!r}"
            )


def normalize(text: str, options: TextOptions) -> str:
    """Unicode-normalises, collapses whitespace and optionally lower-cases `text`."""
    text = " ".join(unicodedata.normalize(options.unicode_form, text).split())
    return text.lower() if options.lowercase else text


def tokenize(text: str, options: TextOptions) -> list[str]:
    """Splits a raw sentence into tokens after `normalize`."""
    text = normalize(text, options)
    if options.split_punctuation:
        return _TOKEN_PATTERN.findall(text)
    return text.split()


def detokenize(tokens: Sequence[str]) -> str:
    """Joins tokens into a sentence, undoing punctuation splitting.

    No space goes before closing punctuation (". , ! ? ) ...") or after opening
    punctuation ("( ¿ ¡ ..."); straight double quotes alternate between opening and
    closing. This is the text BLEU is computed on.
    """
    pieces: list[str] = []
    glue_next = True
    quote_open = False
    for token in tokens:
        if token == '"':
            quote_open = not quote_open
            glue = not quote_open
            pieces.append(token if glue or glue_next else " " + token)
            glue_next = quote_open
            continue
        glue = glue_next or token in _NO_SPACE_BEFORE
        pieces.append(token if glue else " " + token)
        glue_next = token in _NO_SPACE_AFTER
    return "".join(pieces)


class Vocabulary:
    """A fixed token <-> id mapping whose first ids are the special tokens.

    Id 0 is padding, 1 the unknown token, 2 the start and 3 the end of a target
    sentence. Ordinary tokens follow by decreasing frequency, ties by the token, so
    the same corpus always gives the same ids.

    Args:
        tokens: every token, starting with `SPECIAL_TOKENS`, each once.
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        tokens = list(tokens)
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(
                f"tokens must start with the special tokens {SPECIAL_TOKENS}; "
                f"received: {tokens[: len(SPECIAL_TOKENS)]}"
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
        if max_size is not None and max_size <= len(SPECIAL_TOKENS):
            raise ValueError(
                f"max_size must be more than {len(SPECIAL_TOKENS)} (the special "
                f"tokens); received: {max_size}"
            )
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be >= 1; received: {min_frequency}")
        counts = collections.Counter(
            token for sentence in sentences for token in sentence
        )
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        kept = [token for token, count in ranked if count >= min_frequency]
        if max_size is not None:
            kept = kept[: max_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *kept])

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


def _read_text(path: Path, data: bytes | None = None) -> list[str]:
    """Lines of a UTF-8 file (gzip when the name ends in .gz), newlines removed."""
    if data is None:
        try:
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except (OSError, EOFError) as error:
            raise DataError(f"{path}: cannot be read ({error})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DataError(
            f"{path}: line {line} is not valid UTF-8 (byte {error.start})"
        ) from None
    return text.splitlines()


def _drop_empty(
    pairs: list[tuple[str, str]], line_numbers: list[int], where: str, skip: bool
) -> list[tuple[str, str]]:
    empty = [
        n
        for n, (a, b) in zip(line_numbers, pairs, strict=True)
        if not a.strip() or not b.strip()
    ]
    if not empty:
        return pairs
    message = (
        f"{where}: {len(empty)} pair(s) with an empty sentence, at line(s) "
        f"{', '.join(map(str, empty[:5]))}{' ...' if len(empty) > 5 else ''}"
    )
    if not skip:
        raise DataError(
            message + "; fix the file or set data.skip_empty_lines=true to drop them"
        )
    warnings.warn(message + "; dropped", stacklevel=3)
    return [(a, b) for a, b in pairs if a.strip() and b.strip()]


def read_tab_separated(
    path: str | os.PathLike, skip_empty: bool = False
) -> list[tuple[str, str]]:
    """Reads Anki/Tatoeba pairs: a `.txt` file, or a `.zip` holding exactly one.

    Each line is `first<TAB>second[<TAB>attribution]`; the attribution column of
    newer Anki files is ignored. Inside a zip, `_about.txt` is not a data file.

    Returns:
        (first column, second column) pairs, in file order.
    """
    path = Path(path)
    where = str(path)
    data = None
    if path.suffix == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = [
                    name
                    for name in archive.namelist()
                    if name.endswith(".txt") and not name.endswith("_about.txt")
                ]
                if len(members) != 1:
                    raise DataError(
                        f"{path}: expected one sentence-pair .txt file in the zip; "
                        f"found {members or 'none'}"
                    )
                data = archive.read(members[0])
                where = f"{path}:{members[0]}"
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except zipfile.BadZipFile as error:
            raise DataError(f"{path}: not a valid zip file ({error})") from None
    lines = _read_text(Path(where), data)
    pairs, line_numbers = [], []
    for number, line in enumerate(lines, start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            if not line.strip():
                fields = ["", ""]
            else:
                raise DataError(
                    f"{where}: line {number} has no tab; expected "
                    f"'source<TAB>target' (Anki/Tatoeba layout), got {line[:60]!r}"
                )
        pairs.append((fields[0], fields[1]))
        line_numbers.append(number)
    if not pairs:
        raise DataError(f"{where}: no sentence pairs")
    return _drop_empty(pairs, line_numbers, where, skip_empty)


def read_parallel_files(
    source_path: str | os.PathLike,
    target_path: str | os.PathLike,
    skip_empty: bool = False,
) -> list[tuple[str, str]]:
    """Reads two aligned plain-text files (optionally .gz) into sentence pairs."""
    source_path, target_path = Path(source_path), Path(target_path)
    source_lines = _read_text(source_path)
    target_lines = _read_text(target_path)
    if len(source_lines) != len(target_lines):
        raise DataError(
            f"misaligned parallel files: {source_path} has {len(source_lines)} lines "
            f"but {target_path} has {len(target_lines)}; line i of one must be the "
            "translation of line i of the other"
        )
    if not source_lines:
        raise DataError(f"{source_path}: no sentences")
    pairs = list(zip(source_lines, target_lines, strict=True))
    where = f"{source_path} / {target_path}"
    return _drop_empty(pairs, list(range(1, len(pairs) + 1)), where, skip_empty)


def default_cache_dir() -> Path:
    """Where downloads are kept: `$RNNKIT_DATA_DIR`, else `~/.rnnkit/datasets`."""
    return Path(os.environ.get("RNNKIT_DATA_DIR", Path.home() / ".rnnkit" / "datasets"))


def download(
    url: str = ANKI_SPA_ENG_URL,
    cache_dir: str | os.PathLike | None = None,
    timeout: float = 60.0,
) -> Path:
    """Downloads `url` once into `cache_dir` and returns the local path.

    The file is written under a temporary name and renamed when complete, so an
    interrupted download is never mistaken for the data. Without a connection the
    error says how to use local files instead.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    destination = cache_dir / url.rstrip("/").rsplit("/", 1)[-1]
    if destination.exists():
        return destination
    cache_dir.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=cache_dir, suffix=".part")
    try:
        with (
            os.fdopen(handle, "wb") as out,
            urllib.request.urlopen(url, timeout=timeout) as response,
        ):
            while chunk := response.read(1 << 20):
                out.write(chunk)
        os.replace(partial, destination)
    except (urllib.error.URLError, OSError) as error:
        raise DataError(
            f"could not download {url} ({getattr(error, 'reason', error)}). "
            "Offline? Point the recipe at local files instead: "
            "--set data.path=PATH/spa-eng.zip (an Anki/Tatoeba .zip or .txt), or "
            "--set data.format=parallel --set data.path='PATH/corpus_{split}.{lang}.gz'"
        ) from None
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return destination


def source_key(sentence: str) -> str:
    """What makes two source sentences the same for splitting: NFKC, spaces, case."""
    return " ".join(unicodedata.normalize("NFKC", sentence).split()).casefold()


def split_pairs(
    pairs: Sequence[tuple[str, str]],
    validation_fraction: float,
    test_fraction: float,
    seed: int,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """Splits pairs reproducibly into train, validation and test by source sentence.

    Anki/Tatoeba files hold several translations of one source sentence, so a split of
    the pairs at random would put the same source in training and in testing. Here
    the distinct source sentences (`source_key`: same text after NFKC, whitespace
    and case folding) are shuffled with `seed`, and all pairs of one source go to the
    same split: test first, then validation, each taking whole sources until it
    holds its fraction of the pairs; training gets the rest. No test or validation
    source occurs in training.
    """
    for name, value in (
        ("validation_fraction", validation_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0.0 < value < 0.5:
            raise ValueError(f"{name} must be in (0, 0.5); received: {value}")
    groups: dict[str, list[int]] = {}
    for index, (source, _) in enumerate(pairs):
        groups.setdefault(source_key(source), []).append(index)
    keys = list(groups)
    random.Random(seed).shuffle(keys)
    wanted = [
        max(1, round(fraction * len(pairs)))
        for fraction in (test_fraction, validation_fraction)
    ]
    parts: list[list[tuple[str, str]]] = [[], [], []]  # test, validation, train
    part = 0
    for key in keys:
        while part < 2 and len(parts[part]) >= wanted[part]:
            part += 1
        parts[part].extend(pairs[i] for i in groups[key])
    test, validation, train = parts
    if not test or not validation or not train:
        raise DataError(
            f"{len(pairs)} pairs ({len(keys)} distinct source sentences) are too few "
            "to split into train, validation and test"
        )
    return train, validation, test
