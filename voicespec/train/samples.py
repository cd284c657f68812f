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


def write_codec_samples(codec: Codec, data_dir: Path, out_dir: Path, n: int = 3, prefix: str = "codec") -> Path:
    """``{prefix}-{id}-teacher.wav`` / ``-resynth.wav`` pairs and ``{prefix}-mels.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clips = heldout_clips(data_dir, n)
    if not clips:
        raise ValueError(f"{data_dir}: no held-out clips")
    mel = T.MelSpectrogram(codec.sample_rate, n_fft=1024, hop_length=256, n_mels=80)
    fig, axes = plt.subplots(len(clips), 2, figsize=(12, 2.6 * len(clips)), squeeze=False)
    for row, (clip_id, text, audio, sr) in enumerate(clips):
        x = AF.resample(audio, sr, codec.sample_rate) if sr != codec.sample_rate else audio
        y = codec.decode(codec.encode(x))[: x.shape[0]]
        write_audio_atomic(out_dir / f"{prefix}-{clip_id}-teacher.wav", x, codec.sample_rate)
        write_audio_atomic(out_dir / f"{prefix}-{clip_id}-resynth.wav", y, codec.sample_rate)
        for col, (sig, name) in enumerate(((x, "teacher"), (y, "codec resynthesis"))):
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
