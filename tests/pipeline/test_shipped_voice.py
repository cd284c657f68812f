"""The voices we ship (voicespec-tiny-g2, grouped: the default; voicespec-tiny, one frame a step: the
base whose codec and timing both use): every part loads and fits, each speaks a short sentence through
the real pipeline, and speculation changes no token of greedy output."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import FeatureDrafter, ModelDrafter
from voicespec.paths import SHIPPED_VOICES_DIR
from voicespec.pipeline.synthesis import Synthesizer
from voicespec.pipeline.voice import BASE_VOICE, DEFAULT_VOICE, load_voice


@pytest.fixture(scope="module")
def voice():
    return load_voice(None)


@pytest.fixture(scope="module")
def base():
    return load_voice(BASE_VOICE)


@pytest.mark.parametrize("name", [DEFAULT_VOICE, BASE_VOICE])
def test_each_shipped_voice_has_every_part(name, request):
    voice = request.getfixturevalue("voice" if name == DEFAULT_VOICE else "base")
    assert voice.name == name and voice.duration is not None and voice.track_positions > 0
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


# --- the default voice is grouped (issue 36): two frames a backbone step, the base voice's codec and timing ---

def test_the_default_voice_is_grouped_and_shares_the_base_voices_codec_and_timing(voice, base):
    assert voice.target.layout.frames_per_step == 2 and base.target.layout.frames_per_step == 1
    shipped, sibling = SHIPPED_VOICES_DIR / DEFAULT_VOICE, SHIPPED_VOICES_DIR / BASE_VOICE
    assert (shipped / voice.config.codec).resolve() == (sibling / "codec").resolve()
    assert (shipped / voice.config.duration).resolve() == (sibling / "duration").resolve()
    assert not (shipped / "codec").exists()  # one copy in the package
    assert voice.config.tokenizer == base.config.tokenizer  # the shared predictor reads the same units
    assert voice.config.default_drafter == "feature" and voice.drafter_names[-1:] == ["feature"]
    assert voice.config.decoding == "greedy" and base.config.decoding == "sampled"
    card = (shipped / "target" / "MODEL_CARD.md").read_text()  # it says which stage the judges heard
    assert "## Fine stage" in card and "held-out sentences (30): Whisper WER" in card


def test_the_default_voice_speaks_its_durations_on_and_off_a_group_boundary(voice):
    parities = set()
    for text in ("Hello there.", "Good morning."):
        pcm, stats = Synthesizer(voice).synthesize(text)
        (_, ids), = voice.frontend.sentences(text)
        frames = sum(voice.duration.predict(ids))
        assert stats.frames == frames and pcm.numel() == frames * voice.codec.hop_length
        assert stats.decode.generated_steps == -(-frames // 2) + 1  # a backbone step per two frames, and the end
        assert stats.decode.finish_reason == "eos" and float(pcm.abs().max()) > 0.01
        parities.add(frames % 2)
    assert parities == {0, 1}  # one sentence ends on a group boundary, the other a frame past one


@pytest.mark.parametrize("name, drafter, kind", [(BASE_VOICE, "distilled", ModelDrafter),
                                                 (DEFAULT_VOICE, "feature", FeatureDrafter)])
def test_greedy_speculation_equals_plain_on_the_shipped_voices(name, drafter, kind, request):
    v = request.getfixturevalue("voice" if name == DEFAULT_VOICE else "base")
    (_, ids), = v.frontend.sentences("Please order a cup of tea.")
    prompt = v.prompt(ids)
    greedy = SamplingConfig(temperature=0)
    plain = SpecDecoder(v.target, None, DecodeConfig(greedy, gamma=0, max_steps=400)).generate(prompt).run()
    assert isinstance(v.drafter(drafter), kind)  # the shipped drafter, not a fallback
    for gamma in (3, "auto"):
        spec = SpecDecoder(v.target, v.drafter(drafter), DecodeConfig(greedy, gamma=gamma, max_steps=400)).generate(prompt)
        assert torch.equal(spec.run(), plain)
        if gamma == 3:
            assert spec.stats.accepted > 0  # not vacuous: drafts were accepted
