"""Character durations: the frame-aligned text track and a small duration predictor.

The default voice's codec LM is conditioned on a *frame-aligned text track*: every 50 Hz codec
frame carries the character it belongs to (:func:`frame_track`). Training durations come from CTC
forced alignment with the recognizer of :mod:`voicespec.eval.recognizer`; at run time
:class:`DurationModel` supplies them from text alone.

Model: character embedding → a few stride-1 Conv1d layers (kernel 5, ReLU, LayerNorm, dropout; a
receptive field of a few characters each side) → one bidirectional GRU (whole-sentence context:
phrase-final lengthening, speaking-rate drift) → a linear head predicting ``log(1 + frames)`` per
character. The log target keeps long pauses (commas, sentence ends) from dominating the loss.
:meth:`DurationModel.predict` turns the continuous prediction into integer frames by *cumulative
rounding*, so the total is the rounded total and rounding errors never accumulate along the text.

Saved as a folder (:mod:`voicespec.folders`): ``config.json`` (``model_type`` checked on load,
provenance and held-out metrics in ``extra``) + ``model.safetensors``. Training it (the CLI's
``train duration``) is a recipe of the training package.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from voicespec.folders import FolderConfig
from voicespec.weights import FolderModule
from voicespec.frontend.text import DEFAULT_ALPHABET

MODEL_TYPE = "voicespec_duration"


# --- frame-aligned text track --------------------------------------------------------------------

def frame_track(unit_ids: Sequence[int], durations: Sequence[int], max_pos: int) -> torch.Tensor:
    """Per-frame conditioning ``[sum(durations), 4]`` (long): for each frame, the id of the unit
    (character) it belongs to, the id of the next unit that has frames (0 after the last), frames
    since the unit's first frame and frames until its last frame (both clamped to ``max_pos - 1``).

    Units with 0 frames do not appear (not even as a "next" id): the LM never sees them spoken.
    E.g. ids ``[5, 6, 7]``, durations ``[2, 0, 1]`` → rows ``[5, 7, 0, 1], [5, 7, 1, 0], [7, 0, 0, 0]``.
    """
    ids, durs = non_negative_ints(unit_ids, "unit_ids"), non_negative_ints(durations, "durations")
    if len(ids) != len(durs):
        raise ValueError(f"unit_ids and durations differ in length ({len(ids)} vs {len(durs)})")
    if isinstance(max_pos, bool) or not isinstance(max_pos, int) or max_pos < 1:
        raise ValueError(f"max_pos must be a positive integer, got {max_pos!r}")
    kept = [(u, d) for u, d in zip(ids, durs) if d > 0]
    if not kept:
        return torch.zeros(0, 4, dtype=torch.long)
    units = torch.tensor([u for u, _ in kept], dtype=torch.long)
    lengths = torch.tensor([d for _, d in kept], dtype=torch.long)
    starts = torch.cumsum(lengths, 0) - lengths
    owner = torch.repeat_interleave(torch.arange(len(kept)), lengths)
    t = torch.arange(int(lengths.sum()))
    since = t - starts[owner]
    until = starts[owner] + lengths[owner] - 1 - t
    following = torch.cat([units[1:], units.new_zeros(1)])
    return torch.stack([units[owner], following[owner], since.clamp_max(max_pos - 1),
                        until.clamp_max(max_pos - 1)], dim=1)


def non_negative_ints(values: Sequence[int] | torch.Tensor, name: str) -> list[int]:
    """``values`` as a list of non-negative Python ints (numpy/torch integers welcome; floats
    and bools are not)."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    out = []
    for v in values:
        try:
            if isinstance(v, bool):
                raise TypeError
            i = operator.index(v)
        except TypeError:
            raise ValueError(f"{name} must be non-negative integers, got {v!r}") from None
        if i < 0:
            raise ValueError(f"{name} must be non-negative integers, got {v!r}")
        out.append(i)
    return out


def cumulative_round(values: Sequence[float]) -> list[int]:
    """Non-negative reals → integers whose running sums are the rounded running sums (half up),
    so the total is ``round(sum(values))`` and no rounding error builds up along the sequence."""
    out, prev, running = [], 0, 0.0
    for v in values:
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"values must be finite and non-negative, got {v!r}")
        running += v
        cur = math.floor(running + 0.5)
        out.append(cur - prev)
        prev = cur
    return out


# --- model ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DurationConfig(FolderConfig):
    TYPE: ClassVar[str] = MODEL_TYPE
    WHAT: ClassVar[str] = "a voicespec duration"

    alphabet: str = DEFAULT_ALPHABET  # ids are CharTokenizer(alphabet) ids: 1..len, 0 = padding
    units: int = 0  # > 0: ids are 1..units of another tokenizer (phonemes); the alphabet is then unused
    embed_dim: int = 128
    conv_channels: int = 128
    conv_layers: int = 3
    conv_kernel: int = 5
    hidden: int = 64  # GRU units per direction
    dropout: float = 0.2
    frame_rate: float = 50.0  # frames per second the durations count
    extra: dict[str, Any] = field(default_factory=dict)  # provenance: data, training, metrics

    def __post_init__(self) -> None:
        if self.conv_kernel % 2 != 1:
            raise ValueError(f"conv_kernel must be odd (stride-1 'same' convolution), got {self.conv_kernel}")
        if not self.alphabet or len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("alphabet must be non-empty with no repeated characters")
        if min(self.embed_dim, self.conv_channels, self.hidden) < 1 or self.conv_layers < 0:
            raise ValueError("embed_dim, conv_channels and hidden must be positive, conv_layers >= 0")
        if not self.frame_rate > 0:
            raise ValueError(f"frame_rate must be positive, got {self.frame_rate}")

    @property
    def vocab_size(self) -> int:
        return (self.units or len(self.alphabet)) + 1  # + padding


class DurationModel(FolderModule):
    """Character ids → predicted ``log(1 + frames)`` per character."""

    config_class = DurationConfig

    def __init__(self, config: DurationConfig = DurationConfig()) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=0)
        convs, norms, width = [], [], config.embed_dim
        for _ in range(config.conv_layers):
            convs.append(nn.Conv1d(width, config.conv_channels, config.conv_kernel, padding=config.conv_kernel // 2))
            norms.append(nn.LayerNorm(config.conv_channels))
            width = config.conv_channels
        self.convs, self.norms = nn.ModuleList(convs), nn.ModuleList(norms)
        self.dropout = nn.Dropout(config.dropout)
        self.rnn = nn.GRU(width, config.hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * config.hidden, 1)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``ids [B, N]`` (0-padded; ``lengths [B]`` real lengths, default ``N``) → ``[B, N]``
        predicted ``log(1 + frames)``, 0 at padded positions."""
        if lengths is None:
            lengths = torch.full((ids.shape[0],), ids.shape[1], dtype=torch.long)
        mask = length_mask(lengths, ids.shape[1])[:, :, None]
        x = self.embed(ids) * mask
        for conv, norm in zip(self.convs, self.norms):  # padding re-zeroed so it never leaks in
            x = self.dropout(norm(F.relu(conv(x.transpose(1, 2)).transpose(1, 2)))) * mask
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu().clamp_min(1), batch_first=True,
                                                   enforce_sorted=False)
        out, _ = self.rnn(packed)
        x, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        return self.head(self.dropout(x))[..., 0] * mask[..., 0]

    def check_ids(self, ids: Sequence[int]) -> list[int]:
        """``ids`` as Python ints, each a character id ``1..vocab_size-1``."""
        out = non_negative_ints(ids, "character ids")
        bad = [i for i in out if not 1 <= i < self.config.vocab_size]
        if bad:
            raise ValueError(f"character ids must be in 1..{self.config.vocab_size - 1}, got {bad[0]}")
        return out

    @torch.inference_mode()
    def frames(self, ids: Sequence[int]) -> list[float]:
        """Predicted (continuous, non-negative) frames per character at rate 1."""
        ids = self.check_ids(ids)
        if not ids:
            return []
        was_training = self.training
        self.eval()
        try:
            log1p = self(torch.tensor([ids], dtype=torch.long))[0]
        finally:
            self.train(was_training)
        return torch.expm1(log1p.double()).clamp_min(0).tolist()

    def predict(self, ids: Sequence[int], rate: float = 1.0) -> list[int]:
        """Integer frames per character (``len(ids)`` entries) by cumulative rounding of the
        predicted durations divided by ``rate`` (> 1 speaks faster). Non-empty text always gets
        at least one frame (on its longest character) so there is something to synthesize."""
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"rate must be a positive finite number, got {rate!r}")
        frames = [f / rate for f in self.frames(ids)]
        out = cumulative_round(frames)
        if frames and sum(out) == 0:
            out[max(range(len(frames)), key=frames.__getitem__)] = 1
        return out



def load_duration(path: str | Path) -> DurationModel:
    return DurationModel.from_folder(path)


def length_mask(lengths: torch.Tensor, total: int) -> torch.Tensor:
    """``[B, total]`` float mask: 1 at the first ``lengths[b]`` positions of row ``b``, 0 after."""
    return (torch.arange(total)[None, :] < lengths[:, None]).float()
