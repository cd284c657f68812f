"""A small character CTC recognizer: the model, its folder, and greedy transcription.

Two jobs: CER of teacher audio, codec resynthesis and generated speech (:mod:`voicespec.eval.quality`,
``voicespec evaluate --asr``), and CTC forced alignment of characters to 50 Hz frames for the
training recipes. Training it is the CLI's ``train asr`` recipe.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torchaudio.functional as AF
import torchaudio.transforms as T
from torch import nn
from torch.nn import functional as F

from voicespec.folders import FolderConfig
from voicespec.weights import FolderModule
from voicespec.frontend.duration import length_mask
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



class CtcAsr(FolderModule):
    """Log-mel → stride-1 convs → BiGRU → linear CTC head (class 0 = blank)."""

    config_class = AsrConfig

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
        return x * length_mask(frame_lengths, x.shape[-1])[:, None, :], frame_lengths

    # network -------------------------------------------------------------------------------------
    def forward(self, feats: torch.Tensor, frame_lengths: torch.Tensor) -> torch.Tensor:
        """``feats [B, n_mels, T]`` → CTC log-probabilities ``[B, T, vocab]``."""
        mask = length_mask(frame_lengths, feats.shape[-1])[:, None, :]
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



def load_asr(path: str | Path) -> CtcAsr:
    return CtcAsr.from_folder(path)


def _sinusoids(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    out = torch.zeros(length, dim)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return out


def _as_pcm(pcm: torch.Tensor | np.ndarray) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(pcm) if not isinstance(pcm, torch.Tensor) else pcm).float()
    if x.ndim != 1:
        raise ValueError(f"expected mono PCM [samples], got shape {tuple(x.shape)}")
    return x


# --- greedy decoding -----------------------------------------------------------------------------

def greedy_ids(log_probs: torch.Tensor, blank: int = BLANK) -> list[int]:
    """Best class per frame, repeats collapsed, blanks dropped."""
    best = log_probs.argmax(-1).tolist()
    out, prev = [], None
    for k in best:
        if k != prev and k != blank:
            out.append(k)
        prev = k
    return out


def transcribe(model: CtcAsr, pcm: torch.Tensor | np.ndarray, sample_rate: int) -> str:
    """Greedy CTC transcript of mono PCM at any rate."""
    return model.tokenizer.decode(greedy_ids(model.log_probs(pcm, sample_rate)))
