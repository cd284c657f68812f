"""The independent judge: error rates, scoring conventions, and PocketSphinx on real teacher audio."""

from __future__ import annotations

import pytest
import torch

from voicespec.eval.judge import (
    PocketSphinxJudge, canonical_words, cer, corpus_error_rates, edit_distance, score, wer,
)


def test_cer_hand_cases():
    assert cer("hello world", "hello world") == 0.0
    assert cer("abcd", "abxd") == 0.25  # substitution
    assert cer("abcd", "abxcd") == 0.25  # insertion
    assert cer("abcd", "acd") == 0.25  # deletion
    assert cer("abcd", "") == 1.0  # empty hypothesis: every character deleted
    assert cer("kitten", "sitting") == pytest.approx(3 / 6)
    assert cer("", "") == 0.0 and cer("", "ab") == 2.0  # empty reference: no division by zero
    assert wer("the cat sat", "the bat sat") == pytest.approx(1 / 3)
    pooled = corpus_error_rates([("ab", "ab"), ("abcd", "")])
    assert pooled["cer"] == pytest.approx(4 / 6) and pooled["utterances"] == 2


def test_scoring_conventions():
    assert canonical_words("Mr. O'Brien said: OK, o five-thirty!") == ["mister", "o'brien", "said", "okay", "oh",
                                                                      "five", "thirty"]
    assert edit_distance("kitten", "sitting") == 3 and edit_distance([], ["a"]) == 1
    s = score([("the cat sat", "the cat sat"), ("a dog", "a frog ran")])
    assert s.words == 5 and abs(s.wer - 2 / 5) < 1e-9 and s.items[1]["word_errors"] == 2
    assert score([("", "")]).wer == 0.0


@pytest.mark.slow
def test_pronunciations_for_words_the_judge_lacks_come_from_cmudict():
    from voicespec.eval.judge import _cmudict_phones

    assert _cmudict_phones("hello") in ("HH AH L OW", "HH EH L OW") and _cmudict_phones("qzxv") is None


@pytest.mark.slow
def test_pocketsphinx_understands_the_teacher_and_not_noise():
    pytest.importorskip("piper")
    from voicespec.train.data import PiperTeacher

    judge = PocketSphinxJudge()
    text = "please call the doctor before noon."
    spoken = PiperTeacher(seed=0).synthesize(text, key="judge")
    sr = spoken.sample_rate
    heard = judge.judge([(text, torch.from_numpy(spoken.audio), sr)])
    assert heard.wer <= 0.4, heard.items
    noise = 0.1 * torch.randn(sr * 2, generator=torch.Generator().manual_seed(0))
    assert judge.judge([(text, noise, sr)]).wer >= 0.8


@pytest.mark.slow
def test_a_closed_set_judge_hears_rare_words_the_open_one_cannot():
    pytest.importorskip("piper")
    from voicespec.train.data import PiperTeacher

    text = "biosphere rekindle sahagian rozman thing."  # held-out words of the unseen-word set
    spoken = PiperTeacher(seed=0).synthesize(text, key="closed")
    item = [(text, torch.from_numpy(spoken.audio), spoken.sample_rate)]
    closed = PocketSphinxJudge(vocabulary=[text, "federal summer organization"])
    assert closed.skipped == []  # every word has a pronunciation (its own dictionary, else CMUdict)
    assert closed.judge(item).wer < PocketSphinxJudge().judge(item).wer
    assert closed.judge(item).wer <= 0.4


def test_each_judge_scores_with_its_own_normalizer():
    pytest.importorskip("whisper_normalizer")
    from voicespec.eval.whisper import whisper_normalize

    # Whisper's normalizer spells numbers and symbols its way on both sides: "Mr." and "mister" agree
    assert whisper_normalize("Mr. Smith paid ten dollars.") == whisper_normalize("mister smith paid $10")
    assert score([("Mr. Smith paid ten dollars.", "mister smith paid $10")], whisper_normalize).wer == 0.0
    assert score([("Mr. Smith paid ten dollars.", "mister smith paid $10")]).wer > 0  # ours does not map $10


@pytest.mark.slow
def test_whisper_and_dnsmos_hear_the_teacher_and_not_noise():
    pytest.importorskip("piper")
    pytest.importorskip("faster_whisper")
    pytest.importorskip("speechmos")
    from voicespec.eval.dnsmos import dnsmos
    from voicespec.eval.whisper import WhisperJudge
    from voicespec.train.data import PiperTeacher

    text = "please call the doctor before noon."
    spoken = PiperTeacher(seed=0).synthesize(text, key="judge")
    speech, sr = torch.from_numpy(spoken.audio), spoken.sample_rate
    noise = 0.1 * torch.randn(sr * 5, generator=torch.Generator().manual_seed(0))  # 5 s: one DNSMOS window once tiled
    judge = WhisperJudge()
    assert judge.judge([(text, speech, sr)]).wer <= 0.2
    assert judge.judge([(text, noise, sr)]).wer >= 0.8
    clean, noisy = dnsmos(speech, sr), dnsmos(noise, sr)
    assert set(clean) == {"ovrl", "sig", "bak", "p808"}
    assert clean["ovrl"] > 2.8 and clean["ovrl"] > noisy["ovrl"] + 1.0 and clean["bak"] > noisy["bak"] + 1.0
    with pytest.raises(ValueError, match="non-silent"):
        dnsmos(torch.zeros(sr), sr)
