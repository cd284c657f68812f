"""A plain-torch forward of a ``transformers`` Llama backbone over a :class:`~voicespec.engine.kv_cache.KVCache`.

The weights are the HF model's own modules (no copy): its norms, MLPs and rotary embedding are
called as they are, and only attention is ours, reading keys and values from the cache rows by
position. So any HF Llama folder decodes here, a batch of rows of different lengths takes one
pass, and the output equals the HF forward within float tolerance (``tests/lm/test_llama.py``
checks it against ``transformers`` as the oracle).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers import LlamaModel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from voicespec.engine.kv_cache import KVCache


class LlamaStack:
    """``forward(embeds [B, T, D], rows, lengths) -> hidden [B, T, D]`` for ``backbone``."""

    def __init__(self, backbone: LlamaModel) -> None:
        c = backbone.config
        self.backbone = backbone
        self.heads = c.num_attention_heads
        self.kv_heads = c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.layers = len(backbone.layers)

    def new_cache(self, rows: int = 1, capacity: int = 256) -> KVCache:
        p = next(self.backbone.parameters())
        return KVCache(self.layers, rows, self.kv_heads, self.head_dim, capacity, p.dtype, p.device)

    @torch.inference_mode()
    def forward(self, embeds: torch.Tensor, cache: KVCache, rows: list[int], counts: list[int] | None = None) -> torch.Tensor:
        """Append ``embeds [B, T, D]`` to cache rows ``rows`` and return the final hidden states.

        ``counts[b]`` (default ``T``): the real positions of row ``b``; the rest of its block is
        padding, attended by nothing real and overwritten by the row's next append. Row ``b``'s
        position ``i`` sits at ``lengths[rows[b]] + i`` and attends every cached position up to it."""
        B, T, _ = embeds.shape
        start = [cache.lengths[r] for r in rows]
        counts = counts or [T] * B
        upto = max(start) + T
        cache.reserve(upto)
        device = embeds.device
        pos = torch.tensor(start, device=device)[:, None] + torch.arange(T, device=device)  # [B, T]
        keys = torch.arange(upto, device=device)
        mask = keys[None, None, :] <= pos[:, :, None]  # [B, T, upto]: causal, per row
        cos, sin = self.backbone.rotary_emb(embeds, pos)
        h = embeds
        for i, layer in enumerate(self.backbone.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            cache.write(i, rows, start, k, v)
            K, V = cache.read(i, rows, upto)
            out = F.scaled_dot_product_attention(q, K, V, attn_mask=mask[:, None], scale=attn.scaling,
                                                 enable_gqa=self.kv_heads != self.heads)
            h = h + attn.o_proj(out.transpose(1, 2).reshape(B, T, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        for r, s, n in zip(rows, start, counts):
            cache.lengths[r] = s + n
        return self.backbone.norm(h)
