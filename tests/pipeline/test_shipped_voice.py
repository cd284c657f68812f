"""The default voice we ship (models/voicespec-tiny): every part loads and fits, it speaks a short
sentence through the real pipeline, and speculation changes no token of greedy output."""

from __future__ import annotations

import pytest
import torch

from voicespec.pipeline.voice import load_voice
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter
from voicespec.pipeline.synthesis import Synthesizer
from voicespec.pipeline.voice import DEFAULT_VOICE


@pytest.fixture(scope="module")
def voice():
    return load_voice(None)


def test_the_default_voice_is_the_shipped_one_with_every_part(voice):
    assert voice.name == DEFAULT_VOICE and voice.duration is not None and voice.track_positions > 0
    assert voice.config.default_drafter in voice.drafter_names
    info = voice.target.model.config.voicespec_info
    assert info["steps"] > 0 and "ce_wrong_text" in info["heldout_metrics"]
    # The text must matter to the model: another sentence's text costs it clearly more.
    assert info["heldout_metrics"]["text_gain_nats"] > 0.1


def test_it_reads_phonemes_and_decodes_coarse_first(voice):
    assert voice.tokenizer.kind == "phonemes" and voice.target.layout.kind == "coarse"
    # Its fine stage reads no previous frame: a verify pass's frames are completed as one batch.
    assert voice.target.model.config.fine_reads_prev is False and voice.target.model.fine.prev is None
    assert voice.target.model.config.voicespec_info["units"].startswith("phonemes")
    (_, ids), = voice.frontend.sentences("Okafor lit the lighthouse.")  # out-of-vocabulary name: G2P
    assert voice.tokenizer.decode(ids).startswith("ˈoʊkəfɚ")


def test_it_speaks_a_short_sentence_for_as_long_as_its_durations_say(voice):
    text = "Hello there."
    pcm, stats = Synthesizer(voice).synthesize(text)
    (_, ids), = voice.frontend.sentences(text)
    frames = sum(voice.duration.predict(ids))
    assert stats.frames == frames and pcm.numel() == frames * voice.codec.hop_length
    assert stats.decode.finish_reason == "eos" and float(pcm.abs().max()) > 0.01


def test_greedy_speculation_equals_plain_on_the_shipped_model(voice):
    (_, ids), = voice.frontend.sentences("Please order a cup of tea.")
    prompt = voice.prompt(ids)
    greedy = SamplingConfig(temperature=0)
    plain = SpecDecoder(voice.target, None, DecodeConfig(greedy, gamma=0, max_steps=400)).generate(prompt).run()
    drafter = voice.drafter("distilled")
    for gamma in (2, "auto"):
        spec = SpecDecoder(voice.target, drafter, DecodeConfig(greedy, gamma=gamma, max_steps=400)).generate(prompt)
        assert torch.equal(spec.run(), plain)
        if gamma == 2:
            assert isinstance(drafter, ModelDrafter) and spec.stats.accepted > 0  # not vacuous: drafts were accepted
