"""Sampling configuration and logit warpers, as pure functions over ``[T, G, V]`` logits.

The verifier needs the target's distribution at every draft position *exactly* as plain decoding
would compute it at that position, so every warper takes per-position inputs (the legality mask,
the recent tokens for the repetition penalty) rather than mutable decoding state.
"""

from __future__ import annotations

import torch

from voicespec.engine.config import SamplingConfig


def recent_tokens(history: torch.Tensor, block: torch.Tensor, window: int) -> torch.Tensor:
    """Repetition-penalty context ``[T+1, W, G]`` for the positions of a verify block.

    Position ``i`` sees the last ``window`` steps of ``history`` (``[N, G]``, committed generated
    steps) followed by ``block[:i]`` (``[T, G]``, the drafts). Missing entries are ``-1``.
    """
    G = block.shape[1] if block.ndim == 2 else history.shape[1]
    tail = history[-window:] if window else history[:0]
    pad = torch.full((window, G), -1, dtype=torch.long)
    seq = torch.cat([pad, tail, block])  # the last `window` steps before position i end at row i-1
    start = seq.shape[0] - block.shape[0] - window
    idx = start + torch.arange(block.shape[0] + 1).unsqueeze(1) + torch.arange(window)
    return seq[idx]


def apply_repetition_penalty(logits: torch.Tensor, recent: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL-style penalty: divide positive / multiply negative logits of recently used ids.

    ``recent`` is ``[T, W, G]``; each codebook group is penalised for its own recent ids.
    """
    if penalty == 1 or recent.shape[1] == 0:
        return logits
    T, G, V = logits.shape
    hit = torch.zeros(T, G, V + 1, dtype=torch.bool)
    idx = torch.where(recent < 0, V, recent).permute(0, 2, 1)  # [T, G, W]
    hit.scatter_(2, idx, True)
    hit = hit[..., :V]
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(hit, penalised, logits)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely ids whose probability reaches ``p`` (at least one)."""
    if p >= 1:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    before = probs.cumsum(-1) - probs  # mass strictly above each id
    drop_sorted = before >= p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def warp(
    logits: torch.Tensor,
    mask: torch.Tensor | None,
    config: SamplingConfig,
    recent: torch.Tensor | None = None,
) -> torch.Tensor:
    """Final logits ``[T, G, V]`` (illegal ids at -inf) in the fixed order mask → repetition
    penalty → temperature → top-k → top-p. For greedy decoding only mask and penalty apply.
    ``mask`` None: every id is legal."""
    x = logits.float()
    if mask is not None:
        x = x.masked_fill(~mask, float("-inf"))
    if recent is not None:
        x = apply_repetition_penalty(x, recent, config.repetition_penalty)
    if config.greedy:
        return x
    x = x / config.temperature
    x = top_k_filter(x, config.top_k)
    return top_p_filter(x, config.top_p)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The id of each row of ``probs [R, V]`` whose CDF interval holds ``u [R, 1]`` (uniform in
    [0, 1)): ``P(id) = probs[id] / sum`` exactly, and never an id of probability 0."""
    cdf = probs.cumsum(-1)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max(probs.shape[-1] - 1).squeeze(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One id per row of ``probs`` (``[..., V]``), by inverse CDF from one uniform per row: a row's
    draw depends only on its own probabilities and its generator's next uniform, so rows of
    different sessions can be drawn together, each from its own generator (:func:`draw_uniforms`)."""
    flat = probs.reshape(-1, probs.shape[-1])
    u = torch.rand(flat.shape[0], 1, generator=generator, dtype=flat.dtype, device=flat.device)
    return inverse_cdf(flat, u).reshape(probs.shape[:-1])


def draw_uniforms(generator: torch.Generator | None, n: int) -> torch.Tensor:
    """``[n, 1]``: the next ``n`` uniforms of ``generator``, each the one draw :func:`sample`
    makes for one row, in order (drawn ahead so that rows picked in any grouping get the same ones).
    One call: torch's CPU uniform fills a tensor serially, draw for draw what ``n`` one-element
    calls give (``tests/engine/test_sampling.py`` holds it to that)."""
    return torch.rand(n, 1, generator=generator)


def choose_rows(logits: torch.Tensor, config: SamplingConfig, uniforms: torch.Tensor | None) -> torch.Tensor:
    """Ids ``[R]`` for logits ``[R, V]`` with every id legal and no history (the fine stage's
    codes): warped by ``config``, argmax when greedy, else row ``r`` drawn by inverse CDF at
    ``uniforms[r]`` (``[R, 1]``, from :func:`draw_uniforms`; unread when greedy)."""
    x = warp(logits[:, None], None, config)[:, 0]
    return x.argmax(-1) if config.greedy else inverse_cdf(x.softmax(-1), uniforms)
