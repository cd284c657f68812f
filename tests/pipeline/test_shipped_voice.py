"""The voices we ship (models/voicespec-tiny, the default, and voicespec-tiny-g2, grouped): every part
loads and fits, each speaks a short sentence through the real pipeline, and speculation changes no
token of greedy output."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import FeatureDrafter, ModelDrafter
from voicespec.paths import SHIPPED_VOICES_DIR
from voicespec.pipeline.synthesis import Synthesizer
from voicespec.pipeline.voice import DEFAULT_VOICE, load_voice

GROUPED_VOICE = "voicespec-tiny-g2"


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


# --- the grouped voice (issue 36): two frames a backbone step, the default voice's codec and timing ---

@pytest.fixture(scope="module")
def grouped():
    return load_voice(GROUPED_VOICE)


def test_the_grouped_voice_shares_the_default_voices_codec_and_timing(voice, grouped):
    assert grouped.name == GROUPED_VOICE and grouped.target.layout.frames_per_step == 2
    shipped, default = SHIPPED_VOICES_DIR / GROUPED_VOICE, SHIPPED_VOICES_DIR / DEFAULT_VOICE
    assert (shipped / grouped.config.codec).resolve() == (default / "codec").resolve()
    assert (shipped / grouped.config.duration).resolve() == (default / "duration").resolve()
    assert not (shipped / "codec").exists()  # one copy in the package
    assert grouped.config.tokenizer == voice.config.tokenizer  # the shared predictor reads the same units
    assert grouped.config.default_drafter == "feature" and grouped.drafter_names[-1:] == ["feature"]
    card = (shipped / "target" / "MODEL_CARD.md").read_text()  # it says which stage the judges heard
    assert "## Fine stage" in card and "held-out sentences (30): Whisper WER" in card


def test_the_grouped_voice_speaks_its_durations_on_and_off_a_group_boundary(grouped):
    parities = set()
    for text in ("Hello there.", "Good morning."):
        pcm, stats = Synthesizer(grouped).synthesize(text)
        (_, ids), = grouped.frontend.sentences(text)
        frames = sum(grouped.duration.predict(ids))
        assert stats.frames == frames and pcm.numel() == frames * grouped.codec.hop_length
        assert stats.decode.generated_steps == -(-frames // 2) + 1  # a backbone step per two frames, and the end
        assert stats.decode.finish_reason == "eos" and float(pcm.abs().max()) > 0.01
        parities.add(frames % 2)
    assert parities == {0, 1}  # one sentence ends on a group boundary, the other a frame past one


@pytest.mark.parametrize("name, drafter, kind", [(DEFAULT_VOICE, "distilled", ModelDrafter),
                                                 (GROUPED_VOICE, "feature", FeatureDrafter)])
def test_greedy_speculation_equals_plain_on_the_shipped_voices(name, drafter, kind, request):
    v = request.getfixturevalue("voice" if name == DEFAULT_VOICE else "grouped")
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
