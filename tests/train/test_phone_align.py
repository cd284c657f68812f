"""Teacher (Piper) durations transferred onto gruut phonemes."""

from __future__ import annotations

from voicespec.train.phone_align import align, teacher_chars, to_frames, transfer


def test_identical_strings_transfer_every_sample_to_its_unit():
    units = ["h", "ˈɛ", "l", "oʊ", ","]
    phonemes = ["^", "h", "ˈ", "ɛ", "l", "o", "ʊ", ",", "$"]
    samples = [10, 100, 5, 200, 300, 400, 50, 600, 7]
    tr = transfer(units, phonemes, samples)
    assert tr.agreement == 1.0
    assert tr.samples == [10 + 100, 5 + 200, 300, 400 + 50, 600 + 7]  # edges join the first/last unit


def test_marks_merge_and_variants_align():
    chars, counts, lead, tail = teacher_chars(["^", "ˈ", "ɑ", "ː", "ɾ", "ɚ", "$"], [1, 2, 3, 4, 5, 6, 7])
    assert chars == ["ɑ", "ɾ", "ɚ"] and counts == [2 + 3 + 4, 5, 6 + 7] and (lead, tail) == (1, 0)
    # two sentences: the pause at the first one's end stays with its last symbol, not the text's
    chars, counts, _, _ = teacher_chars(["^", "a", ".", "$", "^", "b", "$"], [1, 2, 3, 40, 50, 6, 7])
    assert chars == ["a", ".", "b"] and counts == [2, 3 + 40 + 50, 6 + 7]
    tr = transfer(["ˈɑ", "t", "ɚ"], ["ˈ", "ɑ", "ː", "ɾ", "ɚ"], [2, 3, 4, 5, 6])  # espeak flap vs gruut t
    assert tr.samples == [9, 5, 6] and tr.agreement == 2 / 3


def test_extra_teacher_symbols_join_the_unit_before_and_totals_are_kept():
    tr = transfer(["k", "ˈæ", "t"], list("kæət"), [1, 2, 3, 4])
    assert tr.samples == [1, 2 + 3, 4] and sum(tr.samples) == 10
    assert align(list("abc"), list("ac")) == [0, -1, 1]


def test_frames_sum_exactly_and_round_at_cumulative_boundaries():
    frames = to_frames([441, 441, 441, 882], 22050, 50.0, 6)
    assert frames == [1, 1, 1, 3] and sum(frames) == 6  # the last unit absorbs the codec's padding
    assert sum(to_frames([300] * 7, 22050, 50.0, 5)) == 5
