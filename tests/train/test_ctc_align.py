"""Forced alignment of CTC outputs: durations per character on constructed matrices, the Viterbi
aligner against torchaudio's, and alignment with a (random) recognizer."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from voicespec.eval.recognizer import CtcAsr, transcribe
from voicespec.frontend.text import DEFAULT_ALPHABET, CharTokenizer
from voicespec.train.ctc_align import (
    _torchaudio_align, align, char_spans, ctc_durations, durations_from_spans, viterbi_align,
)

TOK = CharTokenizer()


def _backends():
    yield "viterbi"
    if _torchaudio_align(torch.zeros(2, 3).log_softmax(-1), [1], 0) is not None:
        yield "torchaudio"


@pytest.mark.parametrize("backend", list(_backends()))
def test_alignment_on_a_constructed_matrix(backend, one_hot_log_probs):
    # "abb" over 10 frames: blank blank a a blank b b blank b blank. The repeated "b" needs the blank
    # between its two spans; leading blanks go to the first character, the others to the one before.
    a, b = TOK.encode("ab")
    frames = [0, 0, a, a, 0, b, b, 0, b, 0]
    lp = one_hot_log_probs(frames)
    assert char_spans(lp, [a, b, b], backend=backend) == [(2, 4), (5, 7), (8, 9)]
    assert ctc_durations(lp, [a, b, b], backend=backend) == [5, 3, 2]
    # The best path must respect the targets even against the frame-wise argmax: with "ab" only,
    # the frames that favour a second "b" are absorbed, and durations still cover every frame.
    durations = ctc_durations(lp, [a, b], backend=backend)
    assert durations[0] == 5 and sum(durations) == 10


def test_viterbi_matches_torchaudio_on_random_scores():
    g = torch.Generator().manual_seed(0)
    targets = [3, 4, 4, 5, 3, 7, 7, 7]
    for _ in range(5):
        lp = torch.randn(30, 9, generator=g).log_softmax(-1)
        ours = viterbi_align(lp, targets)
        theirs = _torchaudio_align(lp, targets, 0)
        if theirs is None:
            pytest.skip("torchaudio.functional.forced_align is not available")
        assert ours == theirs


def test_durations_cover_every_frame_and_every_character_gets_one():
    g = torch.Generator().manual_seed(1)
    text = "a bee, all tall."
    ids = TOK.encode(text)
    lp = torch.randn(60, len(DEFAULT_ALPHABET) + 1, generator=g).log_softmax(-1)
    d = ctc_durations(lp, ids)
    assert len(d) == len(text) and sum(d) == 60 and min(d) >= 1
    assert durations_from_spans([(3, 4), (4, 6)], 9) == [4, 5]
    with pytest.raises(ValueError, match="too short"):
        ctc_durations(lp[:16], ids)  # 16 characters + 3 repeats ("ee", "ll", "ll") need 19 frames


@pytest.mark.parametrize("encoder", ["gru", "transformer"])
def test_align_and_transcribe_with_a_model(encoder, tiny_asr_config):
    torch.manual_seed(0)
    model = CtcAsr(replace(tiny_asr_config, encoder=encoder)).eval()
    pcm = 0.1 * torch.randn(16000)
    d = align(model, pcm, 16000, "ab ba")
    assert len(d) == 5 and sum(d) == 50 and min(d) >= 1
    assert set(transcribe(model, pcm, 16000)) <= set(DEFAULT_ALPHABET)
    with pytest.raises(ValueError, match="outside the ASR alphabet"):
        align(model, pcm, 16000, "AB")
    with pytest.raises(ValueError, match="too short"):
        align(model, pcm[:320 * 3], 16000, "abcd")

