"""Audio plumbing: streaming resampler exactness, PCM encodings, atomic WAV/FLAC writes."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import soundfile
import torch
import torchaudio.functional as AF

from voicespec.audio import StreamingResampler, to_encoding, write_audio_atomic

RATE_PAIRS = [(24000, 8000), (24000, 16000), (24000, 22050), (24000, 48000), (16000, 24000)]
# Chunk size -> signal length (in seconds of input). Size 1 and 37 run the resampler once per push
# (~1 ms each), so they use short signals to keep the file fast.
CHUNK_SECONDS = {1: 0.05, 37: 1.0, 480: 1.0, 4801: 1.0}


def _signal(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n) / 8000.0
    return 0.4 * torch.randn(n, generator=g) + 0.3 * torch.sin(2 * torch.pi * 440 * t)


def _stream(r: StreamingResampler, x: torch.Tensor, sizes) -> torch.Tensor:
    outs, i = [], 0
    for size in sizes:
        outs.append(r.push(x[i : i + size]))
        i += size
    assert i >= x.shape[0]
    outs.append(r.flush())
    for o in outs:
        assert o.ndim == 1
    return torch.cat(outs)


def _check(x, orig, new, sizes):
    r = StreamingResampler(orig, new)
    got = _stream(r, x, sizes)
    want = AF.resample(x, orig, new, lowpass_filter_width=6)
    assert got.shape == want.shape
    if want.numel():
        assert (got - want).abs().max().item() < 1e-5


@pytest.mark.parametrize("chunk", sorted(CHUNK_SECONDS))
@pytest.mark.parametrize("orig, new", RATE_PAIRS)
def test_resampler_matches_whole_signal(orig, new, chunk):
    n = int(orig * CHUNK_SECONDS[chunk])
    if (orig, new) == (24000, 22050) and chunk == 1:
        n = 700  # this pair's period is 160 input samples: stream several periods
    x = _signal(n, seed=chunk)
    _check(x, orig, new, [chunk] * (-(-n // chunk)))


@pytest.mark.parametrize("orig, new", RATE_PAIRS)
def test_resampler_irregular_chunks_with_empty_pushes(orig, new):
    rng = np.random.default_rng(orig + new)
    x = _signal(orig, seed=1)  # one second
    sizes = []
    while sum(sizes) < x.shape[0]:
        sizes.append(int(rng.choice([0, 1, 2, 3, rng.integers(0, 200), rng.integers(0, 5000)])))
    _check(x, orig, new, sizes)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 41, 159, 161, 1001])
@pytest.mark.parametrize("orig, new", RATE_PAIRS)
def test_resampler_short_and_odd_lengths(orig, new, n):
    x = _signal(n, seed=n)
    _check(x, orig, new, [n])
    _check(x, orig, new, [n // 2, 0, n - n // 2])


@pytest.mark.parametrize("orig, new", RATE_PAIRS)
def test_resampler_holds_back_little(orig, new):
    r = StreamingResampler(orig, new)
    x = _signal(orig // 4)
    pushed = emitted = 0
    for i in range(0, x.shape[0], 500):
        chunk = x[i : i + 500]
        emitted += r.push(chunk).shape[0]
        pushed += chunk.shape[0]
        # Latency: at most a few hundred input samples of context are held back.
        assert emitted >= (pushed - 512) * new / orig - 1
        assert emitted <= pushed * new / orig + 1


def test_resampler_empty_stream():
    r = StreamingResampler(24000, 16000)
    assert r.push(torch.zeros(0)).numel() == 0
    assert r.flush().numel() == 0
    assert r.flush().numel() == 0  # flushing twice is harmless


def test_resampler_identity_passes_through():
    for orig, new in [(24000, 24000), (16000, 16000)]:
        r = StreamingResampler(orig, new)
        x = _signal(1000)
        assert torch.equal(r.push(x[:300]), x[:300])
        assert torch.equal(r.push(x[300:]), x[300:])
        assert r.flush().numel() == 0


def test_resampler_reset_and_flush_start_a_fresh_stream():
    x, y = _signal(5000, seed=1), _signal(3000, seed=2)
    want = AF.resample(y, 24000, 22050, lowpass_filter_width=6)

    r = StreamingResampler(24000, 22050)
    r.push(x[:2000])
    r.push(x[2000:])  # abandon this stream mid-way
    r.reset()
    got = _stream(r, y, [700, 700, 700, 900])
    assert got.shape == want.shape and (got - want).abs().max() < 1e-5

    # flush() also leaves the resampler ready for the next stream.
    got2 = _stream(r, y, [1234, 1766])
    assert got2.shape == want.shape and (got2 - want).abs().max() < 1e-5


def test_resampler_accepts_other_dtypes():
    x = _signal(3000).double()
    r = StreamingResampler(24000, 16000)
    got = _stream(r, x, [1000, 1000, 1000])
    want = AF.resample(x.float(), 24000, 16000, lowpass_filter_width=6)
    assert got.dtype == torch.float32
    assert (got - want).abs().max() < 1e-5


# ---------------------------------------------------------------------------------------------
# to_encoding

def test_f32le_round_trips_exactly():
    x = torch.randn(1001) * 1.5  # out-of-range values are not clipped for float output
    b = to_encoding(x, "f32le")
    assert len(b) == 4 * x.numel()
    back = np.frombuffer(b, dtype="<f4")
    np.testing.assert_array_equal(back, x.numpy())
    np.testing.assert_array_equal(np.frombuffer(to_encoding(x.double(), "f32le"), "<f4"), x.numpy())


def test_pcm_s16le_clips_and_rounds():
    q = 1 / 32767
    x = torch.tensor([-2.0, -1.0, -0.25, 0.0, 0.25, 1.0, 1.0001, 7.0, 0.4 * q, 0.6 * q, -0.6 * q, 100.4 * q])
    b = to_encoding(x, "pcm_s16le")
    assert len(b) == 2 * x.numel()
    got = np.frombuffer(b, dtype="<i2")
    np.testing.assert_array_equal(got, [-32767, -32767, -8192, 0, 8192, 32767, 32767, 32767, 0, 1, -1, 100])


def test_pcm_s16le_matches_reference_on_random_input():
    x = torch.randn(5000, generator=torch.Generator().manual_seed(3))
    got = np.frombuffer(to_encoding(x, "pcm_s16le"), dtype="<i2")
    want = np.round(np.clip(x.numpy(), -1, 1) * 32767).astype(np.int16)
    np.testing.assert_array_equal(got, want)


def test_to_encoding_detaches_and_handles_empty():
    x = torch.zeros(4, requires_grad=True)
    assert to_encoding(x, "pcm_s16le") == b"\x00" * 8
    assert to_encoding(torch.zeros(0), "f32le") == b""


@pytest.mark.parametrize("encoding", ["mp3", "s16le", "F32LE", "", "opus"])
def test_unknown_encoding(encoding):
    with pytest.raises(ValueError, match="unknown encoding"):
        to_encoding(torch.zeros(3), encoding)


# ---------------------------------------------------------------------------------------------
# write_audio_atomic

Q16 = 2 / 32768  # 16-bit quantization (plus libsndfile's 32767/32768 scaling asymmetry)


def _tone(n=2400, sr=24000, amp=0.5):
    return (amp * np.sin(2 * np.pi * 220 * np.arange(n) / sr)).astype(np.float32)


@pytest.mark.parametrize("name, fmt", [("out.wav", "WAV"), ("out.flac", "FLAC"), ("OUT.WAV", "WAV")])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_write_and_read_back(tmp_path, name, fmt, as_tensor):
    x = _tone()
    path = tmp_path / "sub" / "dir" / name  # parent folders are created
    write_audio_atomic(path, torch.from_numpy(x) if as_tensor else x, 24000)
    info = soundfile.info(str(path))
    assert info.format == fmt and info.subtype == "PCM_16" and info.channels == 1
    data, sr = soundfile.read(str(path), dtype="float32")
    assert sr == 24000
    assert data.shape == x.shape
    assert np.abs(data - x).max() <= Q16
    assert os.listdir(path.parent) == [name]  # no temporary .part file left


def test_write_clips_out_of_range(tmp_path):
    path = tmp_path / "clip.wav"
    write_audio_atomic(str(path), np.array([2.0, -2.0, 0.0, 1.5], dtype=np.float64), 16000)
    data, sr = soundfile.read(str(path), dtype="float32")
    assert sr == 16000
    np.testing.assert_allclose(data, [1.0, -1.0, 0.0, 1.0], atol=Q16)


@pytest.mark.parametrize("name", ["out.aiff", "out.opus", "out", "out.wav.part"])
def test_unsupported_extension_writes_nothing(tmp_path, name):
    path = tmp_path / "new_folder" / name
    with pytest.raises(ValueError, match="unsupported extension"):
        write_audio_atomic(path, _tone(), 24000)
    assert list(tmp_path.iterdir()) == []  # not even the parent folder


def _failing_write(calls):
    def fake_write(file, data, samplerate, **kwargs):
        calls.append(kwargs)
        file.write(b"RIFF\x00\x00\x00\x00WAVEpartial-garbage" * 10)
        file.flush()
        raise OSError("disk full (simulated)")

    return fake_write


@pytest.mark.parametrize("name", ["fail.wav", "fail.flac"])
def test_failed_write_leaves_nothing(tmp_path, monkeypatch, name):
    calls = []
    monkeypatch.setattr(soundfile, "write", _failing_write(calls))
    with pytest.raises(OSError, match="simulated"):
        write_audio_atomic(tmp_path / name, _tone(), 24000)
    assert calls, "the patched soundfile.write was not used"
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    def fake_write(file, *args, **kwargs):
        file.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(soundfile, "write", fake_write)
    with pytest.raises(KeyboardInterrupt):
        write_audio_atomic(tmp_path / "x.wav", _tone(), 24000)
    assert list(tmp_path.iterdir()) == []


def test_existing_target_replaced_atomically(tmp_path, monkeypatch):
    path = tmp_path / "voice.flac"
    old = _tone(amp=0.25)
    write_audio_atomic(path, old, 24000)
    old_bytes = path.read_bytes()

    # A failed rewrite leaves the old file untouched.
    with monkeypatch.context() as m:
        m.setattr(soundfile, "write", _failing_write([]))
        with pytest.raises(OSError):
            write_audio_atomic(path, _tone(amp=0.75, n=4800), 24000)
    assert path.read_bytes() == old_bytes
    assert os.listdir(tmp_path) == ["voice.flac"]

    # A successful rewrite replaces it whole.
    new = _tone(amp=0.75, n=4800)
    write_audio_atomic(path, new, 22050)
    data, sr = soundfile.read(str(path), dtype="float32")
    assert sr == 22050 and data.shape == new.shape
    assert np.abs(data - new).max() <= Q16
    assert os.listdir(tmp_path) == ["voice.flac"]


def test_written_file_mode_follows_umask(tmp_path):
    umask = os.umask(0)
    os.umask(umask)
    path = tmp_path / "perm.wav"
    write_audio_atomic(path, _tone(), 24000)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_the_temporary_file_is_hidden_beside_the_target(tmp_path, monkeypatch):
    """While a write is under way the folder holds only ``.<name>.<random>.part`` (what a resumed
    batch run and the SIGKILL test in test_cli.py rely on), and never a partial ``<name>``."""
    real_write, seen = soundfile.write, []

    def spying_write(file, *args, **kwargs):
        seen.append(sorted(os.listdir(tmp_path)))
        return real_write(file, *args, **kwargs)

    monkeypatch.setattr(soundfile, "write", spying_write)
    write_audio_atomic(tmp_path / "take.wav", _tone(), 24000)
    (during,) = seen
    assert len(during) == 1 and re.fullmatch(r"\.take\.wav\.\w+\.part", during[0]), during
    assert os.listdir(tmp_path) == ["take.wav"]


@pytest.mark.parametrize("suffix", [".wav", ".flac"])
def test_files_hold_the_streams_pcm_s16le_samples(tmp_path, suffix):
    """Issue 17, defect 8: `say` wrote through soundfile's own float-to-int conversion, up to 2 LSB
    away from the stream's pcm_s16le; both now quantize with to_int16."""
    x = torch.randn(4000, generator=torch.Generator().manual_seed(5)) * 0.6
    path = tmp_path / f"a{suffix}"
    write_audio_atomic(path, x, 16000)
    back, rate = soundfile.read(path, dtype="int16")
    assert rate == 16000
    np.testing.assert_array_equal(back, np.frombuffer(to_encoding(x, "pcm_s16le"), dtype="<i2"))
