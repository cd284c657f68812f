"""The CTC recognizer: error rates, greedy decoding, forced alignment, 50 Hz features, and an
end-to-end training run (resume, export, load) on a tiny fake corpus."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
import soundfile as sf
import torch

from voicespec.eval.judge import cer, corpus_error_rates, wer
from voicespec.eval.recognizer import AsrConfig, CtcAsr, greedy_decode, transcribe
from voicespec.train.asr import ENCODERS, AsrTrainConfig, length_batches, run_asr, train_asr
from voicespec.train.ctc_align import (
    _torchaudio_align, align, char_spans, ctc_durations, durations_from_spans, viterbi_align,
)
from voicespec.codec.model import Codec, CodecConfig
from voicespec.frontend.text import DEFAULT_ALPHABET, CharTokenizer

TINY = AsrConfig(conv_channels=16, conv_layers=1, hidden=16, layers=1, dropout=0.0)
TOK = CharTokenizer()


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


def _one_hot_log_probs(labels: list[int], vocab: int = len(DEFAULT_ALPHABET) + 1, p: float = 0.9) -> torch.Tensor:
    """Frames whose best class is ``labels[t]`` (probability ``p``, the rest shared)."""
    probs = torch.full((len(labels), vocab), (1 - p) / (vocab - 1))
    probs[torch.arange(len(labels)), torch.tensor(labels)] = p
    return probs.log()


def test_greedy_decode_collapses_repeats_and_drops_blanks():
    a, b, space = TOK.encode("a")[0], TOK.encode("b")[0], TOK.encode(" ")[0]
    frames = [0, a, a, 0, a, b, b, 0, 0, space, space, b, 0]
    assert greedy_decode(_one_hot_log_probs(frames)) == "aab b"
    assert greedy_decode(_one_hot_log_probs([0, 0, 0])) == ""


def _backends():
    yield "viterbi"
    if _torchaudio_align(torch.zeros(2, 3).log_softmax(-1), [1], 0) is not None:
        yield "torchaudio"


@pytest.mark.parametrize("backend", list(_backends()))
def test_alignment_on_a_constructed_matrix(backend):
    # "abb" over 10 frames: blank blank a a blank b b blank b blank. The repeated "b" needs the blank
    # between its two spans; leading blanks go to the first character, the others to the one before.
    a, b = TOK.encode("ab")
    frames = [0, 0, a, a, 0, b, b, 0, b, 0]
    lp = _one_hot_log_probs(frames)
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


def test_features_are_50_hz_and_centred_on_codec_frames():
    torch.manual_seed(0)
    model = CtcAsr(TINY)
    assert model.config.frame_rate == 50
    # ceil(N / 320): 1 s is 50 frames; a partial last hop is kept as a frame, as Codec.encode does.
    for n, frames in [(16000, 50), (16001, 51), (15999, 50), (320, 1), (1, 1), (0, 0)]:
        assert model.features(torch.zeros(1, n))[0].shape == (1, 80, frames)
    click = torch.zeros(1, 16000)
    click[0, 320 * 10 + 160] = 1.0  # the middle of codec frame 10
    energy = model.log_mel(click)[0].exp().sum(0)
    assert int(energy.argmax()) == 10
    # A 24 kHz second is resampled to 16 kHz: still 50 frames.
    assert model.log_probs(torch.zeros(24000), 24000).shape == (50, len(DEFAULT_ALPHABET) + 1)
    # The same count as a 16 kHz codec with hop 320 (the recipe's) gives, so frames map 1:1.
    codec = Codec.random(CodecConfig(sample_rate=16000, n_filters=2, ratios=(8, 5, 4, 2), dimension=4, lstm=0,
                                     pad_mode="constant", n_q=1, n_codebooks=1, codebook_size=2))
    for n in (16000, 16001, 4000):
        assert codec.encode(torch.zeros(n)).shape[1] == model.features(torch.zeros(1, n))[0].shape[-1]


@pytest.mark.parametrize("encoder", ["gru", "transformer"])
def test_padding_in_a_batch_does_not_change_an_utterance(encoder):
    torch.manual_seed(0)
    model = CtcAsr(replace(TINY, encoder=encoder, conv_layers=2)).eval()
    short, long = 0.1 * torch.randn(5000), 0.1 * torch.randn(9000)
    batch = torch.zeros(2, 9000)
    batch[0, :5000], batch[1] = short, long
    with torch.no_grad():
        feats, frames = model.features(batch, torch.tensor([5000, 9000]))
        out = model(feats, frames)
    assert frames.tolist() == [16, 29]
    assert torch.allclose(out[0, :16], model.log_probs(short, 16000), atol=1e-5)
    assert torch.allclose(out[1], model.log_probs(long, 16000), atol=1e-5)


@pytest.mark.parametrize("encoder", ["gru", "transformer"])
def test_align_and_transcribe_with_a_model(encoder):
    torch.manual_seed(0)
    model = CtcAsr(replace(TINY, encoder=encoder)).eval()
    pcm = 0.1 * torch.randn(16000)
    d = align(model, pcm, 16000, "ab ba")
    assert len(d) == 5 and sum(d) == 50 and min(d) >= 1
    assert set(transcribe(model, pcm, 16000)) <= set(DEFAULT_ALPHABET)
    with pytest.raises(ValueError, match="outside the ASR alphabet"):
        align(model, pcm, 16000, "AB")
    with pytest.raises(ValueError, match="too short"):
        align(model, pcm[:320 * 3], 16000, "abcd")


def test_length_batches_cover_each_item_once_within_budget():
    lengths = [random.Random(i).randrange(10, 100) for i in range(50)] + [500]
    batches = length_batches(lengths, 300, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(51))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 300


def _fake_corpus(folder, sr=24000):
    texts = ["a ba", "ab", "bab a", "aa b", "b a", "ba ab"]
    (folder / "wav").mkdir(parents=True)
    lines = []
    g = torch.Generator().manual_seed(0)
    for i, text in enumerate(texts):
        t = torch.arange(int(sr * (0.5 + 0.1 * i))) / sr
        x = 0.3 * torch.sin(2 * math.pi * (150 + 50 * i) * t) * (torch.sin(2 * math.pi * 3 * t) > 0)
        x = x + 0.01 * torch.randn(t.shape, generator=g)
        sf.write(str(folder / "wav" / f"u{i}.wav"), x.numpy(), sr)
        lines.append(json.dumps({"id": f"u{i}", "raw": text, "text": text, "split": "heldout" if i == 0 else "train",
                                 "wav": f"wav/u{i}.wav", "seconds": len(t) / sr, "sample_rate": sr}))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")


def test_training_runs_resumes_exports_and_loads(tmp_path):
    _fake_corpus(tmp_path / "data")
    config = AsrTrainConfig(minutes=0.01, batch_seconds=2.0, warmup_steps=2, eval_every_steps=3, log_every_steps=1,
                            checkpoint_every_s=0.2, stats_utterances=4)
    out = tmp_path / "run"
    folder = train_asr(tmp_path / "data", out, config, TINY, log=lambda s: None)
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    first = state["step"]
    assert first > 0 and state["trained_s"] >= 0.01 * 60
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in records) and any("cer" in r.get("heldout", {}) for r in records)

    model = CtcAsr.from_folder(folder)
    extra = model.config.extra
    assert extra["training"]["steps"] == first and "cer" in extra["heldout_metrics"]
    assert extra["training"]["recipe"] == "voicespec train asr"
    assert not torch.equal(model.feat_std, torch.ones(80))  # normalization measured on the corpus
    text = transcribe(model, torch.zeros(24000), 24000)
    assert isinstance(text, str) and set(text) <= set(DEFAULT_ALPHABET)

    # A bigger budget resumes from the checkpoint instead of starting over.
    train_asr(tmp_path / "data", out, AsrTrainConfig(**{**config.__dict__, "minutes": 0.02}), TINY, log=lambda s: None)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] > first


def test_bad_folders_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a voicespec ASR folder"):
        CtcAsr.from_folder(tmp_path / "missing")
    good = tmp_path / "good"
    CtcAsr(TINY).save(good)
    assert CtcAsr.from_folder(good).config == TINY

    bad = tmp_path / "bad"
    CtcAsr(TINY).save(bad)
    (bad / "model.safetensors").write_bytes((bad / "model.safetensors").read_bytes()[:100])
    with pytest.raises(ValueError, match="corrupt or incompatible"):
        CtcAsr.from_folder(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        CtcAsr.from_folder(bad)
    (bad / "config.json").write_text(json.dumps({"codec_type": "voicespec_encodec"}))
    with pytest.raises(ValueError, match="not a voicespec ASR config"):
        CtcAsr.from_folder(bad)
    (bad / "config.json").write_text(json.dumps({**TINY.to_dict(), "hidden": 32}))  # weights of another size
    (bad / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="corrupt or incompatible"):
        CtcAsr.from_folder(bad)


def test_cli_registers_train_asr():
    from voicespec.cli import build_parser

    argv = ["train", "asr", "--data", "d", "--out", "o", "--minutes", "5"]
    args = build_parser(argv).parse_args(argv)
    assert args.func is run_asr and args.minutes == 5.0 and args.data == "d" and args.encoder == "gru"
    argv = ["train", "asr", "--data", "d", "--out", "o", "--encoder", "transformer"]
    args = build_parser(argv).parse_args(argv)
    assert args.encoder == "transformer"
    assert 1e6 < CtcAsr(ENCODERS["gru"]).n_params() < 3e6 and 1e6 < CtcAsr(ENCODERS["transformer"]).n_params() < 3e6
