"""The text → PCM pipeline on a tiny random-weight voice (real codec, real LM, real files)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as AF

from voicespec.audio import to_int16

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.frontend.text import TextError

TEXT = "Hello there. The 2nd sentence costs $3.50!"


def options(**kw):
    decode = DecodeConfig(SamplingConfig(temperature=0.8, top_k=20), gamma=kw.pop("gamma", 3), seed=kw.pop("seed", 7))
    return SynthesisOptions(decode=decode, **kw)


def test_stream_is_the_codec_decode_of_its_frames(tiny_voice):
    stream = Synthesizer(tiny_voice).stream(TEXT, options())
    pcm = torch.cat([c.pcm for c in stream])
    assert len(stream.frames) == stream.stats.sentences == 2
    frames = torch.cat(stream.frames, dim=1)
    assert stream.stats.frames == frames.shape[1]
    # Sentences run through one streaming decoder: the waveform is one continuous decode.
    expected = tiny_voice.codec.decode(frames)
    assert pcm.shape == expected.shape == (frames.shape[1] * tiny_voice.codec.hop_length,)
    assert torch.allclose(pcm, expected, atol=1e-4)
    s = stream.stats
    assert s.samples == pcm.numel() and s.ttfa_s is not None and 0 < s.ttfa_s <= s.wall_s
    assert s.decode.target_passes >= 1 and s.rtf > 0
    assert s.decode.finish_reason in ("eos", "length")


@pytest.mark.slow
def test_resampled_output_matches_whole_signal_resampling(tiny_voice):
    native, _ = Synthesizer(tiny_voice).synthesize(TEXT, options())
    for rate in (16000, 22050, 48000):
        pcm, stats = Synthesizer(tiny_voice).synthesize(TEXT, options(sample_rate=rate))
        expected = AF.resample(native, 24000, rate, lowpass_filter_width=6)
        assert stats.sample_rate == rate and pcm.shape == expected.shape
        assert torch.allclose(pcm, expected, atol=1e-4)


def _run(voice, config, drafter):
    stream = Synthesizer(voice).stream(TEXT, SynthesisOptions(config, drafter=drafter))
    return torch.cat([c.pcm for c in stream]), stream.frames


def test_speculation_changes_nothing_greedy(tiny_voice):
    """Same frames, token for token; the PCM differs only by float rounding, since speculation
    hands the streaming codec decoder differently sized chunks."""
    plain, plain_frames = _run(tiny_voice, DecodeConfig(SamplingConfig(temperature=0), gamma=0), "none")
    for drafter in ("ngram", "draft-model"):
        for gamma in (2, "auto"):
            pcm, frames = _run(tiny_voice, DecodeConfig(SamplingConfig(temperature=0), gamma=gamma), drafter)
            assert all(torch.equal(a, b) for a, b in zip(frames, plain_frames, strict=True)), (drafter, gamma)
            assert pcm.shape == plain.shape and torch.allclose(pcm, plain, atol=1e-5), (drafter, gamma)


def test_seeded_sampling_is_reproducible(tiny_voice):
    a, _ = Synthesizer(tiny_voice).synthesize(TEXT, options(seed=3))
    b, _ = Synthesizer(tiny_voice).synthesize(TEXT, options(seed=3))
    c, _ = Synthesizer(tiny_voice).synthesize(TEXT, options(seed=4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_cancel_stops_within_one_step(tiny_voice):
    stream = Synthesizer(tiny_voice).stream(TEXT, options(gamma=0))
    it = iter(stream)
    next(it)
    stream.cancel()
    assert list(it) == []
    assert stream.stats.decode.finish_reason == "cancelled"
    assert stream.stats.sentences == 1


@pytest.mark.parametrize(
    "text,err",
    [("", TextError), ("   \x00\x01 ", TextError), ("!!! ???", TextError), ("a" * 6000, TextError)],
)
def test_bad_text(tiny_voice, text, err):
    with pytest.raises(err):
        Synthesizer(tiny_voice).stream(text, options())


def test_bad_options(tiny_voice):
    with pytest.raises(ValueError, match="sample_rate"):
        SynthesisOptions(sample_rate=44000)
    with pytest.raises(ValueError, match="speed"):
        SynthesisOptions(speed=3.0)
    with pytest.raises(ValueError, match="unknown drafter"):
        Synthesizer(tiny_voice).stream("hi", options(drafter="nope"))
    with pytest.raises(ValueError, match="cannot change its speed"):  # no duration predictor
        Synthesizer(tiny_voice).stream("hi", SynthesisOptions(speed=1.5))


@pytest.mark.slow
def test_aligned_voice_speaks_exactly_its_predicted_durations(aligned_voice):
    """Each sentence lasts the frames its duration prediction gives (EOS is forced there), and
    speculation changes no token."""
    expected = sum(sum(aligned_voice.duration.predict(ids)) for _, ids in aligned_voice.frontend.sentences(TEXT))
    plain, frames = _run(aligned_voice, DecodeConfig(SamplingConfig(temperature=0), gamma=0), "none")
    assert sum(f.shape[1] for f in frames) == expected
    for drafter in ("ngram", "draft-model"):
        _, spec_frames = _run(aligned_voice, DecodeConfig(SamplingConfig(temperature=0), gamma=3), drafter)
        assert all(torch.equal(a, b) for a, b in zip(spec_frames, frames))
    ids = aligned_voice.frontend.sentences("Hello there.")[0][1]
    faster = aligned_voice.prompt(ids, aligned_voice.durations(ids, speed=2.0))
    slower = aligned_voice.prompt(ids, aligned_voice.durations(ids, speed=0.5))
    assert faster.track.shape[0] < slower.track.shape[0]




@pytest.mark.slow
def test_python_api_say_returns_audio_with_its_rate_words_and_stats(aligned_voice, tmp_path):
    audio = aligned_voice.say("Hello there. Second one.", seed=3, gamma=2, sample_rate=16000)
    assert audio.sample_rate == 16000 and audio.pcm.dtype == np.float32
    assert audio.duration_s == pytest.approx(audio.stats.audio_s) and audio.stats.sentences == 2
    assert [w.text for w in audio.words] == ["hello", "there", "second", "one"]
    for ext in ("wav", "flac", "ogg", "mp3"):
        path = audio.save(tmp_path / f"a.{ext}")
        data, rate = sf.read(path)
        assert rate == 16000 and abs(len(data) - len(audio.pcm)) <= 0.1 * len(audio.pcm), ext
    wav, rate = sf.read(io.BytesIO(audio.to_bytes("wav")), dtype="int16")
    assert np.array_equal(wav, to_int16(audio.pcm))  # quantized as the stream quantizes
    assert "<audio" in audio._repr_html_() and repr(audio).startswith(f"Audio({audio.duration_s:.2f} s at 16000 Hz")
    again = aligned_voice.say("Hello there. Second one.", seed=3, gamma=2, sample_rate=16000)
    assert np.array_equal(again.pcm, audio.pcm)  # seeded: reproducible
    chunks = list(aligned_voice.stream("Hello there. Second one.", seed=3, gamma=2, sample_rate=16000))
    assert np.array_equal(np.concatenate([c.pcm.numpy() for c in chunks]), audio.pcm)


def test_python_api_speed_scales_durations_and_rejects_unknown_options(aligned_voice):
    normal = aligned_voice.say("Hello there, my friend.", temperature=0)
    fast = aligned_voice.say("Hello there, my friend.", temperature=0, speed=2.0)
    assert 0.35 < len(fast.pcm) / len(normal.pcm) < 0.65
    assert fast.words[-1].end_s < normal.words[-1].end_s
    with pytest.raises(TypeError, match="temprature"):
        aligned_voice.say("Hi.", temprature=0.5)
    with pytest.raises(ValueError, match="speed"):
        aligned_voice.say("Hi.", speed=5)


def test_from_pretrained_finds_voices_by_name_and_path(tmp_path, monkeypatch, tiny_voice_dir):
    import voicespec
    from voicespec.pipeline.voice import resolve_voice, voice_names

    monkeypatch.setenv("VOICESPEC_VOICES", str(tiny_voice_dir.parent))
    assert tiny_voice_dir.name in voice_names() and "voicespec-tiny" in voice_names()
    assert resolve_voice(tiny_voice_dir.name) == tiny_voice_dir
    voice = voicespec.Voice.from_pretrained(tiny_voice_dir.name, device="cpu")
    assert voice.name == voicespec.Voice.from_pretrained(str(tiny_voice_dir), device="cpu").name
    with pytest.raises(FileNotFoundError, match="unknown voice 'nobody'.*known voices"):
        resolve_voice("nobody")
    with pytest.raises(FileNotFoundError, match="no such voice folder"):
        resolve_voice(str(tmp_path / "missing"))
