"""The phoneme front end (gruut, offline): unknown words, numbers, punctuation, the tokenizer."""

from __future__ import annotations

import pytest

from voicespec.frontend.phonemes import WORD, PhonemeTokenizer, default_units, phonemize
from voicespec.frontend.text import FrontEnd, TextError, tokenizer_from_dict


def test_known_and_unknown_words_get_phonemes_with_stress():
    assert phonemize("the cat") == ["ð", "ə", WORD, "k", "ˈæ", "t"]
    okafor = phonemize("okafor")  # not in the lexicon: gruut's G2P spells it out
    assert okafor and all(u in default_units() for u in okafor) and any(u.startswith("ˈ") for u in okafor)
    assert phonemize("lighthouse") == ["l", "ˈaɪ", "t", "h", "ˌaʊ", "s"]


def test_punctuation_becomes_breaks_and_hyphens_join_words():
    units = phonemize('"okay," he said; fine - really? yes!')
    assert units.count(",") == 3 and units[-1] == "!" and "?" in units and '"' not in units
    assert WORD not in (units[0], units[-1]) and f"{WORD}{WORD}" not in "".join(units)
    assert phonemize("twenty-one") == phonemize("twenty one")


def test_front_end_normalizes_numbers_before_phonemizing():
    fe = FrontEnd(PhonemeTokenizer())
    (text, ids), = fe.sentences("Dr. Okafor paid $3.50.")
    assert text == "doctor okafor paid three dollars and fifty cents."
    assert fe.tokenizer.decode(ids).startswith("dˈɑktɚ") and ids[-1] == fe.tokenizer.units.index(".") + 1
    with pytest.raises(TextError, match="nothing this voice can speak"):
        fe.sentences("日本語のテキスト")


def test_tokenizer_round_trips_its_config_and_falls_back_on_rare_symbols():
    tok = PhonemeTokenizer()
    back = tokenizer_from_dict(tok.to_dict())
    assert back == tok and back.vocab_size == len(default_units()) + 1
    assert tok.ids_of(["ɝ", "ᵻ", "ˈɝ", "ʘ"]) == tok.ids_of(["ɚ", "ɪ", "ɚ"])  # unknown click dropped
    assert tok.is_speakable(tok.encode("hi")) and not tok.is_speakable(tok.ids_of([",", WORD]))
    with pytest.raises(ValueError, match="not supported"):
        tokenizer_from_dict({"kind": "phonemes", "lang": "de"})
    with pytest.raises(ValueError, match="distinct"):
        PhonemeTokenizer(("a", "a", WORD))


SENTENCES = ["Okafor and Nguyen read the record; they record it!", "Is it twenty second, or not?",
             "doctor smith lives on saint james street.", "XYZZY plugh Zyzzyva Hello.",
             "The tired driver borrowed a warm blanket beside the lake.", "I'll excuse the excuse."]


def _words(sentences) -> list[list[tuple[str, tuple[str, ...] | None]]]:
    return [[(w.text, tuple(w.phonemes) if w.phonemes else None) for w in s] for s in sentences]


def test_the_shared_indexed_processor_reads_as_gruut_does_from_any_thread():
    """Our one processor (indexed in-memory lexicon) gives gruut's own words and phonemes, also when
    threads call it at once; and the lookup really uses the index (gruut's file has none)."""
    import threading

    from gruut import sentences

    from voicespec.frontend.phonemes import LANG, _PROCESSOR_LOCK, _processor

    def ours(text):
        with _PROCESSOR_LOCK:
            return _words(_processor().sentences(*_processor()(text, lang=LANG)))

    expected = {t: _words(sentences(t, lang=LANG)) for t in SENTENCES}
    got: dict[str, list] = {}
    threads = [threading.Thread(target=lambda t=t: got.__setitem__(t, ours(t))) for t in SENTENCES]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == expected and all(expected.values())
    db = _processor().get_settings(LANG).lookup_phonemes.phonemizer.db_conn
    plan = db.execute("EXPLAIN QUERY PLAN SELECT role, phonemes FROM word_phonemes WHERE word = ? "
                      "ORDER BY pron_order", ("hello",)).fetchall()
    assert "USING INDEX" in " ".join(str(row) for row in plan), plan


@pytest.mark.slow
def test_gruuts_date_parser_loads_only_for_a_date_and_reads_as_if_imported():
    """``dateparser`` is a stand-in until gruut parses a date (~0.3 s of a cold start); a date then reads
    exactly as with the real module imported up front, and plain words never load it."""
    import json
    import subprocess
    import sys

    probe = """
import json, sys
{first}
from voicespec.frontend.phonemes import tagged_units
plain = tagged_units("hello there, friend")
loaded_for_plain = "dateparser.date" in sys.modules
print(json.dumps([plain, loaded_for_plain, tagged_units("on 12/03/2024 we met"), "dateparser.date" in sys.modules]))
"""
    def run(first: str) -> list:
        out = subprocess.run([sys.executable, "-c", probe.format(first=first)], capture_output=True, text=True,
                             timeout=120, check=True)
        return json.loads(out.stdout)

    deferred, eager = run(""), run("import dateparser")
    assert deferred[1] is False and deferred[3] is True and eager[1] is True
    assert deferred[0] == eager[0] and deferred[2] == eager[2]
    assert "December" in deferred[2][2]


def test_dateparser_imported_after_the_processor_is_one_package():
    """Only gruut's import sees the stand-in: a later ``import dateparser.date`` (or unpickling one of its
    objects) gets the real package once, the same classes gruut then calls."""
    import subprocess
    import sys

    probe = """
import sys
from voicespec.frontend.phonemes import tagged_units
tagged_units("hello there")
import dateparser.date
import gruut.text_processor as tp
assert type(sys.modules["dateparser"]).__name__ == "module"
assert tp.dateparser.DateDataParser is sys.modules["dateparser.date"].DateDataParser
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_stand_in_used_while_still_in_sys_modules_loads_the_real_module():
    """Were gruut to touch dateparser while it imports (the stand-in still in ``sys.modules``), the
    stand-in must load the real module, not find itself and recurse."""
    import subprocess
    import sys

    probe = """
import sys
from voicespec.frontend.phonemes import _stand_in
stand_in = _stand_in("colorsys")
assert sys.modules["colorsys"] is stand_in
assert stand_in.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
assert type(sys.modules["colorsys"]).__name__ == "module"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
