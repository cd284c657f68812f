"""SSML and lexicons: what the markup asks for (pure parsing), the units the model then reads
(on the shipped phoneme voice), and exact silences that move the words after them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voicespec.engine.config import DecodeConfig
from voicespec.frontend.lexicon import LexiconError, parse_pls, read_lexicon, units_of_ipa
from voicespec.frontend.phonemes import PhonemeTokenizer
from voicespec.frontend.ssml import Break, SSMLError, is_ssml, parse, say_as, script
from voicespec.frontend.text import FrontEnd, TextError
from voicespec.pipeline.synthesis import SynthesisOptions, SynthesisStream, collect
from voicespec.pipeline.voice import load_voice

UNITS = PhonemeTokenizer().units


def texts(markup: str) -> list:
    pieces, _ = parse(markup)
    return [p.seconds if isinstance(p, Break) else " ".join(p.text.split()) for p in pieces]


def test_breaks_say_as_sub_and_boundaries():
    assert texts('<speak>One <break time="700ms"/>two<break strength="strong"/> three</speak>') == \
        ["One", 0.7, "two", 0.7, "three"]
    assert texts('<speak><p>First.</p><s>Second</s>third</speak>') == ["First.", "Second", "third"]
    assert texts('<speak>Call <say-as interpret-as="telephone">555-1234</say-as></speak>') == \
        ["Call five five five, one two three four"]
    assert say_as("SQL", "characters", None) == "ess cue el"
    assert say_as("1,234", "cardinal", None) == "one thousand two hundred thirty-four"
    assert say_as("21st", "ordinal", None) == "twenty-first"
    assert say_as("2024", "digits", None) == "two zero two four"
    assert say_as("5/1/2024", "date", "dmy") == "january fifth, twenty twenty-four"
    assert texts('<speak><sub alias="World Wide Web">WWW</sub> site</speak>') == ["World Wide Web site"]
    pieces, ignored = parse('<speak><emphasis>Big</emphasis> <prosody rate="slow" pitch="high">slow</prosody></speak>')
    assert [p.rate for p in pieces] == [1.0, 0.75] and ignored == ("emphasis", "prosody pitch")
    assert is_ssml('  <?xml version="1.0"?><speak>x</speak>') and not is_ssml("speak <speak>")


@pytest.mark.parametrize("markup, error", [
    ("<speak>Hello <b>there</speak>", "line 1, column 24"),
    ("<speak>a\n<break time='9'/></speak>", "a time such as 500ms"),
    ("<speak><break time='11s'/></speak>", "at most 10 s"),
    ("<voice>Hello</voice>", "root element of SSML must be <speak>"),
    ('<!DOCTYPE speak [<!ENTITY a "aaaa">]><speak>&a;</speak>', "DOCTYPE"),
    ("<speak><say-as>5</say-as></speak>", "needs interpret-as"),
    ("<speak><say-as interpret-as='date' format='mdy'>13/40/2020</say-as></speak>", "no month 13"),
    ("<speak><prosody rate='-5%'>x</prosody></speak>", "prosody rate"),
    ("<speak><phoneme alphabet='x-sampa' ph='a'>x</phoneme></speak>", "ipa alphabet"),
])
def test_malformed_markup_is_one_clear_error(markup, error):
    with pytest.raises(SSMLError, match=error):
        parse(markup)


def test_ipa_maps_onto_the_voices_units_and_an_unknown_symbol_names_its_place():
    assert units_of_ipa("təˈmɑːtoʊ", UNITS) == ("t", "ə", "m", "ˈɑ", "t", "oʊ")  # stress moves to the vowel
    assert units_of_ipa("tʃ", UNITS) == units_of_ipa("t͡ʃ", UNITS)  # the tie bar is optional
    with pytest.raises(LexiconError, match="'#' at position 3"):
        units_of_ipa("tə#ma", UNITS)
    pls = ('<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa">'
           '<lexeme><grapheme>tomato</grapheme><phoneme>təˈmɑːtoʊ</phoneme></lexeme></lexicon>')
    assert parse_pls(pls) == {"tomato": "təˈmɑːtoʊ"}


def test_phoneme_and_lexicon_change_the_units_the_model_reads(tmp_path):
    voice = load_voice(None)
    decode = voice.tokenizer.decode

    def units(text, **kw):
        return [decode(ids) for _, ids in voice.script(text, **kw).sentences]

    plain = units("I like tomato.")
    assert "təmˈeɪtoʊ" in plain[0]
    marked = units('<speak>I like <phoneme alphabet="ipa" ph="təˈmɑːtoʊ">tomato</phoneme>.</speak>')
    assert "təmˈɑtoʊ" in marked[0] and marked[0].replace("təmˈɑtoʊ", "təmˈeɪtoʊ") == plain[0]
    assert units("I like tomato.", lexicon={"Tomato": "təˈmɑːtoʊ"}) == marked  # a lexicon: every occurrence
    path = tmp_path / "lexicon.json"
    path.write_text(json.dumps({"tomato": "təˈmɑːtoʊ"}))
    assert units("I like tomato.", lexicon=read_lexicon(path)) == marked
    with pytest.raises(LexiconError, match="position"):
        voice.script("I like tomato.", lexicon={"tomato": "tə§"})
    spelled = units('<speak><say-as interpret-as="characters">abc</say-as>.</speak>')
    assert spelled == units("ay bee see.")


@pytest.mark.slow
def test_a_break_is_exact_silence_and_moves_the_next_words_timestamps():
    voice = load_voice(None)
    options = SynthesisOptions(DecodeConfig(voice.sampling, seed=1), timestamps=True)

    def run(markup):
        stream = SynthesisStream(voice, markup, options, voice.script(markup))
        audio = collect(stream)
        return audio, {w.text: w.start_s for t in audio.timestamps for w in t.words}

    with_break, starts = run('<speak>Hello there. <break time="700ms"/> How are you?</speak>')
    without, plain = run("<speak>Hello there. How are you?</speak>")
    frame = voice.codec.hop_length / voice.codec.sample_rate
    assert abs(starts["how"] - plain["how"] - 0.7) <= frame and starts["there"] == plain["there"]
    silent = np.abs(with_break.pcm) == 0
    run_length = max(len(r) for r in "".join("1" if z else "0" for z in silent).split("0"))
    assert abs(run_length / with_break.sample_rate - 0.7) <= frame  # 700 ms of exact zeros
    assert abs(len(with_break.pcm) - len(without.pcm) - 0.7 * without.sample_rate) <= frame * without.sample_rate


def test_nothing_speakable_is_an_error():
    with pytest.raises(TextError, match="nothing this voice can speak"):
        script(FrontEnd(PhonemeTokenizer()), '<speak><break time="1s"/>...</speak>')
