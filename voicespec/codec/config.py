"""A codec's architecture as a dataclass (standard library only: the CLI shows its defaults without
importing torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from voicespec.folders import FolderConfig

CODEC_TYPE = "voicespec_encodec"
DECODERS = ("seanet", "istft")


@dataclass(frozen=True)
class CodecConfig(FolderConfig):
    """Architecture of an EnCodec-style codec. Defaults are the pretrained 24 kHz model's.

    ``n_q``: codebooks the quantizer holds; ``n_codebooks``: how many of them the codec uses
    (EnCodec's bandwidth setting), i.e. the K the codec LM sees. The encoder and quantizer are
    always encodec's; the decoder is encodec's SEANet or our frame-rate ``IstftDecoder``.
    """

    TYPE_KEY: ClassVar[str] = "codec_type"
    TYPE: ClassVar[str] = CODEC_TYPE
    WHAT: ClassVar[str] = "a voicespec codec"

    sample_rate: int = 24000
    channels: int = 1
    n_filters: int = 32
    ratios: tuple[int, ...] = (8, 5, 4, 2)
    dimension: int = 128
    n_residual_layers: int = 1
    lstm: int = 2
    causal: bool = True
    norm: str = "weight_norm"
    pad_mode: str = "reflect"
    n_q: int = 32
    codebook_size: int = 1024
    n_codebooks: int = 8
    decoder: str = "seanet"  # "seanet": encodec's SEANetDecoder; "istft": voicespec.codec.istft
    decoder_dim: int = 256  # istft decoder only: width, ConvNeXt blocks, window length in hops
    decoder_layers: int = 8
    decoder_overlap: int = 2
    extra: dict[str, Any] = field(default_factory=dict)  # provenance: data, training, metrics

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratios", tuple(int(r) for r in self.ratios))
        if not 1 <= self.n_codebooks <= self.n_q:
            raise ValueError(f"n_codebooks must be in 1..n_q={self.n_q}, got {self.n_codebooks}")
        if 2 ** int(math.log2(self.codebook_size)) != self.codebook_size:
            raise ValueError(f"codebook_size must be a power of two, got {self.codebook_size}")
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {DECODERS}, got {self.decoder!r}")

    @property
    def hop_length(self) -> int:
        return math.prod(self.ratios)

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.hop_length

    def bandwidth(self, n_codebooks: int) -> float:
        """EnCodec's kbps for ``n_codebooks`` (what ``set_target_bandwidth`` takes)."""
        return n_codebooks * math.log2(self.codebook_size) * math.ceil(self.frame_rate) / 1000
