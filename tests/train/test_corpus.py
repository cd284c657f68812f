"""The teacher corpus's sentences: a deterministic grammar with no duplicates, varied lengths and
kinds, a broad vocabulary, and held-out (unseen) words that never reach training."""

from __future__ import annotations

from collections import Counter

import pytest

from voicespec.frontend.text import DEFAULT_ALPHABET, normalize, sanitize
from voicespec.train.corpus import KINDS, MAX_CHARS, build_corpus, corpus_stats, iter_sentences


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(3000, seed=0)


@pytest.mark.slow
def test_corpus_is_deterministic(corpus):
    again = build_corpus(3000, seed=0)
    assert [(s.id, s.kind, s.raw, s.text) for s in again] == [(s.id, s.kind, s.raw, s.text) for s in corpus]
    other = build_corpus(200, seed=1)
    assert [s.raw for s in other] != [s.raw for s in corpus[:200]]
    # a prefix of a bigger corpus is the smaller corpus
    assert [s.raw for s in build_corpus(500, seed=0)] == [s.raw for s in corpus[:500]]


def test_corpus_has_no_duplicates_and_valid_text(corpus):
    assert len({s.id for s in corpus}) == len(corpus)
    assert len({s.text for s in corpus}) == len(corpus)
    words_only = [" ".join("".join(c if c.isalpha() or c in " '" else " " for c in s.text).split()) for s in corpus]
    assert len(set(words_only)) == len(corpus)
    for s in corpus:
        assert s.text == normalize(sanitize(s.raw))
        assert set(s.text) <= set(DEFAULT_ALPHABET), s.text
        assert not any(c.isdigit() for c in s.text)
        assert 0 < len(s.text) <= MAX_CHARS
        assert s.raw[0].isupper() or s.raw[0] == '"'
        assert s.raw.rstrip('"')[-1] in ".?!", s.raw


def test_corpus_lengths_and_variety(corpus):
    lengths = [s.words for s in corpus]
    assert min(lengths) == 1 and max(lengths) <= 25
    stats = corpus_stats(corpus)
    buckets = stats["word_buckets"]
    assert buckets["1-3"] > 0.02 * len(corpus)  # short replies exist
    assert buckets["13-18"] + buckets["19-25"] > 0.1 * len(corpus)  # and long sentences
    assert buckets["19-25"] > 0.02 * len(corpus)
    assert 7 <= stats["words"]["mean"] <= 13
    assert set(stats["by_kind"]) == set(KINDS)
    assert stats["share_question"] > 0.12
    assert stats["share_quoted"] > 0.1
    assert stats["share_digits"] > 0.12
    assert stats["share_exclamation"] > 0.06
    assert stats["share_named"] > 0.15
    numbers = [s.raw for s in corpus if s.kind == "numbers"]
    for feature in ("$", ":", "%", ",", "."):
        assert any(feature in r for r in numbers), feature
    assert any("a.m." in r or "p.m." in r for r in numbers)


def test_iter_sentences_stops_when_grammar_is_exhausted():
    # with a tiny length cap only short replies fit: the iterator ends instead of spinning
    few = list(iter_sentences(seed=0, max_words=1, max_tries=500))
    assert 10 < len(few) < 200
    assert all(s.words == 1 for s in few)


@pytest.mark.slow
def test_vocabulary_is_broad_and_unseen_words_never_reach_training(corpus):
    import re

    from voicespec.train.corpus import core_words
    from voicespec.train.vocab import dictionary_words, is_unseen, unseen_word_sentences

    core = core_words()
    words = Counter(w for s in corpus for w in re.findall(r"[a-z]+", s.text))
    assert not [w for w in words if is_unseen(w, core)]  # no training sentence holds a held-out word
    dictionary = set(dictionary_words())
    assert len(words) > 2000 and sum(w in dictionary for w in words) > 0.9 * len(words)
    assert {"people", "lexicon"} <= {s.kind for s in corpus}
    unseen = unseen_word_sentences(20, seed=0, core=core)
    assert unseen == unseen_word_sentences(20, seed=0, core=core)  # deterministic
    for sentence in unseen:
        ws = re.findall(r"[a-z]+", sentence.lower())
        assert 4 <= len(ws) <= 7 and all(is_unseen(w, core) and w not in words for w in ws)

