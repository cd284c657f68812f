"""Timestamps from durations: spans of units by owner, on frame boundaries, cut by a step cap."""

from __future__ import annotations

from voicespec.frontend.phonemes import PhonemeTokenizer
from voicespec.frontend.text import CharTokenizer
from voicespec.frontend.timestamps import Timestamp, sentence_timestamps, spans


def test_spans_group_units_by_owner_and_skip_boundaries():
    # units: h i _ y o u  (owner -1 is the boundary), 2 frames each, 0.02 s a frame, starting at frame 10
    out = spans(["hi", "you"], [0, 0, -1, 1, 1, 1], [2, 2, 3, 1, 1, 2], 0.02, offset_frames=10)
    assert out == (Timestamp("hi", 0.2, 0.28), Timestamp("you", 0.34, 0.42))


def test_a_step_cap_cuts_the_last_span_and_drops_later_ones():
    out = spans(["a", "b", "c"], [0, -1, 1, -1, 2], [3, 1, 4, 1, 2], 1.0, n_frames=6)
    assert out == (Timestamp("a", 0, 3), Timestamp("b", 4, 6))  # "b" cut at frame 6, "c" never spoken


def test_zero_length_units_stay_in_order():
    out = spans(["x", "y"], [0, 1], [0, 2], 1.0)
    assert out == (Timestamp("x", 0, 0), Timestamp("y", 0, 2))


def test_phonemes_are_each_unit_of_a_word():
    t = sentence_timestamps(3, ["ok"], [0, 0, -1], ["o", "k", "."], [1, 2, 5], 0.5, 0)
    assert t.sentence == 3 and t.words == (Timestamp("ok", 0, 1.5),)
    assert t.phonemes == (Timestamp("o", 0, 0.5), Timestamp("k", 0.5, 1.5))


def test_tokenizers_say_which_word_each_id_belongs_to():
    chars = CharTokenizer()
    text = "it's a dog, ok."
    words, owner = chars.words(text)
    assert words == ["it's", "a", "dog", "ok"] and len(owner) == len(chars.encode(text))
    phon = PhonemeTokenizer()
    text = "three dollars, said doctor okafor."
    words, owner = phon.words(text)
    ids = phon.encode(text)
    assert words == ["three", "dollars", "said", "doctor", "okafor"] and len(owner) == len(ids)
    assert sorted(set(owner) - {-1}) == list(range(5))
    firsts = [owner.index(w) for w in range(5)]
    assert firsts == sorted(firsts)  # words in order
    assert all(phon.decode([ids[j]]) in (" ", ",", ".") for j, w in enumerate(owner) if w < 0)  # boundaries, breaks
