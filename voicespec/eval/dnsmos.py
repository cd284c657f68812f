"""A judge of naturalness: Microsoft's DNSMOS (P.835 SIG/BAK/OVRL and P.808), the ONNX models
shipped inside the ``speechmos`` wheel (nothing is downloaded).

DNSMOS predicts the mean opinion score a panel would give a 16 kHz clip: SIG (the speech itself:
buzz, roughness, phasiness), BAK (background noise), OVRL (overall) and P.808's single overall
score. It was trained on human ratings of real recordings, not on our voice, so it is the fairest
cheap stand-in for listeners we have. ``speechmos`` imports ``librosa``, ``onnxruntime`` and
``requests`` without declaring them; the ``eval`` extra declares them. Clips shorter than the
model's 9 s window are tiled to fill it (the package's own convention).
"""

from __future__ import annotations

import numpy as np
import torch

from voicespec.eval.judge import pcm_at

DNSMOS_KEYS = ("ovrl", "sig", "bak", "p808")


def dnsmos(pcm: torch.Tensor | np.ndarray, sample_rate: int) -> dict[str, float]:
    """DNSMOS of one mono clip: ``{"ovrl", "sig", "bak", "p808"}`` (1-5, higher is better)."""
    try:
        from speechmos import dnsmos as model
    except ImportError as e:
        raise ImportError("the DNSMOS judge needs speechmos, librosa and onnxruntime: pip install -e '.[eval]'") from e
    x = pcm_at(pcm, sample_rate).clamp(-1, 1).numpy().astype(np.float64)
    if x.size == 0 or not np.any(x):
        raise ValueError("DNSMOS needs a non-silent clip")
    r = model.run(x, 16000)
    return {"ovrl": float(r["ovrl_mos"]), "sig": float(r["sig_mos"]), "bak": float(r["bak_mos"]),
            "p808": float(r["p808_mos"])}
