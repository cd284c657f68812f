"""Every recipe's settings and defaults, standard library only: the command line builds its parsers
(and shows these defaults) without importing torch; each recipe module reads its own from here."""

from __future__ import annotations

from dataclasses import dataclass

from voicespec.codec.config import CodecConfig

DEFAULT_HELDOUT_MOD = 50  # teacher corpus: ids with crc32(id) % N == 0 are held out (about 2 %)
DRAFT_NAME = "distilled"  # the shipped draft model's folder name under drafters/
FEATURES_CORPUS_SEED = 11  # `train features` without --run: the corpus grammar's seed for its prompts
ENCODERS = {  # ``train asr --encoder``: AsrConfig overrides; about 2.3 M / 2.1 M parameters
    "gru": {},
    "transformer": {"encoder": "transformer", "conv_channels": 192, "hidden": 192, "layers": 4},
}

# The codec a new ``train codec`` run builds.
DEFAULT_CODEC = CodecConfig(
    sample_rate=16000, n_filters=16, ratios=(8, 5, 4, 2), dimension=64, lstm=0, pad_mode="constant",
    n_q=4, n_codebooks=4, codebook_size=1024,
)


@dataclass(frozen=True)
class TrainConfig:
    segment_s: float = 1.0
    batch_size: int = 8
    lr: float = 5e-4
    minutes: float = 60.0  # total training wall time across resumes
    max_steps: int = 0  # > 0: also a step budget (total steps across resumes, as ``minutes``)
    checkpoint_every_s: float = 180.0
    eval_every_steps: int = 500
    reload_every_steps: int = 1000
    eval_clips: int = 24
    seed: int = 0
    threads: int = 0  # 0: torch's default
    decoder_only: bool = False  # freeze encoder + quantizer: the codes (and any LM trained on them) stay valid
    adversarial: bool = False  # decoder-only runs: + discriminators (train.discriminators), LSGAN + feature matching
    judged_s: float = 0.5  # adversarial: the last this-many seconds of each segment go to the discriminators
    recon_weight: float = 15.0  # adversarial: weight of the reconstruction losses (HiFi-GAN: 45 x its mel L1)
    fm_weight: float = 2.0
    warmup_steps: int = 200
    final_lr_frac: float = 0.1
    device: str = "auto"  # see ``train.common.pick_device``


@dataclass(frozen=True)
class AsrTrainConfig:
    batch_seconds: float = 48.0  # padded audio per batch
    lr: float = 1e-3
    weight_decay: float = 1e-2
    warmup_steps: int = 150
    final_lr_frac: float = 0.05  # cosine over the time budget down to lr * this
    minutes: float = 60.0  # total training wall time across resumes
    max_steps: int = 0  # > 0: also a step budget (total steps across resumes, as ``minutes``)
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


@dataclass(frozen=True)
class LMTrainConfig:
    batch_steps: int = 3000  # padded steps (frames) per batch
    lr: float = 1.5e-3
    weight_decay: float = 0.1
    dropout: float = 0.1  # on the input embeddings
    warmup_steps: int = 100
    final_lr_frac: float = 0.05
    minutes: float = 45.0  # total training wall time across resumes
    max_steps: int = 0  # > 0: also a step budget (a fast machine would otherwise overfit the corpus)
    checkpoint_every_s: float = 180.0
    eval_every_steps: int = 200
    log_every_steps: int = 25
    seed: int = 0
    threads: int = 0  # 0: torch's default
    device: str = "auto"  # see ``train.common.pick_device``


@dataclass(frozen=True)
class DurationTrainConfig:
    batch_size: int = 16  # utterances
    lr: float = 2e-3
    weight_decay: float = 1e-2
    warmup_steps: int = 50
    final_lr_frac: float = 0.05  # cosine over the time budget down to lr * this
    minutes: float = 3.0  # total training wall time across resumes
    max_steps: int = 0  # 0: no limit (the time budget alone stops training)
    checkpoint_every_s: float = 60.0
    eval_every_steps: int = 200
    log_every_steps: int = 50
    seed: int = 0
    threads: int = 0  # 0: torch's default
