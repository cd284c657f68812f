"""A plain-torch forward of a Llama backbone over a :class:`~voicespec.engine.kv_cache.KVCache`.

The backbone is ours (:class:`~voicespec.lm.backbone.LlamaBackbone`) or a ``transformers``
``LlamaModel`` (same module names). The weights are its own modules (no copy): its norms and rotary embedding are called
as they are, its linear maps through :class:`~voicespec.lm.linear.Linears` (the faster CPU kernel
for a verify pass's rows), and attention is ours, reading keys and values from the cache rows by
position. So any HF Llama folder decodes here, a batch of rows of different lengths takes one
pass, and the output equals the HF forward within float tolerance (``tests/lm/test_llama.py``
checks it against ``transformers`` as the oracle).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from torch import nn

from typing import Any

from voicespec.engine.kv_cache import KVCache
from voicespec.lm.backbone import rotate
from voicespec.lm.linear import Joined, Linears


class LlamaStack:
    """``forward(embeds [B, T, D], cache, rows, counts) -> hidden [B, T, D]`` for ``backbone``."""

    def __init__(self, backbone: nn.Module) -> None:
        c = backbone.config
        self.backbone = backbone
        self.heads = c.num_attention_heads
        self.kv_heads = c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.layers = len(backbone.layers)
        self.linears = Linears()  # the backbone's linear maps, on the faster CPU kernel for a pass's rows
        # q, k, v and gate, up of each layer read the same input: one product each (same values)
        self.qkv = [Joined() for _ in backbone.layers]
        self.gate_up = [Joined() for _ in backbone.layers]
        self._pool: KVCache | None = None

    def new_cache(self, rows: int = 1, capacity: int = 256) -> KVCache:
        p = next(self.backbone.parameters())
        return KVCache(self.layers, rows, self.kv_heads, self.head_dim, capacity, p.dtype, p.device)

    @property
    def pool(self) -> KVCache:
        """The cache every session over this stack takes a row of (made on first use, on the
        weights' device, so a model moved before its first session decodes there)."""
        if self._pool is None:
            self._pool = self.new_cache()
        return self._pool

    @torch.inference_mode()
    def forward(self, embeds: torch.Tensor, cache: KVCache, rows: list[int], counts: list[int] | None = None,
                trees: list[Any] | None = None) -> torch.Tensor:
        """Append ``embeds [B, T, D]`` to cache rows ``rows`` and return the final hidden states ``[B, T, D]``.

        ``counts[b]`` (default ``T``): the real positions of row ``b``; the rest of its block is
        padding, attended by nothing real and overwritten by the row's next append. Row ``b``'s
        position ``i`` sits at ``lengths[rows[b]] + i`` and attends every cached position up to it,
        unless ``trees[b]`` is a :class:`~voicespec.engine.tree.TreeShape`: then its block is a draft
        tree, slot ``i`` at RoPE position ``length + depth[i]`` attending the prefix and its ancestors.
        The pass runs over the span ``min(rows) .. max(rows)``; rows in it that are not in the
        batch take a zero-count block of zeros (see :mod:`voicespec.engine.kv_cache`)."""
        B, T, D = embeds.shape
        counts = counts or [T] * B
        lo, hi = min(rows), max(rows) + 1
        if rows == list(range(lo, hi)):
            return self._span(embeds, cache, lo, counts, trees=trees)
        full = embeds.new_zeros(hi - lo, T, D)
        span_counts = [0] * (hi - lo)
        span_trees = None if trees is None else [None] * (hi - lo)
        at = [r - lo for r in rows]
        full[at] = embeds
        for b, (i, n) in enumerate(zip(at, counts)):
            span_counts[i] = n
            if trees is not None:
                span_trees[i] = trees[b]
        return self._span(full, cache, lo, span_counts, trees=span_trees)[at]

    @torch.inference_mode()
    def peek(self, embeds: torch.Tensor, cache: KVCache, row: int, start: int, n_layers: int) -> torch.Tensor:
        """The first ``n_layers`` layers (then the final norm) over ``embeds [1, T, D]`` at positions
        ``start ..`` of ``row``, attending the row's cache below them: an early-exit draft that shares
        the target's cache (LayerSkip). Keys and values are written there but the row's length does
        not move: the positions stay past the committed prefix, for the verify pass to overwrite."""
        return self._span(embeds, cache, row, [embeds.shape[1]], [start], n_layers)

    def _span(self, embeds: torch.Tensor, cache: KVCache, lo: int, counts: list[int],
              start: list[int] | None = None, n_layers: int | None = None, trees: list[Any] | None = None) -> torch.Tensor:
        """:meth:`forward` over consecutive rows ``lo .. lo + S`` (``embeds [S, T, D]``); with
        ``start`` (positions to write at) the lengths stay as they are (see :meth:`peek`)."""
        S, T, _ = embeds.shape
        commit = start is None
        start = cache.lengths[lo: lo + S] if commit else start
        upto = max(start) + T
        cache.reserve(upto)
        device = embeds.device
        pos = torch.tensor(start, device=device)[:, None] + torch.arange(T, device=device)  # [S, T]: where each slot is written
        mask = (torch.arange(upto, device=device) <= pos[:, :, None])[:, None]  # [S, 1, T, upto]: causal, per row
        rope = pos
        for b, tree in enumerate(trees or ()):
            if tree is not None:  # a draft tree: positions by depth, attention along ancestors only
                n, s0 = len(tree.parents), start[b]
                rope = rope.clone() if rope is pos else rope
                rope[b, :n] = s0 + tree.depths.to(device)
                mask[b, 0, :n, s0: s0 + n] = tree.ancestors.to(device)
        cos, sin = self.backbone.rotary_emb(embeds, rope)
        h, lin = embeds, self.linears
        H, KV, d = self.heads, self.kv_heads, self.head_dim
        for i, layer in enumerate(self.backbone.layers[:n_layers]):
            attn, mlp = layer.self_attn, layer.mlp
            x = layer.input_layernorm(h)
            joined, _ = self.qkv[i].linear(attn.q_proj, attn.k_proj, attn.v_proj)
            qkv = lin(joined, x)  # [S, T, (H + 2 KV) d]
            # RoPE on q's and k's heads in one go (elementwise: the same values as one at a time)
            qk = rotate(qkv[..., : (H + KV) * d].view(S, T, H + KV, d).transpose(1, 2), cos, sin)  # [S, H + KV, T, d]
            q, k = qk[:, :H], qk[:, H:]
            v = qkv[..., (H + KV) * d:].view(S, T, KV, d).transpose(1, 2)
            cache.write(i, lo, start, k, v, pos)
            K, V = cache.read(i, lo, lo + S, upto)
            out = F.scaled_dot_product_attention(q, K, V, attn_mask=mask, scale=attn.scaling,
                                                 enable_gqa=self.kv_heads != self.heads)
            h = h + lin(attn.o_proj, out.transpose(1, 2).reshape(S, T, -1))
            x = layer.post_attention_layernorm(h)
            joined, sizes = self.gate_up[i].linear(mlp.gate_proj, mlp.up_proj)
            gate, up = lin(joined, x).split(sizes, -1)
            h = h + lin(mlp.down_proj, mlp.act_fn(gate) * up)
        if commit:
            for r, (s, n) in enumerate(zip(start, counts), start=lo):
                cache.lengths[r] = s + n
        return self.backbone.norm(h)
