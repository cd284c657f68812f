"""Listening material for a trained codec: teacher vs resynthesis WAVs and their mel spectrograms
side by side in one PNG (``samples/``), from held-out clips the codec never trained on."""

from __future__ import annotations

from pathlib import Path

import torch
import torchaudio.functional as AF
import torchaudio.transforms as T

from voicespec.audio import write_audio_atomic
from voicespec.codec.model import Codec
from voicespec.eval.clips import heldout_clips


def write_codec_samples(codec: Codec, data_dir: Path, out_dir: Path, n: int = 3, prefix: str = "codec",
                        previous: Codec | None = None) -> Path:
    """``{prefix}-{id}-teacher.wav`` / ``-resynth.wav`` pairs and ``{prefix}-mels.png``; given the
    ``previous`` codec (the one a new decoder replaces), also ``-previous.wav`` and its mels, so
    the three can be heard and seen side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clips = heldout_clips(data_dir, n)
    if not clips:
        raise ValueError(f"{data_dir}: no held-out clips")
    mel = T.MelSpectrogram(codec.sample_rate, n_fft=1024, hop_length=256, n_mels=80)
    columns = [("teacher", "teacher", None), *([("previous", "previous codec", previous)] if previous else []),
               ("resynth", "codec resynthesis", codec)]
    fig, axes = plt.subplots(len(clips), len(columns), figsize=(6 * len(columns), 2.6 * len(clips)), squeeze=False)
    for row, (clip_id, text, audio, sr) in enumerate(clips):
        x = AF.resample(audio, sr, codec.sample_rate) if sr != codec.sample_rate else audio
        for col, (suffix, name, by) in enumerate(columns):
            sig = x if by is None else by.decode(by.encode(x))[: x.shape[0]]
            write_audio_atomic(out_dir / f"{prefix}-{clip_id}-{suffix}.wav", sig, codec.sample_rate)
            ax = axes[row][col]
            ax.imshow(torch.log(mel(sig) + 1e-5).numpy(), origin="lower", aspect="auto", cmap="magma")
            ax.set_title(f"{name}: {text[:60]}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.tight_layout()
    png = out_dir / f"{prefix}-mels.png"
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return png
