"""The audio codec: ``encode(pcm) -> codes [K, T]`` and ``decode(codes) -> pcm`` over ``encodec``.

Two ways to get one: the pretrained EnCodec 24 kHz exactly as the ``encodec`` package fetches it
(needs network; never used in tests or CI), or a local folder (``config.json`` +
``model.safetensors``) holding a model built from ``encodec``'s own modules with other sizes — the
kind our default voice ships. ``Codec.random`` builds either architecture with random weights.
"""

from __future__ import annotations

from pathlib import Path


import torch
from encodec import EncodecModel
from encodec import modules as em
from encodec import quantization as eq

from voicespec.codec.config import CodecConfig
from voicespec.weights import SkippedRandomInit, load_weights, save_folder
from voicespec.codec.istft import IstftDecoder, IstftStream
from voicespec.codec.seanet import StreamingDecoder
from voicespec.codec.stream import CodecStream
from voicespec.frame_blocks import FrameBlocks


def build_encodec(config: CodecConfig) -> EncodecModel:
    """An ``EncodecModel`` from ``encodec``'s own modules (and our decoder if asked), sized by ``config``."""
    common = dict(
        channels=config.channels, dimension=config.dimension, n_filters=config.n_filters,
        n_residual_layers=config.n_residual_layers, ratios=list(config.ratios), norm=config.norm,
        causal=config.causal, pad_mode=config.pad_mode, lstm=config.lstm,
    )
    encoder = em.SEANetEncoder(**common)
    if config.decoder == "istft":
        decoder = IstftDecoder(config.dimension, config.hop_length, config.decoder_dim, config.decoder_layers,
                               config.decoder_overlap)
    else:
        decoder = em.SEANetDecoder(**common)
    quantizer = eq.ResidualVectorQuantizer(dimension=config.dimension, n_q=config.n_q, bins=config.codebook_size)
    bandwidths = [config.bandwidth(k) for k in range(1, config.n_q + 1)]
    model = EncodecModel(encoder, decoder, quantizer, bandwidths, config.sample_rate, config.channels, name="voicespec")
    model.set_target_bandwidth(config.bandwidth(config.n_codebooks))
    return model


class Codec:
    """Mono codec: PCM float32 in ``[-1, 1]`` at ``sample_rate`` <-> codes ``[K, T]``."""

    def __init__(self, model: EncodecModel, config: CodecConfig, device: str | torch.device = "cpu") -> None:
        self.config = config
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.model.set_target_bandwidth(config.bandwidth(config.n_codebooks))

    sample_rate = property(lambda self: self.config.sample_rate)
    frame_rate = property(lambda self: self.config.frame_rate)
    hop_length = property(lambda self: self.config.hop_length)
    n_codebooks = property(lambda self: self.config.n_codebooks)
    codebook_size = property(lambda self: self.config.codebook_size)

    @classmethod
    def random(cls, config: CodecConfig | None = None, seed: int = 0, device: str = "cpu") -> Codec:
        config = config or CodecConfig()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = build_encodec(config)
        return cls(model, config, device)

    @classmethod
    def pretrained_24khz(cls, n_codebooks: int = 8, device: str = "cpu") -> Codec:
        """Meta's EnCodec 24 kHz, downloaded by the ``encodec`` package (needs network)."""
        config = CodecConfig(n_codebooks=n_codebooks)
        return cls(EncodecModel.encodec_model_24khz(pretrained=True), config, device)

    @classmethod
    def from_folder(cls, path: str | Path, device: str = "cpu") -> Codec:
        """The codec saved in ``path``, built without drawing initial weights (as
        :meth:`~voicespec.weights.FolderModule.from_folder`), so loading does not move the caller's
        random stream (a seeded recipe that loads a codec, then draws a fresh decoder, draws the same
        decoder whether or not it loaded one first)."""
        config = CodecConfig.read(path)
        with SkippedRandomInit():
            model = build_encodec(config)
        load_weights(path, model)
        return cls(model, config, device)

    def save(self, path: str | Path) -> None:
        save_folder(path, self.config.to_dict(), self.model)

    @torch.inference_mode()
    def encode(self, pcm: torch.Tensor) -> torch.Tensor:
        """``pcm``: ``[samples]`` (mono) -> codes ``[K, ceil(samples / hop)]``."""
        x = torch.as_tensor(pcm, dtype=torch.float32, device=self.device).reshape(1, 1, -1)
        (codes, _), = self.model.encode(x)
        return codes[0].cpu()

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes ``[K, T]`` -> PCM ``[T * hop]`` (float32)."""
        codes = self._check_codes(codes)
        if codes.shape[1] == 0:
            return torch.zeros(0)
        return self.model.decode([(codes.unsqueeze(0).to(self.device), None)])[0, 0].cpu()

    def _check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        codes = torch.as_tensor(codes, dtype=torch.long)
        if codes.ndim != 2 or codes.shape[0] != self.n_codebooks:
            raise ValueError(f"codes must be [{self.n_codebooks}, T], got {tuple(codes.shape)}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise ValueError(f"codes must lie in [0, {self.codebook_size})")
        return codes

    def streaming_decoder(self, blocks: FrameBlocks | int = 1) -> CodecStream:
        """A stateful chunk-by-chunk decoder whose output equals one full ``decode``; it decodes
        frames in ``blocks`` (``CodecStream``; an int: blocks of that many)."""
        if self.config.decoder == "istft":
            return IstftStream(self, blocks)
        return StreamingDecoder(self, blocks)
