"""Phonemes as the model's units: normalized words to IPA phonemes with ``gruut`` (MIT, offline).

Our normalizer (:mod:`voicespec.frontend.text`) stays the one place that decides *which words* are spoken
("$3.50" -> "three dollars and fifty cents"); gruut only decides *how a word sounds*: its lexicon
(CMUdict-derived) for known words and its neural G2P for any other ("Okafor" -> ˈoʊ k ə f ɚ), so
a phoneme voice can say words it never heard. Nothing GPL is involved (no espeak-ng).

Units: one per phoneme, with stress kept on the vowel that carries it (``ˈæ``, ``ˌoʊ``, ``æ`` are
three units: stress is how English marks emphasis), a word boundary ``" "`` between words, and
punctuation kept as breaks: ``,`` (also for ``;`` ``:`` ``-``), ``.``, ``?``, ``!`` — the last two
change intonation. Id 0 is padding, as for the character tokenizer.
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
import sys
import threading
import types
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Mapping, Sequence
from typing import Any

WORD = " "
BREAKS = {",": ",", ";": ",", ":": ",", "-": ",", ".": ".", "?": "?", "!": "!"}
STRESS = ("ˈ", "ˌ")
LANG = "en-us"
PHONEMIZER_VERSION = 3  # bump when phonemize() would give other units for the same text


def default_units() -> tuple[str, ...]:
    """Breaks, the word boundary, every phoneme, and each vowel with primary/secondary stress."""
    from gruut_ipa import Phonemes

    phonemes = list(Phonemes.from_language(LANG))
    vowels = [p.text for p in phonemes if p.vowel is not None or p.dipthong is not None or p.schwa is not None]
    stressed = [s + v for v in vowels for s in STRESS]
    return (WORD, *dict.fromkeys(BREAKS.values()), *(p.text for p in phonemes), *stressed)


def _plain(unit: str) -> str:
    """``unit`` without stress or combining marks (the fallback for a rarer gruut symbol)."""
    u = "".join(c for c in unicodedata.normalize("NFD", unit) if c not in STRESS and not unicodedata.combining(c))
    return u.replace("ɝ", "ɚ").replace("ᵻ", "ɪ").replace("ɾ", "t").replace("ɐ", "ə")


def phonemize(text: str) -> list[str]:
    """Normalized text to units: phonemes per word, ``" "`` between words, punctuation breaks."""
    return list(tagged_units(text)[0])


def tagged_units(text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None,
                 ) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """:func:`phonemize` with each unit's word: (units, word index per unit or -1 for a boundary
    or break, the words as spoken). Timestamps come from the word of each unit.

    One gruut pass over the whole sentence, so its part-of-speech tagger picks between readings
    ("excuse" /z/ as a verb, /s/ as a noun) and the per-sentence cost is paid once (~2 ms a sentence with :func:`_processor`).
    ``lexicon``: lower-case word -> units, said instead of gruut's reading (``frontend/lexicon.py``).
    """
    units: list[str] = []
    owner: list[int] = []
    words: list[str] = []
    text = re.sub(r"(?<=\w)-(?=\w)", " ", text)  # "twenty-second": two words, no pause
    text = re.sub(r"\s+-+\s+", ", ", text)  # a dash between words is a pause

    def add(unit: str, word: int = -1) -> None:
        units.append(unit)
        owner.append(word)

    processor = _processor()
    with _PROCESSOR_LOCK:
        graph, root = processor(text, lang=LANG)
        spoken = list(processor.sentences(graph, root))
    for sentence in spoken:
        for word in sentence:
            if word.is_break or word.is_punctuation or not word.phonemes:
                mark = BREAKS.get(word.text.strip())
                if mark is not None:
                    if units and units[-1] == WORD:
                        units.pop(), owner.pop()
                    if units and units[-1] not in BREAKS.values():
                        add(mark)
                continue
            if units and units[-1] != WORD:
                add(WORD)
            words.append(word.text)
            own = lexicon.get(word.text.lower()) if lexicon else None
            for p in word.phonemes if own is None else own:
                add(p, len(words) - 1)
            add(WORD)
    while units and units[-1] == WORD:
        units.pop(), owner.pop()
    return tuple(units), tuple(owner), tuple(words)


_PROCESSOR_LOCK = threading.Lock()  # one gruut pipeline for every thread (its POS tagger is shared)


@lru_cache(maxsize=1)
def _processor() -> Any:
    """gruut's English text processor, made once per process and looking words up in an indexed
    in-memory copy of its lexicon.

    gruut's ``lexicon.db`` has no index on ``word``: every lookup scans 129k rows (~4 ms), up to four
    times for a word it does not know (as written, lower-cased, stripped, both), which made the front end
    ~60 % sqlite and ~10–40 ms a sentence, held under the GIL beside the decode thread. The copy with an
    index costs ~45 ms once and answers in microseconds; the rows, the query and gruut's own phonemizer are
    unchanged, so the phonemes are too. ``gruut.sentences`` would also build a processor per thread.
    """
    # gruut imports ``dateparser`` at module level (~0.3 s of timezone regexes) but calls it only for
    # a word that looks like a date, which our normalizer has already spelled out: gruut's import gets
    # a stand-in that imports the real module on first use, and only gruut holds it (anyone importing
    # dateparser later gets the real package). A broken dateparser then shows where gruut calls it,
    # which logs the error and reads the date as words.
    stand_in = _stand_in("dateparser")
    try:
        from gruut import TextProcessor
        from gruut.lang import DelayedSqlitePhonemizer, get_settings
        from gruut.phonemize import SqlitePhonemizer
    finally:
        if stand_in is not None and sys.modules.get("dateparser") is stand_in:
            del sys.modules["dateparser"]

    settings = get_settings(LANG)
    lookup = settings.lookup_phonemes
    if isinstance(lookup, DelayedSqlitePhonemizer):
        lookup.phonemizer = SqlitePhonemizer(db_conn=indexed_lexicon(lookup.db_path), **lookup.phonemizer_args)
    return TextProcessor(default_lang=LANG, settings={LANG: settings})


class _StandIn(types.ModuleType):
    """A module that answers every attribute it lacks from the real one, importing it then (the
    standard library's ``LazyLoader`` cannot stand in here: Python 3.11's import system reads
    ``__spec__`` of a module already in ``sys.modules`` and so loads it at once)."""

    def __getattr__(self, attr: str) -> Any:
        if sys.modules.get(self.__name__) is self:  # used while gruut still imports: make way for the real one
            sys.modules.pop(self.__name__, None)
        return getattr(importlib.import_module(self.__name__), attr)


def _stand_in(name: str) -> _StandIn | None:
    """Put a :class:`_StandIn` for ``name`` in ``sys.modules`` (unless ``name`` is imported already)."""
    spec = None if name in sys.modules else importlib.util.find_spec(name)
    if spec is None:
        return None  # loaded, or missing: gruut's own import will say so
    stand_in = _StandIn(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in
    return stand_in


def indexed_lexicon(path: Any) -> sqlite3.Connection:
    """A read-only lexicon database copied into memory, with the index its word lookups need."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        memory = sqlite3.connect(":memory:", check_same_thread=False)
        source.backup(memory)
    finally:
        source.close()
    memory.execute("CREATE INDEX IF NOT EXISTS word_phonemes_word ON word_phonemes (word, pron_order)")
    return memory


@dataclass(frozen=True)
class PhonemeTokenizer:
    """Normalized text to phoneme-unit ids ``1..len(units)`` (0 is padding)."""

    units: tuple[str, ...] = field(default_factory=default_units)
    kind: str = field(default="phonemes", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "units", tuple(self.units))
        if len(set(self.units)) != len(self.units) or WORD not in self.units:
            raise ValueError("phoneme units must be distinct and include the word boundary ' '")

    @property
    def vocab_size(self) -> int:
        return len(self.units) + 1

    @property
    def _index(self) -> dict[str, int]:
        return _index_of(self.units)

    def ids_of(self, units: Sequence[str]) -> list[int]:
        """Unit strings to ids; a symbol outside the inventory falls back to its plain form
        (stress and diacritics removed) and is dropped if even that is unknown."""
        return [i for i in map(self._id_of, units) if i is not None]

    def _id_of(self, unit: str) -> int | None:
        index = self._index
        return index.get(unit) or index.get(_plain(unit)) or index.get(_plain(unit)[:1])

    def encode(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> list[int]:
        return self.ids_of(_tagged(text, _key(lexicon))[0])

    def words(self, text: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> tuple[list[str], list[int]]:
        """The words of ``text`` as spoken, and for each id of :meth:`encode` the index of its word
        (-1 for a boundary or a break)."""
        units, owner, words = _tagged(text, _key(lexicon))
        return list(words), [w for u, w in zip(units, owner) if self._id_of(u) is not None]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.units[i - 1] for i in ids if 0 < i <= len(self.units))

    def is_speakable(self, ids: list[int]) -> bool:
        """Whether the ids hold at least one phoneme (not only breaks and boundaries)."""
        silent = {WORD, *BREAKS.values()}
        return any(0 < i <= len(self.units) and self.units[i - 1] not in silent for i in ids)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "units": list(self.units), "lang": LANG}


def _key(lexicon: Mapping[str, tuple[str, ...]] | None) -> tuple | None:
    """A lexicon as a cache key: only the words it holds matter."""
    return tuple(sorted(lexicon.items())) if lexicon else None


@lru_cache(maxsize=4096)
def _tagged(text: str, lexicon: tuple | None = None) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """:func:`tagged_units`, remembered: a server hears the same sentences again and again
    (greetings, prompts), and a hit costs nothing under the GIL the decode thread needs."""
    return tagged_units(text, dict(lexicon) if lexicon else None)


@lru_cache(maxsize=8)
def _index_of(units: tuple[str, ...]) -> dict[str, int]:
    return {u: i + 1 for i, u in enumerate(units)}
