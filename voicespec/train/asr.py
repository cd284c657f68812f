"""A small character CTC recognizer: ``voicespec train asr``.

Two jobs: CTC forced alignment of characters to 50 Hz frames (per-character durations for a
frame-aligned TTS LM) and character error rate (CER) of teacher audio, codec resynthesis and
generated speech.

Features: log-mel at 16 kHz (inputs at other rates are resampled), 80 mels, 25 ms window
(``n_fft`` 400), hop 320 samples = 20 ms, i.e. the codec's 50 Hz frame rate. Feature frame ``t``
is centred on sample ``320 t + 160``, the middle of codec frame ``t`` (which covers samples
``[320 t, 320 t + 320)``), and a signal of ``N`` samples has ``ceil(N / 320)`` frames, exactly as
many as ``Codec.encode`` gives: the signal is zero-padded on both sides, so a last, partial hop is
kept as a frame (1 s at 16 kHz: 50 frames). Alignments therefore map 1:1 to codec frames.

Model: per-mel mean/variance normalization (statistics measured on the training corpus, stored as
buffers), a stride-1 Conv1d front end (no time downsampling), a bidirectional GRU stack (or, with
``encoder="transformer"``, a pre-norm transformer encoder with sinusoidal positions) and a
linear CTC head over ``1 + len(alphabet)`` classes. Class 0 is the CTC *blank*: it is the id that
:class:`~voicespec.frontend.text.CharTokenizer` reserves for padding, so character ids are the tokenizer's
own ids ``1..len(alphabet)`` and ``tokenizer.decode`` reads the head's output directly. Defaults
(2 convs of 256 channels, kernel 5; 3 BiGRU layers of 192 per direction) give 2.29 M parameters.
Saved as a folder: ``config.json`` (with provenance in ``extra``) + ``model.safetensors``.

Training follows ``train.codec``: ``out/checkpoint.pt`` rewritten atomically every few minutes,
``--minutes`` a budget on *total* training time across resumes, ``out/metrics.jsonl``, held-out
CER every N steps, export to ``out/asr``. Batches are whole utterances, grouped by length (with a
little jitter, so batches differ between epochs) up to a padded-audio budget; SpecAugment
frequency/time masks, random gain and light noise; AdamW; CTC loss with ``zero_infinity``.

Alignment uses ``torchaudio.functional.forced_align`` (deprecated in torchaudio 2.9 but present
and working in 2.9.1) when it is available, else :func:`viterbi_align`, a small pure-torch CTC
Viterbi that finds the same best path (checked against it in the tests); merging repeated labels
as ``torchaudio.functional.merge_tokens`` does gives each character's own frames, and the blank
frames around them are then given to a character (see :func:`durations_from_spans`)
so the durations cover every frame.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF
import torchaudio.transforms as T
from torch import nn
from torch.nn import functional as F

from voicespec.train.common import TrainingRun, cosine_lr_factor, hardware
from voicespec.folders import FolderConfig, load_weights, save_folder
from voicespec.eval.judge import corpus_error_rates, edit_distance  # noqa: F401 (shared scoring; re-exported)
from voicespec.frontend.text import DEFAULT_ALPHABET, CharTokenizer

MODEL_TYPE = "voicespec_ctc_asr"
BLANK = 0  # CTC blank = CharTokenizer's padding id


# --- model ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AsrConfig(FolderConfig):
    TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "a voicespec ASR"

    sample_rate: int = 16000
    n_mels: int = 80
    n_fft: int = 400  # 25 ms window
    hop_length: int = 320  # 20 ms: 50 Hz, the codec's frame rate
    conv_channels: int = 256
    conv_layers: int = 2
    conv_kernel: int = 5
    encoder: str = "gru"  # "gru" (bidirectional) or "transformer" (pre-norm, sinusoidal positions)
    hidden: int = 192  # GRU: per direction; transformer: model width
    layers: int = 3
    heads: int = 4  # transformer only
    ff_mult: int = 4  # transformer only
    dropout: float = 0.1
    alphabet: str = DEFAULT_ALPHABET
    extra: dict[str, Any] = field(default_factory=dict)  # provenance: data, training, metrics

    def __post_init__(self) -> None:
        if self.n_fft < self.hop_length:
            raise ValueError(f"n_fft ({self.n_fft}) must be >= hop_length ({self.hop_length})")
        if self.conv_kernel % 2 != 1:
            raise ValueError(f"conv_kernel must be odd (stride-1 'same' convolution), got {self.conv_kernel}")
        if self.encoder not in ("gru", "transformer"):
            raise ValueError(f"encoder must be 'gru' or 'transformer', got {self.encoder!r}")
        if not self.alphabet or len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("alphabet must be non-empty with no repeated characters")

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.hop_length

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 1  # + blank

    def n_frames(self, num_samples: int) -> int:
        """Feature frames for ``num_samples`` at ``sample_rate``: ``ceil(N / hop)``."""
        return -(-num_samples // self.hop_length)



class CtcAsr(nn.Module):
    """Log-mel → stride-1 convs → BiGRU → linear CTC head (class 0 = blank)."""

    def __init__(self, config: AsrConfig = AsrConfig()) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = CharTokenizer(config.alphabet)
        self.mel = T.MelSpectrogram(config.sample_rate, n_fft=config.n_fft, hop_length=config.hop_length,
                                    n_mels=config.n_mels, center=False, power=2.0)
        self.register_buffer("feat_mean", torch.zeros(config.n_mels))
        self.register_buffer("feat_std", torch.ones(config.n_mels))
        convs, width = [], config.n_mels
        for _ in range(config.conv_layers):
            convs.append(nn.Conv1d(width, config.conv_channels, config.conv_kernel, padding=config.conv_kernel // 2))
            width = config.conv_channels
        self.convs = nn.ModuleList(convs)
        self.dropout = nn.Dropout(config.dropout)
        if config.encoder == "gru":
            self.rnn = nn.GRU(width, config.hidden, num_layers=config.layers, batch_first=True,
                              bidirectional=True, dropout=config.dropout if config.layers > 1 else 0.0)
            self.head = nn.Linear(2 * config.hidden, config.vocab_size)
        else:
            self.proj = nn.Linear(width, config.hidden)
            layer = nn.TransformerEncoderLayer(config.hidden, config.heads, config.ff_mult * config.hidden,
                                               config.dropout, activation="gelu", batch_first=True, norm_first=True)
            self.transformer = nn.TransformerEncoder(layer, config.layers, norm=nn.LayerNorm(config.hidden),
                                                     enable_nested_tensor=False)
            self.head = nn.Linear(config.hidden, config.vocab_size)

    # features ------------------------------------------------------------------------------------
    def log_mel(self, pcm: torch.Tensor) -> torch.Tensor:
        """``pcm [B, N]`` at 16 kHz → un-normalized log-mel ``[B, n_mels, ceil(N / hop)]``; frame
        ``t`` is centred on sample ``hop * t + hop / 2`` (zero padding on both sides)."""
        c = self.config
        n = pcm.shape[-1]
        frames = c.n_frames(n)
        if frames == 0:
            return pcm.new_zeros(pcm.shape[0], c.n_mels, 0)
        left = c.n_fft // 2 - c.hop_length // 2
        right = c.n_fft + (frames - 1) * c.hop_length - left - n
        mel = self.mel(F.pad(pcm, (left, right)))
        return torch.log(mel.clamp_min(1e-5))

    def features(self, pcm: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized log-mel ``[B, n_mels, T]`` (zero beyond each utterance's frames) and the
        frame counts ``[B]``. ``lengths``: samples of each row of a zero-padded batch."""
        if lengths is None:
            lengths = torch.full((pcm.shape[0],), pcm.shape[-1], dtype=torch.long)
        x = (self.log_mel(pcm) - self.feat_mean[:, None]) / self.feat_std[:, None]
        frame_lengths = -(-lengths // self.config.hop_length)
        return x * _mask(frame_lengths, x.shape[-1])[:, None, :], frame_lengths

    # network -------------------------------------------------------------------------------------
    def forward(self, feats: torch.Tensor, frame_lengths: torch.Tensor) -> torch.Tensor:
        """``feats [B, n_mels, T]`` → CTC log-probabilities ``[B, T, vocab]``."""
        mask = _mask(frame_lengths, feats.shape[-1])[:, None, :]
        x = feats
        for conv in self.convs:  # padded frames are zeroed after every layer, as at inference
            x = self.dropout(F.gelu(conv(x))) * mask
        x = x.transpose(1, 2)
        if self.config.encoder == "gru":
            packed = nn.utils.rnn.pack_padded_sequence(x, frame_lengths.cpu().clamp_min(1), batch_first=True,
                                                       enforce_sorted=False)
            out, _ = self.rnn(packed)
            x, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=feats.shape[-1])
        else:
            x = self.proj(x) + _sinusoids(x.shape[1], self.config.hidden)
            x = self.transformer(x, src_key_padding_mask=mask[:, 0] == 0)
        return self.head(self.dropout(x)).log_softmax(-1)

    @torch.inference_mode()
    def log_probs(self, pcm: torch.Tensor | np.ndarray, sample_rate: int) -> torch.Tensor:
        """Mono PCM (any rate) → ``[ceil(N16 / hop), vocab]`` log-probabilities (``N16``: samples
        after resampling to 16 kHz)."""
        x = _as_pcm(pcm)
        if sample_rate != self.config.sample_rate:
            x = AF.resample(x, sample_rate, self.config.sample_rate)
        was_training = self.training
        self.eval()
        try:
            feats, lengths = self.features(x[None])
            if feats.shape[-1] == 0:
                return feats.new_zeros(0, self.config.vocab_size)
            return self(feats, lengths)[0]
        finally:
            self.train(was_training)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # folders -------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        save_folder(path, self.config.to_dict(), self)

    @classmethod
    def from_folder(cls, path: str | Path) -> CtcAsr:
        model = cls(AsrConfig.read(path))
        load_weights(path, model)
        return model.eval()


def load_asr(path: str | Path) -> CtcAsr:
    return CtcAsr.from_folder(path)


def _sinusoids(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    out = torch.zeros(length, dim)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return out


def _mask(lengths: torch.Tensor, total: int) -> torch.Tensor:
    return (torch.arange(total)[None, :] < lengths[:, None]).float()


def _as_pcm(pcm: torch.Tensor | np.ndarray) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(pcm) if not isinstance(pcm, torch.Tensor) else pcm).float()
    if x.ndim != 1:
        raise ValueError(f"expected mono PCM [samples], got shape {tuple(x.shape)}")
    return x


# --- pure helpers: decoding, error rates, alignment --------------------------------------------

def greedy_ids(log_probs: torch.Tensor, blank: int = BLANK) -> list[int]:
    """Best class per frame, repeats collapsed, blanks dropped."""
    best = log_probs.argmax(-1).tolist()
    out, prev = [], None
    for k in best:
        if k != prev and k != blank:
            out.append(k)
        prev = k
    return out


def greedy_decode(log_probs: torch.Tensor, alphabet: str = DEFAULT_ALPHABET) -> str:
    """``[T, 1 + len(alphabet)]`` CTC scores → text (class 0 = blank, class i = ``alphabet[i-1]``)."""
    return CharTokenizer(alphabet).decode(greedy_ids(log_probs))


def cer(ref: str, hyp: str) -> float:
    """Character error rate: edits / ``len(ref)``. An empty reference gives ``len(hyp)`` (0 for
    an empty hypothesis) so that it never divides by zero."""
    return edit_distance(ref, hyp) / max(len(ref), 1)


def wer(ref: str, hyp: str) -> float:
    """Word error rate: word-level edits / reference words (empty reference as in :func:`cer`)."""
    r, h = ref.split(), hyp.split()
    return edit_distance(r, h) / max(len(r), 1)


def min_frames(targets: Sequence[int]) -> int:
    """Fewest frames a CTC path for ``targets`` needs: one per token + a blank between repeats."""
    return len(targets) + sum(a == b for a, b in zip(targets, targets[1:]))


def viterbi_align(log_probs: torch.Tensor, targets: Sequence[int], blank: int = BLANK) -> list[int]:
    """Best CTC path: the label (``blank`` or a target) of every frame. ``log_probs [T, C]``.

    States ``0..2L`` interleave blanks (even) and targets (odd); a state is entered from itself,
    the previous state, or (for a target unlike the one two back) skipping the blank between."""
    targets = list(targets)
    n_t, n_s = log_probs.shape[0], 2 * len(targets) + 1
    if not targets or n_t < min_frames(targets):
        raise ValueError(f"cannot align {len(targets)} tokens to {n_t} frames (need {min_frames(targets)})")
    labels = torch.tensor([blank if s % 2 == 0 else targets[s // 2] for s in range(n_s)])
    skip = torch.zeros(n_s, dtype=torch.bool)
    skip[3::2] = labels[3::2] != labels[1:-2:2]
    emit = log_probs.detach().float().cpu()[:, labels]  # [T, S]
    neg = torch.tensor(float("-inf"))
    score = torch.full((n_s,), float("-inf"))
    score[:2] = emit[0, :2]
    back = torch.zeros(n_t, n_s, dtype=torch.long)
    for t in range(1, n_t):
        stay = score
        step = torch.cat([neg[None], score[:-1]])
        jump = torch.where(skip, torch.cat([neg[None].expand(2), score[:-2]]), neg)
        cand = torch.stack([stay, step, jump])  # ties: stay, then step, then jump
        best, arg = cand.max(0)
        back[t] = arg
        score = best + emit[t]
    s = n_s - 1 if score[-1] >= score[-2] else n_s - 2
    path = [0] * n_t
    for t in range(n_t - 1, -1, -1):
        path[t] = int(labels[s])
        s -= int(back[t, s])
    return path


def _torchaudio_align(log_probs: torch.Tensor, targets: Sequence[int], blank: int) -> list[int] | None:
    """``torchaudio.functional.forced_align``'s path, or None where it is gone or fails."""
    fn = getattr(AF, "forced_align", None)
    if fn is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torchaudio 2.9
            emission = log_probs.detach().float().cpu().contiguous()[None]
            path, _ = fn(emission, torch.tensor([list(targets)], dtype=torch.int32), blank=blank)
        return path[0].tolist()
    except Exception:
        return None


def _merge_spans(path: Sequence[int], blank: int = BLANK) -> list[tuple[int, int]]:
    """``(start, end)`` frames of each token in a CTC path (repeats merged, blanks dropped); the
    same as ``torchaudio.functional.merge_tokens`` without the scores."""
    spans, start = [], 0
    for t in range(1, len(path) + 1):
        if t == len(path) or path[t] != path[start]:
            if path[start] != blank:
                spans.append((start, t))
            start = t
    return spans


def char_spans(log_probs: torch.Tensor, targets: Sequence[int], blank: int = BLANK,
               backend: str = "auto") -> list[tuple[int, int]]:
    """Forced alignment: ``(start, end)`` (end exclusive) of the frames each target token is
    emitted on, in order; blank frames belong to no token. ``backend``: "torchaudio",
    "viterbi" or "auto" (torchaudio when it works, else the Viterbi here)."""
    targets = list(targets)
    if blank in targets:
        raise ValueError("targets must not contain the blank id")
    if not targets or log_probs.shape[0] < min_frames(targets):
        raise ValueError(f"cannot align {len(targets)} characters to {log_probs.shape[0]} frames "
                         f"(need at least {min_frames(targets)}: the audio is too short for the text)")
    path = _torchaudio_align(log_probs, targets, blank) if backend in ("auto", "torchaudio") else None
    if path is None:
        if backend == "torchaudio":
            raise RuntimeError("torchaudio.functional.forced_align is not available")
        path = viterbi_align(log_probs, targets, blank)
    spans = _merge_spans(path, blank)
    if [path[s] for s, _ in spans] != targets:
        raise RuntimeError(f"alignment path does not spell the targets ({len(spans)} spans for {len(targets)} tokens)")
    return spans


def durations_from_spans(spans: Sequence[tuple[int, int]], n_frames: int) -> list[int]:
    """Per-token frame counts covering all ``n_frames``: each token owns its own frames plus the
    blank frames after it (up to the next token); blank frames before the first token go to the
    first token. Every token gets >= 1 frame; the sum is ``n_frames``."""
    if not spans:
        raise ValueError("no spans")
    starts = [0] + [s for s, _ in spans[1:]] + [n_frames]
    return [b - a for a, b in zip(starts, starts[1:])]


def ctc_durations(log_probs: torch.Tensor, targets: Sequence[int], blank: int = BLANK,
                  backend: str = "auto") -> list[int]:
    """Forced-alignment durations (frames per target token, summing to ``T``) from ``[T, C]``."""
    return durations_from_spans(char_spans(log_probs, targets, blank, backend), log_probs.shape[0])


def transcribe(model: CtcAsr, pcm: torch.Tensor | np.ndarray, sample_rate: int) -> str:
    """Greedy CTC transcript of mono PCM at any rate."""
    return model.tokenizer.decode(greedy_ids(model.log_probs(pcm, sample_rate)))


def align(model: CtcAsr, pcm: torch.Tensor | np.ndarray, sample_rate: int, text: str) -> list[int]:
    """Frames (50 Hz, ``ceil(N16 / 320)`` in all, the codec's count) spoken for each character of
    ``text`` (normalized, every character in the model's alphabet), by CTC forced alignment. Blank
    frames go to the preceding character (leading ones to the first): ``len(result) ==
    len(text)``, every entry >= 1, ``sum(result)`` = the frame count."""
    unknown = sorted(set(text) - set(model.config.alphabet))
    if unknown:
        raise ValueError(f"text has characters outside the ASR alphabet: {''.join(unknown)!r}")
    if not text:
        raise ValueError("nothing to align: empty text")
    return ctc_durations(model.log_probs(pcm, sample_rate), model.tokenizer.encode(text))


# --- data ----------------------------------------------------------------------------------------

@dataclass
class Utterance:
    id: str
    text: str
    pcm: torch.Tensor  # float32 at the model's rate
    ids: list[int]


def load_utterances(data_dir: Path, sample_rate: int, split: str, tokenizer: CharTokenizer,
                    hop_length: int = 320) -> list[Utterance]:
    """Every utterance of a split with its normalized text, resampled, in memory; utterances
    too short for their text (CTC needs a frame per character) are left out."""
    manifest = data_dir / "manifest.jsonl"
    if not manifest.is_file():
        raise FileNotFoundError(f"{data_dir}: no manifest.jsonl (make one with `voicespec train data`)")
    out = []
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("split", "train") != split:
            continue
        wav = data_dir / rec.get("wav", f"wav/{rec['id']}.wav")
        audio, sr = sf.read(str(wav), dtype="float32", always_2d=True)
        x = torch.from_numpy(audio.mean(axis=1))
        if sr != sample_rate:
            x = AF.resample(x, sr, sample_rate)
        ids = tokenizer.encode(rec["text"])
        if ids and -(-x.shape[0] // hop_length) >= min_frames(ids):
            out.append(Utterance(rec["id"], tokenizer.decode(ids), x, ids))
    if not out:
        raise ValueError(f"{data_dir}: no usable {split} utterances in the manifest")
    return out


def length_batches(lengths: Sequence[int], max_padded: int, rng: random.Random, jitter: float = 0.1) -> list[list[int]]:
    """One epoch of batches of indices: sorted by (jittered) length, grouped so that ``batch
    size x longest`` stays within ``max_padded`` (a longer single item gets its own batch), in
    random order."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] * (1 + jitter * (2 * rng.random() - 1)))
    batches, cur, longest = [], [], 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if cur and new_longest * (len(cur) + 1) > max_padded:
            batches.append(cur)
            cur, new_longest = [], lengths[i]
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def _pad(utts: Sequence[Utterance]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([u.pcm.shape[0] for u in utts])
    out = torch.zeros(len(utts), int(lengths.max()))
    for i, u in enumerate(utts):
        out[i, : u.pcm.shape[0]] = u.pcm
    return out, lengths


# --- training ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AsrTrainConfig:
    batch_seconds: float = 48.0  # padded audio per batch
    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup_steps: int = 150
    final_lr_frac: float = 0.05  # cosine over the time budget down to lr * this
    minutes: float = 60.0  # total training wall time across resumes
    checkpoint_every_s: float = 180.0
    eval_every_steps: int = 250
    log_every_steps: int = 25
    reload_every_steps: int = 2000
    eval_utterances: int = 64
    freq_masks: int = 2
    freq_mask_param: int = 15  # mel bins
    time_masks: int = 2
    time_mask_param: int = 10  # frames (200 ms)
    gain_db: tuple[float, float] = (-12.0, 3.0)
    noise_prob: float = 0.3  # white noise at 20-40 dB SNR on this fraction of utterances
    stats_utterances: int = 64  # for the feature normalization
    seed: int = 0
    threads: int = 0  # 0: torch's default


@torch.no_grad()
def _feature_stats(model: CtcAsr, utts: Sequence[Utterance]) -> tuple[torch.Tensor, torch.Tensor]:
    feats = torch.cat([model.log_mel(u.pcm[None])[0] for u in utts], dim=1)
    return feats.mean(1), feats.std(1).clamp_min(1e-3)


def _augment(wave: torch.Tensor, lengths: torch.Tensor, config: AsrTrainConfig, rng: random.Random) -> torch.Tensor:
    wave = wave.clone()
    for i in range(wave.shape[0]):
        n = int(lengths[i])
        wave[i, :n] *= 10 ** (rng.uniform(*config.gain_db) / 20)
        if rng.random() < config.noise_prob:
            rms = wave[i, :n].pow(2).mean().sqrt()
            noise = torch.randn(n) * rms * 10 ** (-rng.uniform(20, 40) / 20)
            wave[i, :n] += noise
    return wave


def _spec_augment(feats: torch.Tensor, frame_lengths: torch.Tensor, config: AsrTrainConfig) -> torch.Tensor:
    for _ in range(config.freq_masks):
        feats = T.FrequencyMasking(config.freq_mask_param, iid_masks=True)(feats)
    for _ in range(config.time_masks):
        feats = T.TimeMasking(config.time_mask_param, iid_masks=True)(feats)
    return feats * _mask(frame_lengths, feats.shape[-1])[:, None, :]


@torch.no_grad()
def evaluate(model: CtcAsr, utts: Sequence[Utterance], examples: int = 0) -> dict[str, Any]:
    """Held-out greedy CER/WER (pooled over utterances); ``examples``: (ref, hyp) pairs to include."""
    pairs = [(u.text, transcribe(model, u.pcm, model.config.sample_rate)) for u in utts]
    out: dict[str, Any] = corpus_error_rates(pairs)
    if examples:
        out["examples"] = [{"ref": r, "hyp": h} for r, h in pairs[:examples]]
    return out



def train_asr(data_dir: Path, out_dir: Path, config: AsrTrainConfig = AsrTrainConfig(),
              model_config: AsrConfig = AsrConfig(), log=print) -> Path:
    """Train (or resume) until ``config.minutes`` of total training time; export; return the
    exported folder ``out_dir/asr``. On resume the checkpoint's model config wins."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    run = TrainingRun(out_dir, config.seed, config.threads, config.checkpoint_every_s, log)
    if run.state is not None:
        model_config = AsrConfig.from_dict(run.state["asr_config"])
    model = CtcAsr(replace(model_config, extra={}))
    tokenizer = model.tokenizer
    train = load_utterances(data_dir, model_config.sample_rate, "train", tokenizer, model_config.hop_length)
    heldout = load_utterances(data_dir, model_config.sample_rate, "heldout", tokenizer,
                              model_config.hop_length)[: config.eval_utterances]
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    run.attach(model, opt, lambda: {"asr_config": model.config.to_dict(), "train_config": asdict(config)})
    if run.state is None:
        sample = run.rng.sample(train, min(len(train), config.stats_utterances))
        mean, std = _feature_stats(model, sample)
        model.feat_mean.copy_(mean)
        model.feat_std.copy_(std)
        log(f"new run: {model.n_params() / 1e6:.2f} M parameters, {len(train)} train / {len(heldout)} held-out "
            f"utterances ({sum(u.pcm.shape[0] for u in train) / model_config.sample_rate / 60:.1f} min of train audio)")
    max_padded = int(config.batch_seconds * model_config.sample_rate)
    batches: list[list[int]] = []
    model.train()
    while run.trained_s < config.minutes * 60:
        t0 = time.perf_counter()
        if not batches:
            batches = length_batches([u.pcm.shape[0] for u in train], max_padded, run.rng)
        utts = [train[i] for i in batches.pop()]
        wave, lengths = _pad(utts)
        wave = _augment(wave, lengths, config, run.rng)
        feats, frame_lengths = model.features(wave, lengths)
        feats = _spec_augment(feats, frame_lengths, config)
        log_probs = model(feats, frame_lengths)
        targets = torch.tensor([k for u in utts for k in u.ids])
        target_lengths = torch.tensor([len(u.ids) for u in utts])
        loss = F.ctc_loss(log_probs.transpose(0, 1), targets, frame_lengths, target_lengths, blank=BLANK,
                          zero_infinity=True)
        lr = config.lr * cosine_lr_factor(run.step, run.trained_s, config.warmup_steps, config.minutes,
                                          config.final_lr_frac)
        grad = run.update(loss, lr, t0)
        if run.step % config.log_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 2), "loss": loss.item(),
                        "grad_norm": grad, "lr": lr, "batch": len(utts)})
        if run.step % config.reload_every_steps == 0:  # the corpus may still be growing
            train = load_utterances(data_dir, model_config.sample_rate, "train", tokenizer, model_config.hop_length)
            batches = []
        if run.step % config.eval_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 2),
                        "heldout": evaluate(model, heldout, 2)})
            model.train()
        run.maybe_save()
    run.save()
    return export(out_dir, data_dir, heldout)


def export(out_dir: Path, data_dir: Path | None = None, heldout: Sequence[Utterance] | None = None) -> Path:
    """Write ``out_dir/asr`` (config.json + model.safetensors) from the checkpoint, with its
    provenance and held-out CER/WER in ``config.extra``."""
    state = torch.load(Path(out_dir) / "checkpoint.pt", map_location="cpu", weights_only=False)
    config = AsrConfig.from_dict(state["asr_config"])
    model = CtcAsr(config)
    model.load_state_dict(state["model"])
    model.eval()
    metrics = evaluate(model, heldout, 3) if heldout else {}
    extra = {
        "training": {"steps": state["step"], "trained_minutes": round(state["trained_s"] / 60, 1),
                     "hardware": hardware(),
                     "data": str(data_dir) if data_dir else None, "recipe": "voicespec train asr",
                     "train_config": state["train_config"], "parameters": model.n_params()},
        "heldout_metrics": metrics,
        "blank": "class 0 is the CTC blank (CharTokenizer's padding id); class i is alphabet[i - 1]",
    }
    model.config = replace(config, extra=extra)
    model.save(Path(out_dir) / "asr")
    return Path(out_dir) / "asr"


# --- command line --------------------------------------------------------------------------------

ENCODERS = {  # the command line's --encoder: about 2.3 M / 2.1 M parameters
    "gru": AsrConfig(),
    "transformer": AsrConfig(encoder="transformer", conv_channels=192, hidden=192, layers=4),
}


def add_asr_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="teacher corpus folder (from `voicespec train data`)")
    p.add_argument("--out", required=True, help="run folder: checkpoint, metrics, exported recognizer (OUT/asr)")
    p.add_argument("--minutes", type=float, default=AsrTrainConfig.minutes, help="total training time budget")
    p.add_argument("--batch-seconds", type=float, default=AsrTrainConfig.batch_seconds,
                   help="padded audio seconds per batch")
    p.add_argument("--lr", type=float, default=AsrTrainConfig.lr)
    p.add_argument("--eval-every", type=int, default=AsrTrainConfig.eval_every_steps, help="steps between held-out CER")
    p.add_argument("--encoder", choices=sorted(ENCODERS), default="gru",
                   help="bidirectional GRU (default) or transformer (about 2x faster per step on CPU); "
                        "a resumed run keeps its checkpoint's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)


def run_asr(args: argparse.Namespace) -> int:
    config = AsrTrainConfig(minutes=args.minutes, batch_seconds=args.batch_seconds, lr=args.lr,
                            eval_every_steps=args.eval_every, seed=args.seed, threads=args.threads)
    folder = train_asr(Path(args.data), Path(args.out), config, ENCODERS[args.encoder])
    metrics = CtcAsr.from_folder(folder).config.extra.get("heldout_metrics", {})
    print(f"exported {folder}" + (f" (held-out CER {metrics['cer']:.3f})" if "cer" in metrics else ""))
    return 0
