"""Text front end: number words, normalization, sanitizing, sentence splitting, tokenizer, FrontEnd."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voicespec.frontend.text import (
    DEFAULT_ALPHABET,
    MAX_CHARS,
    CharTokenizer,
    FrontEnd,
    TextError,
    normalize,
    number_to_words,
    ordinal_words,
    sanitize,
    split_sentences,
    tokenizer_from_dict,
    year_words,
)


def norm(text: str) -> str:
    return normalize(sanitize(text))


def assert_clean(out: str) -> None:
    """Lower case, single-spaced, stripped, no space before punctuation."""
    assert out == out.lower(), out
    assert out == out.strip(), out
    assert "  " not in out, out
    assert not re.search(r"\s", out.replace(" ", "")), out
    assert not re.search(r" [,.!?;:]", out), out


# ---------------------------------------------------------------------------------------------
# number words

@pytest.mark.parametrize("n, words", [
    (0, "zero"),
    (7, "seven"),
    (13, "thirteen"),
    (21, "twenty-one"),
    (40, "forty"),
    (100, "one hundred"),
    (101, "one hundred one"),
    (110, "one hundred ten"),
    (999, "nine hundred ninety-nine"),
    (1000, "one thousand"),
    (1001, "one thousand one"),
    (12_345, "twelve thousand three hundred forty-five"),
    (1_000_000, "one million"),
    (2_000_000_017, "two billion seventeen"),
    (3_000_000_000_000, "three trillion"),
    (-1, "minus one"),
    (-12, "minus twelve"),
    (-1000, "minus one thousand"),
])
def test_number_to_words(n, words):
    assert number_to_words(n) == words


@pytest.mark.parametrize("n, words", [
    (1, "first"),
    (2, "second"),
    (3, "third"),
    (4, "fourth"),
    (5, "fifth"),
    (8, "eighth"),
    (9, "ninth"),
    (12, "twelfth"),
    (20, "twentieth"),
    (21, "twenty-first"),
    (42, "forty-second"),
    (100, "one hundredth"),
    (111, "one hundred eleventh"),
    (1000, "one thousandth"),
])
def test_ordinal_words(n, words):
    assert ordinal_words(n) == words


@pytest.mark.parametrize("n, words", [
    (1999, "nineteen ninety-nine"),
    (1905, "nineteen oh five"),
    (2000, "two thousand"),
    (2005, "two thousand five"),
    (2010, "twenty ten"),
    (1800, "eighteen hundred"),
    (1066, "ten sixty-six"),
])
def test_year_words(n, words):
    assert year_words(n) == words


# ---------------------------------------------------------------------------------------------
# normalize(sanitize(...)) on realistic sentences

NORMALIZE_CASES = [
    # money
    ("Dr. Smith paid $3.50 on May 5th.", "doctor smith paid three dollars and fifty cents on may fifth."),
    ("The ticket costs $1.", "the ticket costs one dollar."),
    ("It was £20 in London.", "it was twenty pounds in london."),
    ("Only €0.99!", "only ninety-nine cents!"),
    ("We raised $1,234 today.", "we raised one thousand two hundred thirty-four dollars today."),
    ("That is $2.01, please.", "that is two dollars and one cent, please."),
    ("A stamp is £1.01.", "a stamp is one pound and one penny."),
    ("Lunch was $5.00.", "lunch was five dollars."),
    # decimals and percentages
    ("Pi is about 3.14.", "pi is about three point one four."),
    ("Sales rose 45% this year.", "sales rose forty-five percent this year."),
    ("It grew 12.5% overall.", "it grew twelve point five percent overall."),
    ("We had 1,000,000 visitors.", "we had one million visitors."),
    # ordinals
    ("See you on May 5th.", "see you on may fifth."),
    ("The 1st, 2nd, 3rd and 4th.", "the first, second, third and fourth."),
    ("Her 21st birthday.", "her twenty-first birthday."),
    # years vs plain numbers: any comma-less 4-digit number in 1100..2099 is read as a year,
    # so "1999 apples" is "nineteen ninety-nine apples"; write "1,999" to get the cardinal.
    ("She was born in 1999.", "she was born in nineteen ninety-nine."),
    ("I bought 1999 apples.", "i bought nineteen ninety-nine apples."),
    ("I bought 1,999 apples.", "i bought one thousand nine hundred ninety-nine apples."),
    ("I bought 999 apples.", "i bought nine hundred ninety-nine apples."),
    ("It happened in 2005.", "it happened in two thousand five."),
    ("We counted 5000 birds.", "we counted five thousand birds."),
    # clock times
    ("Call me at 3:45 pm.", "call me at three forty-five p m."),
    ("The meeting is at 10:00 a.m.", "the meeting is at ten o'clock a m."),
    ("Be there by 4:05PM.", "be there by four oh five p m."),
    ("It ends at 12:07 am", "it ends at twelve oh seven a m"),
    # abbreviations
    ("Mr. and Mrs. Jones met Dr. Brown.", "mister and missus jones met doctor brown."),
    ("St. Patrick's Day is fun.", "saint patrick's day is fun."),
    ("Turn onto 42nd St. and stop.", "turn onto forty-second street and stop."),
    ("No. 5 is mine.", "number five is mine."),
    ("Apples, pears, etc. are fruit.", "apples, pears, et cetera are fruit."),
    # symbols
    ("Tom & Jerry", "tom and jerry"),
    ("Email me @ home.", "email me at home."),
    ("2 + 2 = 4", "two plus two equals four"),
    ("Room #7", "room number seven"),
    # unicode quotes, dashes, ellipsis, NBSP, NFKC
    ("“Hello,” she said — ‘quietly’…", "\"hello,\" she said, 'quietly'..."),
    ("Pages 10–20.", "pages ten-twenty."),
    ("It is 100\u00a0km away.", "it is one hundred km away."),
    ("A \ufb01ne day.", "a fine day."),  # "ﬁ" ligature
    ("Buy \uff11\uff12\uff13 now.", "buy one hundred twenty-three now."),  # full-width digits
]


@pytest.mark.parametrize("text, expected", NORMALIZE_CASES, ids=[c[0] for c in NORMALIZE_CASES])
def test_normalize_sentences(text, expected):
    out = norm(text)
    assert out == expected
    assert_clean(out)
    assert set(out) <= set(DEFAULT_ALPHABET), set(out) - set(DEFAULT_ALPHABET)


def test_normalize_combining_characters_are_composed():
    # Composed or combining, accents are taken off: the model's alphabet is plain letters.
    assert norm("Cafe\u0301") == norm("Caf\u00e9") == "cafe"


def test_normalize_keeps_emoji_for_the_tokenizer_to_drop():
    out = norm("Great job 👍 team!")
    assert out == "great job 👍 team!"
    assert CharTokenizer().decode(CharTokenizer().encode(out)) == "great job  team!"


def test_normalize_output_is_clean_on_messy_input():
    out = norm("  HELLO ,  World !!\tHow   are\nyou ?  ")
    assert out == "hello, world!! how are you?"
    assert_clean(out)


# Regression tests for bugs found and fixed.

@pytest.mark.parametrize("text, expected", [
    ("He said no.", "he said no."),
    ("Say no. Then go.", "say no. then go."),
])
def test_sentence_final_no_is_not_number(text, expected):
    assert norm(text) == expected


def test_mid_sentence_am_does_not_end_the_sentence():
    out = norm("We met at 10 a.m. and left.")
    assert split_sentences(out) == [out]


@pytest.mark.parametrize("text, expected", [
    ("An MP3 player.", "an mp three player."),
    ("line1", "line one"),
])
def test_digits_next_to_letters_get_a_space(text, expected):
    assert norm(text) == expected


def test_accented_letters_are_reduced_to_the_alphabet():
    out = norm("A café in Zürich, naïve.")
    assert set(out) <= set(DEFAULT_ALPHABET)
    assert "cafe" in out and "zurich" in out and "naive" in out


# ---------------------------------------------------------------------------------------------
# sanitize

def test_sanitize_removes_control_characters_and_collapses_whitespace():
    out = sanitize("  Hello,\x00world\x07!\r\n\tNew\u2028line\u2029here\x0b  ")
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in out)
    assert out == "Hello, world ! New line here"  # control characters become (collapsed) spaces


def test_sanitize_keeps_plain_text():
    assert sanitize("Hello, world!") == "Hello, world!"


@pytest.mark.parametrize("text", ["", " ", "   \t\n  ", "\x00\x01\x02", "\u200b\ufeff", "\u00a0\u2028"])
def test_sanitize_rejects_empty(text):
    with pytest.raises(TextError, match="empty"):
        sanitize(text)


def test_sanitize_max_chars():
    assert sanitize("x" * 10, max_chars=10) == "x" * 10
    with pytest.raises(TextError, match=r"\b10\b"):
        sanitize("x" * 11, max_chars=10)
    assert sanitize("x" * MAX_CHARS) == "x" * MAX_CHARS
    with pytest.raises(TextError, match=str(MAX_CHARS)):
        sanitize("x" * (MAX_CHARS + 1))


@pytest.mark.parametrize("value", [None, b"hello", 42, ["hello"]])
def test_sanitize_rejects_non_strings(value):
    with pytest.raises(TextError, match="string"):
        sanitize(value)


@pytest.mark.parametrize("text", ["co\u00adoperate", "co\u200boperate", "co\u2060operate"])
def test_sanitize_drops_format_characters_inside_words(text):
    assert sanitize(text) == "cooperate"


def test_sanitize_limit_holds_after_nfkc_expansion():
    try:
        out = sanitize("\ufdfa" * 10, max_chars=10)  # each expands to 18 characters
    except TextError:
        return
    assert len(out) <= 10


# ---------------------------------------------------------------------------------------------
# split_sentences

def _squash(s: str) -> str:
    return "".join(s.split())


def test_split_after_sentence_punctuation():
    text = "Hello there. How are you? Fine! One; two: three"
    assert split_sentences(text) == ["Hello there.", "How are you?", "Fine!", "One;", "two:", "three"]


def test_split_needs_whitespace_after_punctuation():
    assert split_sentences("three point one.four and 3.14 ok") == ["three point one.four and 3.14 ok"]


def test_split_prefers_commas_then_spaces():
    assert split_sentences("aaa bbb, ccc ddd eee", max_chars=12) == ["aaa bbb,", "ccc ddd eee"]
    assert split_sentences("aaa bbb ccc ddd", max_chars=12) == ["aaa bbb ccc", "ddd"]
    assert split_sentences("a" * 25, max_chars=10) == ["a" * 10, "a" * 10, "a" * 5]
    pieces = split_sentences(", ".join(["word"] * 40), max_chars=50)
    assert all(p.endswith(",") for p in pieces[:-1])
    assert all(len(p) <= 50 for p in pieces)


def test_split_single_short_sentence():
    assert split_sentences("hello") == ["hello"]
    assert split_sentences("") == []


_segment = st.one_of(
    st.text(alphabet="abc", min_size=1, max_size=120),  # long runs, no spaces or punctuation
    st.text(alphabet="ab ,.!?;:", max_size=40),
    st.sampled_from([" ", ", ", ". ", "! ", "; ", "  ", ",", "."]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments=st.lists(_segment, max_size=12), max_chars=st.integers(1, 60))
def test_split_property(segments, max_chars):
    text = "".join(segments)
    pieces = split_sentences(text, max_chars=max_chars)
    assert all(0 < len(p) <= max_chars for p in pieces)
    assert all(p == p.strip() for p in pieces)
    assert _squash(" ".join(pieces)) == _squash(text)  # no character lost, duplicated or reordered


def test_split_realistic_long_text_round_trip():
    text = norm("The quick brown fox, which was very quick, jumped over the lazy dog. " * 30
                + "Then it ran " + "far " * 100 + "away!")
    pieces = split_sentences(text, max_chars=80)
    assert all(len(p) <= 80 for p in pieces)
    assert " ".join(pieces) == text


# ---------------------------------------------------------------------------------------------
# CharTokenizer

def test_tokenizer_round_trip_on_normalized_text():
    tok = CharTokenizer()
    for text, _ in NORMALIZE_CASES:
        s = norm(text)
        ids = tok.encode(s)
        assert all(1 <= i <= len(tok.alphabet) for i in ids)
        assert tok.decode(ids) == s
    assert tok.vocab_size == len(DEFAULT_ALPHABET) + 1


def test_tokenizer_ids_cover_alphabet_uniquely():
    tok = CharTokenizer()
    assert tok.encode(DEFAULT_ALPHABET) == list(range(1, len(DEFAULT_ALPHABET) + 1))
    assert len(set(DEFAULT_ALPHABET)) == len(DEFAULT_ALPHABET)


def test_tokenizer_drops_unknown_characters():
    tok = CharTokenizer()
    assert tok.encode("a😀B\u00e9b#") == tok.encode("ab")
    assert tok.encode("") == []
    assert tok.decode([0, 1, len(DEFAULT_ALPHABET) + 1, -3]) == " "  # padding and out-of-range ignored


def test_tokenizer_dict_round_trip():
    for tok in (CharTokenizer(), CharTokenizer("abc ")):
        d = tok.to_dict()
        assert d == {"kind": "chars", "alphabet": tok.alphabet}
        again = tokenizer_from_dict(d)
        assert again == tok
        assert again.encode("a cab") == tok.encode("a cab")
    assert tokenizer_from_dict({"kind": "chars"}) == CharTokenizer()


@pytest.mark.parametrize("d", [{"kind": "bpe"}, {}, {"kind": None, "alphabet": "abc"}])
def test_tokenizer_unknown_kind(d):
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        tokenizer_from_dict(d)


# ---------------------------------------------------------------------------------------------
# FrontEnd

def test_frontend_sentences_pairs():
    fe = FrontEnd()
    out = fe.sentences("Dr. Smith paid $3.50. He left at 4:05PM!")
    assert [s for s, _ in out] == ["doctor smith paid three dollars and fifty cents.", "he left at four oh five p m!"]
    for sentence, ids in out:
        assert ids == fe.tokenizer.encode(sentence)
        assert fe.tokenizer.decode(ids) == sentence


def test_frontend_skips_unspeakable_sentences():
    out = FrontEnd().sentences("Hello. --; World.")
    assert [s for s, _ in out] == ["hello.", "world."]


def test_frontend_respects_sentence_limit():
    fe = FrontEnd(max_sentence_chars=30)
    out = fe.sentences("word " * 60)
    assert len(out) > 1
    assert all(len(s) <= 30 for s, _ in out)


@pytest.mark.parametrize("text", ["!!! ...", "😀😀 🎉", "... ?! ;", "\u2014 \u2026"])
def test_frontend_nothing_speakable(text):
    from voicespec.frontend.phonemes import PhonemeTokenizer

    for tokenizer in (CharTokenizer(), PhonemeTokenizer()):
        with pytest.raises(TextError, match="nothing this voice can speak"):
            FrontEnd(tokenizer).sentences(text)


def test_frontend_emoji_among_words_is_fine():
    ((sentence, ids),) = FrontEnd().sentences("Nice 😀")
    assert CharTokenizer().decode(ids).strip() == "nice"


def test_frontend_length_limit():
    assert FrontEnd().sentences("a " * 2500)  # exactly 5000 characters
    with pytest.raises(TextError, match="5000"):
        FrontEnd().sentences("a" * 5001)
    with pytest.raises(TextError, match=r"\b20\b"):
        FrontEnd(max_chars=20).sentences("x" * 21)


def test_frontend_empty():
    with pytest.raises(TextError, match="empty"):
        FrontEnd().sentences("   ")


@pytest.mark.parametrize("text", ["1" * 4301, "$" + "9" * 4350, "It is " + "7" * 5000 + "th.", "0." + "5" * 4400])
def test_digit_runs_of_any_length_are_read(text):
    """Issue 17, defect 4: Python refuses int() of more than 4,300 digits; such runs are read
    digit by digit (as any run over 15 digits is), never raised as a ValueError."""
    out = normalize(sanitize(text, max_chars=10_000))
    assert "nine nine nine" in out or "one one one" in out or "seven seven" in out or "five five" in out
    assert not any(c.isdigit() for c in out)
