"""Discriminators and GAN losses for decoder training (``voicespec train codec --adversarial``).

Reconstruction losses alone teach the iSTFT decoder the magnitude envelope but leave its phase and
fine structure to chance: the result is intelligible and buzzy. Every small vocoder that sounds
natural adds an adversary; this is the pair Vocos uses on top of a frame-rate iSTFT generator:

* a multi-period discriminator (HiFi-GAN): the waveform folded by periods 2, 3, 5, 7, 11 and judged
  by 2-D convolutions along time, so it sees periodic (pitch) structure and phase;
* a multi-resolution discriminator (after UnivNet/Vocos): convolutions over log-magnitude
  spectrograms at three STFT sizes, so it sees the harmonic texture at several time/frequency
  trade-offs.

Losses are least-squares (LSGAN, as HiFi-GAN) plus feature matching (L1 between the discriminators'
intermediate activations on real and generated audio). Widths are far below HiFi-GAN's:
a 2-core CPU must afford thousands of steps. Training code only: the runtime never imports this.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.parametrizations import weight_norm

LEAK = 0.1
Features = list[torch.Tensor]


def _judge(convs: nn.ModuleList, post: nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, Features]:
    """Scores ``[B, n]`` and every layer's activations (for feature matching) of a conv stack."""
    features = []
    for conv in convs:
        h = F.leaky_relu(conv(h), LEAK)
        features.append(h)
    h = post(h)
    features.append(h)
    return h.flatten(1), features


class PeriodDiscriminator(nn.Module):
    """Waveform ``[B, 1, S]`` folded to ``[B, 1, S / p, p]`` and judged along the first axis."""

    def __init__(self, period: int, channels: tuple[int, ...]) -> None:
        super().__init__()
        self.period = period
        chans = (1, *channels)
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv2d(a, b, (5, 1), (3, 1), padding=(2, 0))) for a, b in zip(chans, chans[1:])
        )
        self.convs.append(weight_norm(nn.Conv2d(chans[-1], chans[-1], (5, 1), 1, padding=(2, 0))))
        self.post = weight_norm(nn.Conv2d(chans[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Features]:
        b, c, s = x.shape
        if s % self.period:
            x = F.pad(x, (0, self.period - s % self.period), mode="reflect")
        h = x.view(b, c, -1, self.period)
        return _judge(self.convs, self.post, h)


class ResolutionDiscriminator(nn.Module):
    """Log-magnitude STFT ``[B, bins, frames]`` of a waveform, judged by 1-D convolutions along time
    with the bins as channels. (UnivNet/Vocos use 2-D convolutions here; on a CPU, thin 2-D
    convolutions cost ten times more per step than this, for the same view of the spectrum.)"""

    def __init__(self, n_fft: int, channels: int) -> None:
        super().__init__()
        self.n_fft, self.hop = n_fft, n_fft // 4
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        chans = (n_fft // 2 + 1, channels, channels, channels)
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv1d(a, b, 5, dilation=d, padding=2 * d)) for a, b, d in zip(chans, chans[1:], (1, 2, 4))
        )
        self.post = weight_norm(nn.Conv1d(channels, 1, 3, padding=1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Features]:
        spec = torch.stft(x[:, 0], self.n_fft, self.hop, window=self.window, return_complex=True).abs()
        h = torch.log(spec.clamp_min(1e-5))  # [B, bins, frames]
        return _judge(self.convs, self.post, h)


@dataclass(frozen=True)
class DiscriminatorConfig:
    periods: tuple[int, ...] = (2, 3, 5, 7, 11)
    period_channels: tuple[int, ...] = (16, 32, 64, 128)
    resolutions: tuple[int, ...] = (256, 512, 1024)  # STFT sizes (hop a quarter of each)
    resolution_channels: int = 256


class Discriminators(nn.Module):
    """Every sub-discriminator of one config; ``forward(x)`` -> (scores, features), one entry each."""

    def __init__(self, config: DiscriminatorConfig = DiscriminatorConfig()) -> None:
        super().__init__()
        self.config = config
        self.subs = nn.ModuleList([
            *(PeriodDiscriminator(p, config.period_channels) for p in config.periods),
            *(ResolutionDiscriminator(n, config.resolution_channels) for n in config.resolutions),
        ])

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[Features]]:
        outs = [d(x) for d in self.subs]
        return [s for s, _ in outs], [f for _, f in outs]


# The three losses *sum* over sub-discriminators (and feature matching over their layers too), as
# HiFi-GAN does: averaging instead weakens the adversary against the reconstruction terms by about
# the number of terms, and the generator then barely leaves its reconstruction-only solution.

def discriminator_loss(real: list[torch.Tensor], fake: list[torch.Tensor]) -> torch.Tensor:
    """LSGAN: real scores pushed to 1, generated to 0."""
    return sum(torch.mean((1 - r) ** 2) + torch.mean(f ** 2) for r, f in zip(real, fake))


def generator_loss(fake: list[torch.Tensor]) -> torch.Tensor:
    """LSGAN: generated scores pushed to 1."""
    return sum(torch.mean((1 - f) ** 2) for f in fake)


def feature_matching_loss(real: list[Features], fake: list[Features]) -> torch.Tensor:
    """L1 between real (detached) and generated activations."""
    return sum(F.l1_loss(f, r.detach()) for r_maps, f_maps in zip(real, fake) for r, f in zip(r_maps, f_maps))


class Adversary:
    """The discriminators and their optimizer, as one decoder-training run uses them: one
    discriminator step per generator step, then the generator's adversarial and feature-matching
    terms. ``state_dict``/``state`` ride in the run's checkpoint, so a resumed run resumes both players."""

    def __init__(self, lr: float, device: torch.device, state: dict | None = None,
                 config: DiscriminatorConfig = DiscriminatorConfig()) -> None:
        self.disc = Discriminators(config).to(device)
        self.opt = torch.optim.AdamW(self.disc.parameters(), lr=lr, betas=(0.8, 0.99))
        if state is not None:
            self.disc.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])

    def discriminator_step(self, real: torch.Tensor, fake: torch.Tensor, lr: float) -> float:
        """One update on real and generated audio ``[B, 1, S]`` (``fake`` is detached here)."""
        self.disc.requires_grad_(True)
        real_scores, _ = self.disc(real)
        fake_scores, _ = self.disc(fake.detach())
        loss = discriminator_loss(real_scores, fake_scores)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.disc.parameters(), 1.0)
        self.opt.step()
        return float(loss.detach())

    def generator_terms(self, real: torch.Tensor, fake: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(adversarial loss, feature-matching loss) of ``fake``, differentiable in ``fake`` only."""
        self.disc.requires_grad_(False)
        with torch.no_grad():
            _, real_features = self.disc(real)
        fake_scores, fake_features = self.disc(fake)
        return generator_loss(fake_scores), feature_matching_loss(real_features, fake_features)

    def state_dict(self) -> dict:
        return {"model": self.disc.state_dict(), "optimizer": self.opt.state_dict()}
