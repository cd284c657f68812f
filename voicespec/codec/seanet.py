"""Streaming decoding for the SEANet decoder (``StreamingDecoder``, a
:class:`~voicespec.codec.stream.CodecStream`; the frame-rate decoder's is ``istft.IstftStream``).

``EncodecModel.decode`` is causal but stateless: to decode frames as a codec LM produces them one
would re-decode a context window for every chunk. ``StreamingDecoder`` instead mirrors the
decoder's layers with stateful counterparts that carry exactly the state each layer needs between
chunks, so each ``push`` costs work proportional to the chunk and the concatenated output equals
one full ``Codec.decode`` of all the codes (up to float rounding; see tests/codec/test_seanet.py):

* quantizer: per frame, stateless (``quantizer.decode`` of the chunk's codes);
* causal ``SConv1d`` (stride 1): keeps the last ``padding_total`` samples of its (padded) input;
* causal ``SConvTranspose1d`` (``trim_right_ratio`` 1): runs the transposed conv without bias,
  adds the overlap carried from the previous chunk (``kernel - stride`` samples) to its start,
  emits ``n * stride`` samples (+ bias) and carries the rest;
* ``SLSTM``: carries ``(h, c)``, keeps its skip connection;
* ``SEANetResnetBlock``: streams its ``block`` and its ``shortcut`` side by side;
* pointwise activations (ELU, ...): applied directly.

Left padding. With ``pad_mode='constant'`` every layer pads with zeros: truly causal, the first
frame decodes at once. With ``pad_mode='reflect'`` (the pretrained 24 kHz model) a full decode
reflects the first samples of each layer's input, so the first output samples depend on a few
later frames. To stay exact the decoder holds back the first ``warmup_frames`` frames (computed
from the layers: enough that each layer's first chunk is longer than its left padding), then
applies each layer's own padding to that first chunk just as the full decode does and streams from
there. ``flush()`` on an utterance shorter than that falls back to the normal full decode.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from encodec.modules.conv import SConv1d, SConvTranspose1d, pad1d
from encodec.modules.lstm import SLSTM
from encodec.modules.seanet import SEANetResnetBlock
from torch import nn
from torch.nn import functional as F

from voicespec.codec.stream import CodecStream, padded_conv1d

if TYPE_CHECKING:
    from voicespec.frame_blocks import FrameBlocks
    from voicespec.codec.model import Codec

# Modules that act on each time step independently: streamable as they are.
POINTWISE = (
    nn.Identity, nn.ELU, nn.ReLU, nn.LeakyReLU, nn.PReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid,
    nn.Hardtanh, nn.Softplus, nn.Mish,
)
PAD_MODES = ("constant", "reflect", "replicate")
NORMS = ("none", "weight_norm")


class _Stage:
    """One streamed layer: ``step`` maps a chunk ``[1, C, L]`` (L >= 1) to its output chunk."""

    def step(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reset(self) -> None:
        pass


class _Pointwise(_Stage):
    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


class _Sequence(_Stage):
    def __init__(self, stages: list[_Stage]) -> None:
        self.stages = stages

    def step(self, x: torch.Tensor) -> torch.Tensor:
        for s in self.stages:
            x = s.step(x)
        return x

    def reset(self) -> None:
        for s in self.stages:
            s.reset()


class _Conv(_Stage):
    """Causal stride-1 ``SConv1d``: the first chunk gets the layer's own left padding, later
    chunks get the last ``padding_total`` samples of the padded input seen so far."""

    def __init__(self, layer: SConv1d, where: str) -> None:
        conv = layer.conv.conv
        if not layer.causal:
            raise ValueError(f"{where}: non-causal SConv1d cannot be streamed")
        if conv.stride[0] != 1:
            raise ValueError(f"{where}: SConv1d with stride {conv.stride[0]} is not supported (decoder convs have stride 1)")
        if conv.padding[0] != 0 or conv.padding_mode != "zeros":
            raise ValueError(f"{where}: inner Conv1d must not pad by itself")
        _check_norm(layer.conv.norm_type, where)
        if layer.pad_mode not in PAD_MODES:
            raise ValueError(f"{where}: pad_mode {layer.pad_mode!r} not supported (one of {PAD_MODES})")
        self.layer, self.conv = layer, conv
        self.pad = (conv.kernel_size[0] - 1) * conv.dilation[0]
        self.state: torch.Tensor | None = None
        self.started = False

    def min_first_chunk(self) -> int:
        """Input samples the first chunk needs for its padding to equal the full decode's."""
        return self.pad + 1 if self.layer.pad_mode == "reflect" and self.pad else 1

    def refresh(self) -> None:
        self.weight, self.bias = _current_weights(self.conv)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        if self.pad and not self.started:
            assert x.shape[-1] >= self.min_first_chunk(), "warm-up too short for reflect padding"
            xp = pad1d(x, (self.pad, 0), mode=self.layer.pad_mode)
            self.started = True
        elif self.pad:
            xp = torch.cat([self.state, x], dim=-1)
        else:
            xp = x
        if self.pad:
            self.state = xp[..., -self.pad:]
        return padded_conv1d(xp, self.weight, self.bias, self.conv.dilation[0], self.conv.groups)

    def reset(self) -> None:
        self.state, self.started = None, False
        self.refresh()


class _ConvTranspose(_Stage):
    """Causal ``SConvTranspose1d`` trimming all its padding on the right: overlap-add across chunks.

    Written as one matmul per chunk (``[n, C_in] x [C_in, C_out * kernel]``, the layout CPU BLAS
    handles well for tiny ``n``; ``F.conv_transpose1d`` takes a slow path there) followed by an
    overlap-add of ``m = ceil(kernel / stride)`` blocks of ``stride`` samples; the last ``m - 1``
    blocks are incomplete and carried to the next chunk (bias is added once, on emission)."""

    def __init__(self, layer: SConvTranspose1d, where: str) -> None:
        convtr = layer.convtr.convtr
        if not layer.causal:
            raise ValueError(f"{where}: non-causal SConvTranspose1d cannot be streamed")
        k, s = convtr.kernel_size[0], convtr.stride[0]
        if math.ceil((k - s) * layer.trim_right_ratio) != k - s:
            raise ValueError(f"{where}: trim_right_ratio {layer.trim_right_ratio} != 1 is not supported")
        if convtr.padding[0] or convtr.output_padding[0] or convtr.dilation[0] != 1 or convtr.groups != 1 or k < s:
            raise ValueError(f"{where}: only plain transposed convs (no padding, dilation 1, groups 1, kernel >= stride)")
        _check_norm(layer.convtr.norm_type, where)
        self.convtr, self.stride, self.blocks = convtr, s, math.ceil(k / s)
        self.carry: torch.Tensor | None = None  # [blocks - 1, C_out, stride]

    def refresh(self) -> None:
        weight, bias = _current_weights(self.convtr)  # [C_in, C_out, k]
        c_in, c_out, k = weight.shape
        weight = F.pad(weight, (0, self.blocks * self.stride - k))  # zero taps up to whole blocks
        self.matrix = weight.reshape(c_in, -1).t().contiguous()  # [C_out * blocks * stride, C_in]
        self.bias = None if bias is None else bias.view(1, -1, 1)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        n, m, s = x.shape[-1], self.blocks, self.stride
        cols = F.linear(x[0].t(), self.matrix).view(n, -1, m, s)  # input frame i, block j -> output block i + j
        out = cols.new_zeros(n + m - 1, cols.shape[1], s)
        for j in range(m):  # m = 2 in SEANet (kernel = 2 * stride)
            out[j: j + n] += cols[:, :, j]
        if self.carry is not None:
            out[: m - 1] += self.carry
        self.carry = out[n:]
        y = out[:n].permute(1, 0, 2).reshape(1, -1, n * s)
        return y + self.bias if self.bias is not None else y

    def reset(self) -> None:
        self.carry = None
        self.refresh()


class _LSTM(_Stage):
    """``SLSTM`` carrying ``(h, c)`` per layer. The recurrence is written out (PyTorch's gate
    order i, f, g, o) because ``nn.LSTM`` called on one or two frames is dominated by per-call
    overhead (~10x slower than this on CPU); the input projection is batched over the chunk."""

    def __init__(self, layer: SLSTM, where: str) -> None:
        lstm = layer.lstm
        if lstm.bidirectional or lstm.batch_first or lstm.proj_size:
            raise ValueError(f"{where}: only unidirectional, sequence-first LSTMs without projection")
        self.layer, self.lstm = layer, lstm
        self.state: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def refresh(self) -> None:
        lstm, self.params = self.lstm, []
        for i in range(lstm.num_layers):
            w_ih = getattr(lstm, f"weight_ih_l{i}").detach()
            w_hh_t = getattr(lstm, f"weight_hh_l{i}").detach().t().contiguous()
            bias = None
            if lstm.bias:
                bias = (getattr(lstm, f"bias_ih_l{i}") + getattr(lstm, f"bias_hh_l{i}")).detach()
            self.params.append((w_ih, w_hh_t, bias))

    def step(self, x: torch.Tensor) -> torch.Tensor:
        seq = x[0].t()  # [n, C]
        H = self.lstm.hidden_size
        state = []
        for i, (w_ih, w_hh_t, bias) in enumerate(self.params):
            h, c = self.state[i] if self.state else (seq.new_zeros(1, H), seq.new_zeros(1, H))
            gates_in = F.linear(seq, w_ih, bias)  # [n, 4H]: input projection for the whole chunk
            out = []
            for t in range(seq.shape[0]):  # the recurrence itself is sequential (as inside nn.LSTM)
                g = torch.addmm(gates_in[t: t + 1], h, w_hh_t)
                ifo = torch.sigmoid(g[:, : 2 * H]), torch.sigmoid(g[:, 3 * H:])
                c = ifo[0][:, H:] * c + ifo[0][:, :H] * torch.tanh(g[:, 2 * H: 3 * H])
                h = ifo[1] * torch.tanh(c)
                out.append(h)
            seq = torch.cat(out)
            state.append((h, c))
        self.state = state
        y = seq + x[0].t() if self.layer.skip else seq
        return y.t().unsqueeze(0)

    def reset(self) -> None:
        self.state = None
        self.refresh()


class _ResBlock(_Stage):
    def __init__(self, block: _Stage, shortcut: _Stage) -> None:
        self.block, self.shortcut = block, shortcut

    def step(self, x: torch.Tensor) -> torch.Tensor:
        return self.shortcut.step(x) + self.block.step(x)

    def reset(self) -> None:
        self.block.reset()
        self.shortcut.reset()


def _current_weights(conv: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a conv as its forward would use them now: ``weight_norm`` recomputes
    ``.weight`` from ``weight_g``/``weight_v`` in a forward pre-hook (stale after
    ``load_state_dict`` until the next forward), so run one tiny forward first."""
    with torch.inference_mode():
        w = conv.weight
        span = conv.dilation[0] * (conv.kernel_size[0] - 1) + 1
        conv(torch.zeros(1, conv.in_channels, span, device=w.device, dtype=w.dtype))
        bias = None if conv.bias is None else conv.bias.detach().clone()
        return conv.weight.detach().clone(), bias


def _check_norm(norm: str, where: str) -> None:
    if norm not in NORMS:
        raise ValueError(f"{where}: norm {norm!r} not supported for streaming (one of {NORMS})")


def _build(module: nn.Module, upsample: int, where: str) -> tuple[_Stage, int, int]:
    """Streamed counterpart of ``module``; returns (stage, warm-up frames it needs, upsampling
    after it). ``upsample``: samples per codec frame at the module's input."""
    if isinstance(module, nn.Sequential):
        stages, warmup = [], 1
        for i, m in enumerate(module):
            st, w, upsample = _build(m, upsample, f"{where}.{i}")
            stages.append(st)
            warmup = max(warmup, w)
        return _Sequence(stages), warmup, upsample
    if isinstance(module, SConv1d):
        st = _Conv(module, where)
        return st, math.ceil(st.min_first_chunk() / upsample), upsample
    if isinstance(module, SConvTranspose1d):
        st = _ConvTranspose(module, where)
        return st, 1, upsample * st.stride
    if isinstance(module, SLSTM):
        return _LSTM(module, where), 1, upsample
    if isinstance(module, SEANetResnetBlock):
        block, wb, ub = _build(module.block, upsample, f"{where}.block")
        shortcut, ws, us = _build(module.shortcut, upsample, f"{where}.shortcut")
        if ub != upsample or us != upsample:
            raise ValueError(f"{where}: residual branches must keep the time resolution")
        return _ResBlock(block, shortcut), max(wb, ws), upsample
    if isinstance(module, POINTWISE):
        return _Pointwise(module), 1, upsample
    raise ValueError(f"{where}: {type(module).__name__} is not supported by the streaming decoder")


class StreamingDecoder(CodecStream):
    """``CodecStream`` for the SEANet decoder (module docstring). Layer weights are read (with
    ``weight_norm`` applied) at construction and on ``reset()``: if the codec's weights change in
    between, call ``reset()``. Work per ``push`` is proportional to the chunk; state is a few
    samples per layer plus the LSTM's ``(h, c)``. ``warmup_frames`` is 1 for zero-padded codecs."""

    def __init__(self, codec: Codec, blocks: FrameBlocks | int = 1) -> None:
        super().__init__(codec, blocks)
        model = codec.model
        if model.segment is not None or model.normalize:
            raise ValueError("streaming needs a codec without segmenting or audio normalization")
        self._stage, self.warmup_frames, up = _build(model.decoder.model, 1, "decoder.model")
        if up != self.hop:
            raise ValueError(f"decoder upsamples by {up}, codec hop is {self.hop}")
        self.reset()

    def _reset(self) -> None:
        self._stage.reset()

    def _push(self, codes: torch.Tensor) -> torch.Tensor:
        return self._stage.step(self._latents(codes))[0, 0]

    def _flush(self) -> torch.Tensor:
        return torch.zeros(0)  # nothing carried is owed: every pushed frame's audio is out
