"""The multi-head codec LM for delay/parallel layouts, built from ``transformers`` parts.

A Llama backbone reads a text prefix (its own embedding) followed by codec steps, each step
embedded as the sum of K per-codebook embeddings; K linear heads predict the K tokens of the next
step. With ``track_positions > 0`` every step also carries a *frame-aligned text track* (the
character the predicted frame belongs to, the next one, and the frame's position inside its
character; :func:`voicespec.duration.frame_track`): the alignment is given, not learned by
attention, which a small model on a CPU budget cannot learn from minutes of speech. It is a ``PreTrainedModel``, so ``save_pretrained``/``from_pretrained`` give an HF-style
folder (``config.json`` + ``model.safetensors``), and it registers with the Auto classes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, LlamaConfig, LlamaModel, PretrainedConfig, PreTrainedModel

from .layout import DelayLayout, Prompt
from .lm import LMSession


class CodecLMConfig(PretrainedConfig):
    model_type = "voicespec_codec_lm"

    def __init__(
        self,
        text_vocab_size: int = 256,
        n_codebooks: int = 4,
        codebook_size: int = 1024,
        delays: list[int] | None = None,
        min_frames: int = 0,
        track_positions: int = 0,
        hidden_size: int = 256,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        num_key_value_heads: int | None = None,
        intermediate_size: int | None = None,
        max_position_embeddings: int = 4096,
        rope_theta: float = 10000.0,
        initializer_range: float = 0.02,
        **kwargs: Any,
    ) -> None:
        self.text_vocab_size = text_vocab_size
        self.n_codebooks = n_codebooks
        self.codebook_size = codebook_size
        self.delays = list(range(n_codebooks)) if delays is None else list(delays)
        self.min_frames = min_frames
        self.track_positions = track_positions
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads or num_attention_heads
        self.intermediate_size = intermediate_size or 4 * hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.initializer_range = initializer_range
        super().__init__(**kwargs)

    @property
    def layout(self) -> DelayLayout:
        return DelayLayout(self.n_codebooks, self.codebook_size, tuple(self.delays), self.min_frames)

    def backbone_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=1,  # inputs arrive as embeddings; the backbone's own table is unused
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            initializer_range=self.initializer_range,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )


class CodecLM(PreTrainedModel):
    config_class = CodecLMConfig
    base_model_prefix = "codec_lm"
    _supports_sdpa = True

    def __init__(self, config: CodecLMConfig) -> None:
        super().__init__(config)
        layout = config.layout
        self.n_codebooks = layout.n_codebooks
        self.head_vocab = layout.vocab_size
        self.backbone = LlamaModel(config.backbone_config())
        self.text_embed = nn.Embedding(config.text_vocab_size, config.hidden_size)
        self.code_embed = nn.Embedding(self.n_codebooks * self.head_vocab, config.hidden_size)
        self.heads = nn.Linear(config.hidden_size, self.n_codebooks * self.head_vocab, bias=False)
        if config.track_positions:
            self.track_units = nn.Embedding(2 * config.text_vocab_size, config.hidden_size)  # this, next
            self.track_pos = nn.Embedding(2 * config.track_positions, config.hidden_size)  # since, until
        self.post_init()

    @property
    def aligned(self) -> bool:
        return bool(self.config.track_positions)

    def get_output_embeddings(self) -> nn.Linear:
        return self.heads

    def embed_track(self, track: torch.Tensor) -> torch.Tensor:
        """``track [B, T, 4]`` (unit, next unit, frames since, frames until) to ``[B, T, D]``."""
        V, P = self.config.text_vocab_size, self.config.track_positions
        if int(track[..., :2].max()) >= V or int(track.min()) < 0 or int(track[..., 2:].max()) >= P:
            raise ValueError(f"track units must lie in [0, {V}) and positions in [0, {P})")
        units = self.track_units(track[..., :2] + torch.tensor([0, V], device=track.device)).sum(2)
        return units + self.track_pos(track[..., 2:] + torch.tensor([0, P], device=track.device)).sum(2)

    def embed(self, text_ids: torch.Tensor | None, codes: torch.Tensor | None,
              track: torch.Tensor | None = None) -> torch.Tensor:
        """``text_ids [B, S]`` and/or ``codes [B, T, K]`` (plus ``track [B, T, 4]`` for an aligned
        model) to input embeddings ``[B, S+T, D]``."""
        if self.aligned and codes is not None and codes.shape[1] and (track is None or track.shape[:2] != codes.shape[:2]):
            raise ValueError("an aligned codec LM needs a track row for every code step")
        parts = []
        if text_ids is not None and text_ids.shape[1]:
            if int(text_ids.max()) >= self.config.text_vocab_size or int(text_ids.min()) < 0:
                raise ValueError(f"text ids must lie in [0, {self.config.text_vocab_size})")
            parts.append(self.text_embed(text_ids))
        if codes is not None and codes.shape[1]:
            # Offsets computed here, not kept as a buffer: from_pretrained does not restore
            # non-persistent buffers it builds on the meta device.
            offsets = torch.arange(self.n_codebooks, device=codes.device) * self.head_vocab
            steps = self.code_embed(codes + offsets).sum(2)
            parts.append(steps + self.embed_track(track) if self.aligned else steps)
        return torch.cat(parts, dim=1)

    def forward(
        self,
        text_ids: torch.Tensor | None = None,
        codes: torch.Tensor | None = None,
        track: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool = False,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Any]:
        """Logits ``[B, S+T, K, V]`` for every input position, and the cache."""
        hidden = self.embed(text_ids, codes, track)
        out = self.backbone(inputs_embeds=hidden, cache=cache, use_cache=use_cache, **kwargs)
        h = out.last_hidden_state
        logits = self.heads(h).view(*h.shape[:2], self.n_codebooks, self.head_vocab)
        return logits, out.cache


AutoConfig.register(CodecLMConfig.model_type, CodecLMConfig)
AutoModel.register(CodecLMConfig, CodecLM)


END_ROW = (0, 0, 0, 0)  # the track past the last frame: no unit; the model learns EOS there


class CodecLMSession(LMSession):
    """A session over a :class:`CodecLM`; an aligned one feeds track row ``position - offset``
    with every step (``offset`` = prompt steps before the start step), END beyond the track."""

    def __init__(self, model: CodecLM, prefix: int = 0, track: torch.Tensor | None = None, offset: int = 0) -> None:
        super().__init__(model, prefix)
        # Rows by step position, built once: END before the offset; END past the end (see track_rows).
        self._rows = None if track is None else torch.cat([torch.tensor([END_ROW]).repeat(offset, 1), track])

    def track_rows(self, start: int, n: int) -> torch.Tensor | None:
        if self._rows is None:
            return None
        rows = self._rows[start: start + n]
        if rows.shape[0] < n:
            rows = torch.cat([rows, torch.tensor([END_ROW]).repeat(n - rows.shape[0], 1)])
        return rows.unsqueeze(0)

    def _logits(self, steps: torch.Tensor) -> torch.Tensor:
        track = self.track_rows(self.length, steps.shape[0])
        logits, _ = self.model(codes=steps.unsqueeze(0), track=track, cache=self.cache, use_cache=True)
        return logits[0]


class CodecStepLM:
    """The engine's view of a :class:`CodecLM`: delay/parallel layout, K tokens per step."""

    def __init__(self, model: CodecLM) -> None:
        self.model = model.eval()
        self.layout = model.config.layout

    def start(self, prompt: Prompt) -> CodecLMSession:
        if self.model.aligned and prompt.track is None:
            raise ValueError("this codec LM is conditioned on a frame-aligned text track; the prompt has none")
        if not self.model.aligned and prompt.track is not None:
            raise ValueError("this codec LM takes no frame-aligned track")
        track = None if prompt.track is None else torch.as_tensor(prompt.track, dtype=torch.long)
        session = CodecLMSession(self.model, prompt.text.numel(), track, offset=prompt.steps.shape[0] - 1)
        context = prompt.steps[:-1]
        if session.prefix or context.shape[0]:
            with torch.inference_mode():
                text, codes = prompt.text.unsqueeze(0), context.unsqueeze(0)
                rows = session.track_rows(0, context.shape[0])
                self.model(text_ids=text, codes=codes, track=rows, cache=session.cache, use_cache=True)
            session.length = context.shape[0]
        return session
