"""Text front end: sanitize, normalize (numbers, abbreviations, symbols), split, tokenize.

The model only ever sees characters it was trained on, so everything a user can type is first
reduced to plain words: "Dr. Smith paid $3.50 on May 5th" -> "doctor smith paid three dollars and
fifty cents on may fifth". Sentence splitting lets long inputs be synthesized piece by piece.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Protocol

MAX_CHARS = 5000


class TextError(ValueError):
    """Input text that cannot be synthesized; the message says why."""


_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = [(10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand")]
_ORDINAL_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                      "nine": "ninth", "twelve": "twelfth"}


def _below_thousand(n: int) -> str:
    words = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else ""))
    elif n or not words:
        words.append(_ONES[n])
    return " ".join(words)


def number_to_words(n: int) -> str:
    """Cardinal English words for an integer (``-12`` -> "minus twelve")."""
    if n < 0:
        return "minus " + number_to_words(-n)
    if n >= 10**15:
        return " ".join(_ONES[int(d)] for d in str(n))
    words = []
    for value, name in _SCALES:
        if n >= value:
            words += [_below_thousand(n // value), name]
            n %= value
    if n or not words:
        words.append(_below_thousand(n))
    return " ".join(words)


def digits_to_words(digits: str) -> str:
    """Cardinal words for a run of digits of any length: longer than 15 digits are read one by one
    (as :func:`number_to_words` reads them), without making an int (Python refuses to parse more
    than 4,300 digits)."""
    if len(digits) > 15:
        return " ".join(_ONES[int(d)] for d in digits)
    return number_to_words(int(digits))


def ordinal_words(n: int | str) -> str:
    words = digits_to_words(n) if isinstance(n, str) else number_to_words(n)
    head, sep, last = words.rpartition(" ")
    last_part = last.split("-")[-1]
    if last_part in _ORDINAL_IRREGULAR:
        new = _ORDINAL_IRREGULAR[last_part]
    elif last_part.endswith("y"):
        new = last_part[:-1] + "ieth"
    else:
        new = last_part + "th"
    last = last[: len(last) - len(last_part)] + new
    return head + sep + last


def year_words(n: int) -> str:
    """Years read in pairs: 1999 -> "nineteen ninety-nine", 2005 -> "two thousand five"."""
    if 2000 <= n < 2010 or n % 1000 == 0 or not 1000 <= n < 10000:
        return number_to_words(n)
    hi, lo = divmod(n, 100)
    if lo == 0:
        return number_to_words(hi) + " hundred"
    return number_to_words(hi) + (" oh " if lo < 10 else " ") + number_to_words(lo)


_ABBREVIATIONS = {
    "mr": "mister", "mrs": "missus", "ms": "miss", "dr": "doctor", "prof": "professor", "st": "saint",
    "jr": "junior", "sr": "senior", "vs": "versus", "etc": "et cetera", "e.g": "for example",
    "i.e": "that is", "approx": "approximately", "dept": "department", "mt": "mount",
    "ave": "avenue", "jan": "january", "feb": "february", "mar": "march", "apr": "april",
    "aug": "august", "sept": "september", "oct": "october", "nov": "november", "dec": "december",
}
_ABBREV_RE = re.compile(r"\b(" + "|".join(re.escape(a) for a in sorted(_ABBREVIATIONS, key=len, reverse=True)) + r")\.(?=\s|$)", re.I)
_NO_RE = re.compile(r"\bno\.(?=\s*\d)", re.I)  # "No. 5" is a number; "no." at a sentence end is not
_SYMBOLS = {"&": " and ", "@": " at ", "+": " plus ", "=": " equals ", "%": " percent ", "#": " number ",
            "°": " degrees ", "×": " times ", "/": " slash "}
_UNICODE_PUNCT = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": ", ", "…": "...", "\u00a0": " "})
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
             "€": ("euro", "euros", "cent", "cents")}


def _money(m: re.Match) -> str:
    one, many, sub_one, sub_many = _CURRENCY[m.group(1)]
    digits = m.group(2).replace(",", "").lstrip("0") or "0"
    cents = int((m.group(3) or "0").ljust(2, "0")[:2])
    parts = []
    if digits != "0" or not cents:
        parts.append(f"{digits_to_words(digits)} {one if digits == '1' else many}")
    if cents:
        parts.append(f"{number_to_words(cents)} {sub_one if cents == 1 else sub_many}")
    return " and ".join(parts)


def _decimal(m: re.Match) -> str:
    whole, frac = m.group(1).replace(",", ""), m.group(2)
    return digits_to_words(whole.lstrip("0") or "0") + " point " + " ".join(_ONES[int(d)] for d in frac)


def _integer(m: re.Match) -> str:
    text = m.group(0)
    digits = text.replace(",", "")
    if "," not in text and len(text) == 4 and 1100 <= int(digits) <= 2099:
        return year_words(int(digits))
    return digits_to_words(digits.lstrip("0") or "0")


# Code points that are not characters: lone surrogates (halves of a UTF-16 pair; JSON's "\ud800"
# and Python's surrogateescape make them) and the 66 Unicode non-characters.
_NOT_CHARACTERS = re.compile("[\ud800-\udfff\ufdd0-\ufdef" + "".join(
    f"{chr(plane | 0xFFFE)}{chr(plane | 0xFFFF)}" for plane in range(0, 0x110000, 0x10000)) + "]")


def _check_characters(text: str) -> None:
    """Raise :class:`TextError` naming the first code point that is not a character, and where.

    Rejected, not dropped: such a code point is never text a person typed but a bug or a
    broken encoding upstream (text cut inside a UTF-16 pair, bytes that were not UTF-8), and
    later stages cannot take it (UTF-8 encoding, gruut's lexicon lookup raise on a surrogate)."""
    m = _NOT_CHARACTERS.search(text)
    if m is None:
        return
    cp = ord(m.group())
    what = ("a lone surrogate", "half of a UTF-16 pair") if 0xD800 <= cp <= 0xDFFF else (
        "a Unicode non-character", "reserved for internal use")
    raise TextError(f"text holds {what[0]} U+{cp:04X} ({what[1]}) at character offset {m.start()}: "
                    "it is not text; send valid Unicode")


def sanitize(text: str, max_chars: int = MAX_CHARS) -> str:
    """Unicode-normalize, drop control characters, collapse whitespace; reject empty/huge input,
    and input holding a lone surrogate (U+D800-U+DFFF) or a non-character (U+FDD0-U+FDEF,
    U+xFFFE, U+xFFFF): :class:`TextError` names it and its offset (see :func:`_check_characters`)."""
    if not isinstance(text, str):
        raise TextError(f"text must be a string, got {type(text).__name__}")
    too_long = f"; the limit is {max_chars}"
    if len(text) > max_chars:
        raise TextError(f"text is {len(text)} characters{too_long}")
    _check_characters(text)
    text = unicodedata.normalize("NFKC", text).translate(_UNICODE_PUNCT)
    if len(text) > max_chars:  # NFKC can expand text (ligatures, compatibility forms)
        raise TextError(f"text is {len(text)} characters after unicode normalization{too_long}")
    # Accents off ("café" -> "cafe"): the model's alphabet is plain letters.
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) != "Mn")
    # Invisible format characters (soft hyphen, zero-width space) vanish; control characters
    # and line/paragraph separators become spaces.
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text if unicodedata.category(c) != "Cf")
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        raise TextError("text is empty (nothing left after removing whitespace and control characters)")
    return text


def _meridiem(m: re.Match) -> str:
    """"a.m."/"pm" after a time; the dot survives only where it also ends the sentence."""
    return f" {m.group(1).lower()} m" + ("." if m.group("end") is not None else "")


def _clock(m: re.Match) -> str:
    h, mins = int(m.group(1)), int(m.group(2))
    if mins == 0:
        return f"{number_to_words(h)} o'clock"
    return f"{number_to_words(h)} {'oh ' if mins < 10 else ''}{number_to_words(mins)}"


def normalize(text: str) -> str:
    """Sanitized text to lower-case words and punctuation a character model can read."""
    text = _NO_RE.sub("number", text)
    text = re.sub(r"(\d(?:st|nd|rd|th)?\s+)St\.", r"\1street", text)  # "42nd St." is a street
    text = re.sub(r"(?:(?<=\d)|(?<=\d ))([ap])\.?m(?:\.(?=\s*$|\s+(?-i:[A-Z]))(?P<end>)|\.?)(?=\W|$)", _meridiem, text, flags=re.I)
    text = re.sub(r"\b(\d{1,2}):([0-5]\d)(?!\d)", _clock, text)
    text = _ABBREV_RE.sub(lambda m: _ABBREVIATIONS[m.group(1).lower()], text)
    text = re.sub(r"([$£€])\s?(\d[\d,]*)(?:\.(\d+))?", _money, text)
    # Digit patterns start only where a run of digits (and commas) starts and never backtrack into
    # it (possessive quantifiers): otherwise each of a run's n digits starts a match that scans
    # the rest of the run, and a 4,000-digit run costs seconds (issue 39).
    text = re.sub(r"(?<!\d)(\d++)(st|nd|rd|th)\b", lambda m: ordinal_words(m.group(1).lstrip("0") or "0"), text,
                  flags=re.I)
    text = re.sub(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])", " ", text)  # "MP3" -> "MP 3"
    text = re.sub(r"(?<![\d,])(\d[\d,]*+)\.(\d++)", _decimal, text)
    text = re.sub(r"\d{1,3}(?:,\d{3})+|\d+", _integer, text)
    for sym, word in _SYMBOLS.items():
        text = text.replace(sym, word)
    text = text.lower()
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


def split_sentences(text: str, max_chars: int = 200) -> list[str]:
    """Sentences of at most ``max_chars`` (long ones broken at commas, then at spaces)."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        while len(sentence) > max_chars:
            cut = sentence.rfind(", ", 0, max_chars)
            cut = cut + 1 if cut > 0 else sentence.rfind(" ", 0, max_chars)
            if cut <= 0:
                cut = max_chars
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    return pieces


DEFAULT_ALPHABET = " abcdefghijklmnopqrstuvwxyz'-,.!?;:\""


@dataclass(frozen=True)
class CharTokenizer:
    """Characters to ids ``1..len(alphabet)`` (0 is reserved for padding). Characters outside
    the alphabet are dropped (normalization has already spelled out everything speakable)."""

    alphabet: str = DEFAULT_ALPHABET
    kind: str = field(default="chars", init=False)

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 1

    def encode(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> list[int]:
        if lexicon:
            raise TextError("this voice reads letters, not phonemes: it takes no pronunciations (<phoneme>, lexicons)")
        index = {c: i + 1 for i, c in enumerate(self.alphabet)}
        return [index[c] for c in text if c in index]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.alphabet[i - 1] for i in ids if 0 < i <= len(self.alphabet))

    def words(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> tuple[list[str], list[int]]:
        """The words of ``text`` (runs of letters, digits and apostrophes), and for each id of
        :meth:`encode` the index of its word (-1 between words)."""
        kept = [c for c in text if c in self.alphabet]
        words: list[str] = []
        owner: list[int] = []
        for i, c in enumerate(kept):
            inside = c.isalnum() or (c == "'" and 0 < i < len(kept) - 1 and kept[i - 1].isalnum() and kept[i + 1].isalnum())
            if inside and (i == 0 or owner[-1] < 0):
                words.append("")
            if inside:
                words[-1] += c
            owner.append(len(words) - 1 if inside else -1)
        return words, owner

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "alphabet": self.alphabet}

    def is_speakable(self, ids: list[int]) -> bool:
        """Whether the ids hold at least one letter or digit."""
        return any(0 < i <= len(self.alphabet) and self.alphabet[i - 1].isalnum() for i in ids)


class Tokenizer(Protocol):
    """Normalized text to the model's unit ids (:class:`CharTokenizer`, or
    :class:`~voicespec.frontend.phonemes.PhonemeTokenizer`); id 0 is padding."""

    kind: str

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def is_speakable(self, ids: list[int]) -> bool: ...

    def words(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> tuple[list[str], list[int]]: ...

    def to_dict(self) -> dict[str, Any]: ...


def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """The tokenizer a voice records: ``chars`` (an alphabet) or ``phonemes`` (gruut units)."""
    if d.get("kind") == "chars":
        return CharTokenizer(d.get("alphabet", DEFAULT_ALPHABET))
    if d.get("kind") == "phonemes":
        from voicespec.frontend.phonemes import LANG, PhonemeTokenizer

        if d.get("lang", LANG) != LANG:
            raise ValueError(f"phoneme tokenizer language {d.get('lang')!r} is not supported (only {LANG!r})")
        return PhonemeTokenizer(tuple(d["units"])) if "units" in d else PhonemeTokenizer()
    raise ValueError(f"unknown tokenizer kind {d.get('kind')!r}")


@dataclass(frozen=True)
class FrontEnd:
    """sanitize → normalize → split → tokenize, with the limits in one place."""

    tokenizer: Tokenizer = field(default_factory=CharTokenizer)
    max_chars: int = MAX_CHARS
    max_sentence_chars: int = 200

    def sentences(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> list[tuple[str, list[int]]]:
        """(normalized sentence, token ids) pairs; sentences with nothing speakable are skipped.
        ``lexicon``: pronunciations of words (``frontend/lexicon.py``), for phoneme voices."""
        out = []
        for sentence in split_sentences(normalize(sanitize(text, self.max_chars)), self.max_sentence_chars):
            ids = self.tokenizer.encode(sentence, lexicon)
            if self.tokenizer.is_speakable(ids):
                out.append((sentence, ids))
        if not out:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise TextError(f"text has nothing this voice can speak: it speaks English text and found no letters "
                            f"or digits it can read in {shown!r}")
        return out
