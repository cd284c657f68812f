"""The streaming codec decoder's contract (``CodecStream``: codes in, PCM out, chunk by chunk,
equal to one full decode), and the convolution step every streaming layer shares.

One base for every decoder architecture (SEANet in :mod:`.seanet`, the frame-rate iSTFT decoder in
:mod:`.istft`), so the synthesis pipeline never knows which one a voice uses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch
from torch.nn import functional as F

from voicespec.engine.work import Work, run_grouped
from voicespec.frame_blocks import FrameBlocks

if TYPE_CHECKING:
    from voicespec.codec.model import Codec

SMALL_CHUNK = 16  # output steps: shorter convolutions take the unfolded path in padded_conv1d


def rowwise_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` of ``x [B, n, I]`` -> ``[B, n, O]`` as one GEMM per batch row (a single batched
    call), so each row's result is bit for bit what it gives alone. One GEMM over all ``B·n`` rows
    picks its blocking by the row count: a session decoded beside others then rounded differently
    from the same session alone, ±1 LSB in its 16-bit audio."""
    w = weight.t().expand(x.shape[0], *weight.t().shape)  # [B, I, O], a view
    if bias is None:
        return torch.bmm(x, w)
    return torch.baddbmm(bias.expand(*x.shape[:2], bias.shape[0]), x, w)


def padded_conv1d(xp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dilation: int,
                  groups: int) -> torch.Tensor:
    """``F.conv1d`` of an already left-padded input ``xp [B, C_in, n + (k-1)·d]`` -> ``[B, C_out, n]``.

    A streaming chunk is a few frames, where ``F.conv1d`` takes a slow path on CPU (~0.3 ms per
    call for one frame); short inputs are computed from the unfolded window instead (im2col and
    one GEMM per batch row, :func:`rowwise_linear`; depthwise: a weighted sum), with the same result."""
    k = weight.shape[-1]
    n = xp.shape[-1] - (k - 1) * dilation
    depthwise = groups == xp.shape[1] == weight.shape[0] and groups > 1
    if n > SMALL_CHUNK or not (groups == 1 or depthwise):
        return F.conv1d(xp, weight, bias, dilation=dilation, groups=groups)
    cols = xp.unfold(-1, (k - 1) * dilation + 1, 1)[..., ::dilation]  # [B, C_in, n, k]
    if groups == 1:
        cols = cols.transpose(1, 2).reshape(xp.shape[0], n, -1)  # [B, n, C_in * k]
        return rowwise_linear(cols, weight.reshape(weight.shape[0], -1), bias).transpose(1, 2)
    y = (cols * weight[:, 0, None, :]).sum(-1)  # depthwise: [B, C, n]
    return y if bias is None else y + bias[:, None]


class CodecStream:
    """Decode codes ``[K, n]`` chunk by chunk into PCM equal to one full ``codec.decode``.

    ``push(codes)`` returns the new PCM (float32, CPU; empty while warming up), ``flush()`` ends
    the utterance and returns whatever was held back, ``reset()`` starts a new utterance.
    ``samples_out`` counts the samples emitted in the current utterance; ``warmup_frames`` is how
    many frames go in before the first output: they are queued until then, and an utterance
    shorter than that is decoded whole on ``flush()`` (exact by definition). After ``flush()`` the
    stream is closed: ``push`` raises until ``reset()``. Subclasses (one per decoder
    architecture) say how a chunk decodes (``_push``, never before the warm-up is complete) and
    what ``flush`` still owes (``_flush``).

    ``blocks``: frames are decoded in the blocks of this :class:`~voicespec.frame_blocks.FrameBlocks`
    (an int n: blocks of exactly n; the first block at least the warm-up), so a call's cost is shared
    by several frames (it is mostly reading the decoder's weights: on a CPU eight frames cost little
    more than two), at up to a block less one of extra latency; growing blocks keep the first audio
    as early as the first block allows. Blocks whose sizes depend only on their place also make the
    PCM bit for bit independent of how the frames arrived (a chunk's float sums depend on its
    length): a seed gives the same file whatever γ the controller chose. The output equals the
    full decode either way, up to float rounding.
    """

    warmup_frames = 1

    def __init__(self, codec: Codec, blocks: FrameBlocks | int = 1) -> None:
        self.codec = codec
        self.device = codec.device
        self.hop = codec.hop_length
        self.blocks = blocks if isinstance(blocks, FrameBlocks) else FrameBlocks(blocks)

    def reset(self) -> None:
        """Forget the current utterance: the next ``push`` starts a new one."""
        self._closed = False
        self._queue: list[torch.Tensor] = []
        self._queued = 0
        self._block = 0  # blocks decoded in this utterance
        self.frames_in = 0
        self.samples_out = 0
        self._reset()

    def _admit(self, codes: torch.Tensor) -> list[torch.Tensor]:
        """Queue ``codes [K, n]``; the blocks to decode now, in order (none while the queue is short)."""
        if self._closed:
            raise RuntimeError("utterance already flushed: call reset() before pushing a new one")
        codes = self.codec._check_codes(codes)
        self.frames_in += codes.shape[1]
        self._queue.append(codes)
        self._queued += codes.shape[1]
        blocks = []
        while True:
            size = self.blocks.size(self._block) if self._block else max(self.blocks.size(0), self.warmup_frames)
            if self._queued < size:
                return blocks
            self._block += 1
            queued = self._take()
            blocks.append(queued[:, :size])
            if queued.shape[1] > size:
                self._queue, self._queued = [queued[:, size:]], queued.shape[1] - size

    @torch.inference_mode()
    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes ``[K, n]`` (n >= 0) -> the PCM ``[m]`` they complete (``m == n * hop`` once warm)."""
        return type(self).push_many([self], [codes])[0]

    @classmethod
    def push_many(cls, streams: list[CodecStream], codes: list[torch.Tensor]) -> list[torch.Tensor]:
        """:meth:`push` of ``codes[i]`` into ``streams[i]`` for each i; a subclass whose decoder
        takes a batch decodes the streams that are ready in one call."""
        out = []
        with torch.inference_mode():
            for stream, c in zip(streams, codes):
                pcm = [stream._push(block) for block in stream._admit(c)]
                out.append(stream._emit(torch.cat(pcm)) if pcm else torch.zeros(0))
        return out

    @torch.inference_mode()
    def flush(self) -> torch.Tensor:
        """End of utterance: the PCM still held back."""
        if self._closed:
            return torch.zeros(0)
        self._closed = True
        if not self._block:  # shorter than the warm-up (or empty): decode it whole
            return self._emit(self.codec.decode(self._take()) if self._queued else torch.zeros(0))
        head = self._push(self._take()) if self._queued else torch.zeros(0)
        return self._emit(torch.cat([head.float().cpu(), self._flush().float().cpu()]))

    def _take(self) -> torch.Tensor:
        codes = self._queue[0] if len(self._queue) == 1 else torch.cat(self._queue, dim=1)
        self._queue, self._queued = [], 0
        return codes

    def _latents(self, codes: torch.Tensor) -> torch.Tensor:
        return self.codec.model.quantizer.decode(codes.to(self.device).unsqueeze(1))  # [K,1,n] -> [1,D,n]

    def _emit(self, pcm: torch.Tensor) -> torch.Tensor:
        pcm = pcm.float().cpu()
        self.samples_out += pcm.shape[0]
        return pcm

    def _reset(self) -> None:
        raise NotImplementedError

    def _push(self, codes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _flush(self) -> torch.Tensor:
        raise NotImplementedError


@dataclass(eq=False)
class CodecPush(Work):
    """A session's verified frames ``codes [K, n]`` for its stream; the result is
    ``finish(pcm, seconds)``: what the session makes of the PCM they complete (its audio chunk),
    given its share of the codec time. Streams of one decoder run as one batch (``push_many``).
    Deferrable: nothing in the session's decoding waits for it, so a scheduler may run it on
    another thread and deliver the result from there."""

    stream: CodecStream
    codes: torch.Tensor
    finish: Callable[[torch.Tensor, float], Any]
    deferrable: ClassVar[bool] = True

    @classmethod
    def run(cls, works: list[CodecPush]) -> list[Any]:
        t = time.perf_counter()
        pcm = run_grouped(works, lambda w: type(w.stream),
                          lambda group: type(group[0].stream).push_many([w.stream for w in group], [w.codes for w in group]))
        share = (time.perf_counter() - t) / len(works)
        return [w.finish(p, share) for w, p in zip(works, pcm)]


@dataclass(eq=False)
class CodecFlush(Work):
    """The end of a session's waveform: ``finish(stream.flush(), seconds)``. Deferrable, and
    ordered after the session's pushes wherever they run."""

    stream: CodecStream
    finish: Callable[[torch.Tensor, float], Any]
    deferrable: ClassVar[bool] = True

    @classmethod
    def run(cls, works: list[CodecFlush]) -> list[Any]:
        out = []
        for w in works:
            t = time.perf_counter()
            pcm = w.stream.flush()
            out.append(w.finish(pcm, time.perf_counter() - t))
        return out
