"""Exact acceptance rules for a block of drafted steps (pure functions).

Tokens inside a step are walked codebook by codebook, steps in order; the first rejected token
ends the block. The step it belongs to is completed from the target's own distributions (the
tokens of one step are conditionally independent given the prefix, see ``layout.DelayLayout``),
so every verify pass commits at least one full step and at most ``γ + 1``.

Greedy: accept while the draft equals the target's argmax. Sampling: Leviathan et al. 2023 /
Chen et al. 2023 — accept ``d`` with probability ``min(1, p(d)/q(d))``, on rejection draw from
``norm(max(0, p - q))``, and draw a bonus step from the target when the whole block is accepted.
A deterministic drafter passes ``q=None`` and is treated as one-hot.

:func:`verify_lossy_top_k` is the one rule that is *not* exact (opt-in, labelled lossy wherever
it appears): a drafted token is kept whenever the target ranks it among its ``k`` most likely.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from voicespec.engine.sampling import sample


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one block.

    ``steps``: ``[n, G]`` steps to commit (accepted drafts, then one step of the target's own).
    ``accepted_steps``: leading draft steps accepted whole. ``accepted_tokens``: draft tokens
    accepted (codebook granularity; counts a partially accepted step's leading codebooks).
    """

    steps: torch.Tensor
    accepted_steps: int
    accepted_tokens: int


def _first_rejection(accepted: torch.Tensor) -> int:
    """Index into the row-major flattening of ``accepted`` (``[γ, G]``) of the first False."""
    flat = accepted.reshape(-1)
    bad = (~flat).nonzero()
    return int(bad[0]) if bad.numel() else flat.numel()


def _assemble(draft: torch.Tensor, m: int, fill: torch.Tensor, G: int) -> Verdict:
    """Steps = drafts up to flat index ``m``, then ``fill`` (``[G]``) completes step ``m // G``."""
    i, k = divmod(m, G)
    last = fill.clone()
    if k:
        last[:k] = draft[i, :k]
    steps = torch.cat([draft[:i], last.unsqueeze(0)])
    return Verdict(steps=steps, accepted_steps=i, accepted_tokens=m)


def verify_greedy(draft: torch.Tensor, logits: torch.Tensor) -> Verdict:
    """``draft``: ``[γ, G]``; ``logits``: warped target logits ``[γ+1, G, V]``."""
    G = logits.shape[1]
    best = logits.argmax(-1)
    if draft.shape[0] == 0:  # plain decoding (every pass while a server is saturated): what the general path gives
        return Verdict(steps=best[:1], accepted_steps=0, accepted_tokens=0)
    m = _first_rejection(draft == best[: draft.shape[0]])
    return _assemble(draft, m, best[m // G], G)


def residual(p: torch.Tensor, q: torch.Tensor | None, token: int) -> torch.Tensor:
    """``norm(max(0, p - q))`` for one position (``[V]``); ``q=None`` means one-hot at ``token``.

    When p and q agree so closely that nothing is left (a rejection then has probability ~0 and
    arises only from rounding), fall back to p itself, which is what the rule tends to.
    """
    if q is None:
        r = p.clone()
        r[token] = 0
    else:
        r = (p - q).clamp_min(0)
    total = r.sum()
    return r / total if total > 0 else p


def verify_sampling(
    draft: torch.Tensor,
    q: torch.Tensor | None,
    p: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Speculative sampling over a block.

    ``draft``: ``[γ, G]``; ``q``: draft probabilities ``[γ, G, V]`` or None (deterministic drafter);
    ``p``: target probabilities ``[γ+1, G, V]``. The output is distributed exactly as steps drawn
    one by one from ``p``.
    """
    gamma, G = draft.shape
    if gamma == 0:  # plain sampling: the same draw as the general path below, in fewer operations
        return _assemble(draft, 0, sample(p[0], generator), G)
    u = torch.rand(gamma, G, generator=generator, dtype=p.dtype)
    p_d = p[:gamma].gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    q_d = torch.ones_like(p_d) if q is None else q.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    m = _first_rejection(u * q_d < p_d)
    i, k = divmod(m, G)
    dist = p[i].clone()
    if m < gamma * G:
        dist[k] = residual(p[i, k], None if q is None else q[i, k], int(draft[i, k]))
    return _assemble(draft, m, sample(dist, generator), G)


def verify_lossy_top_k(draft: torch.Tensor, logits: torch.Tensor, k: int, generator: torch.Generator | None,
                       greedy: bool) -> Verdict:
    """LOSSY top-k tolerance (VADUSA, Llasa+): accept draft tokens while each is among the ``k``
    highest warped target logits at its position; the first one that is not is replaced by the
    target's own choice (argmax when ``greedy``, else a draw from ``p``), as is the bonus step.

    ``draft``: ``[γ, G]``; ``logits``: warped target logits ``[γ+1, G, V]``. Output tokens are
    plausible to the target but not distributed as plain decoding's; the bench measures the cost."""
    G = logits.shape[1]
    gamma = draft.shape[0]
    kth = logits[:gamma].topk(min(k, logits.shape[-1]), -1).values[..., -1]  # [γ, G]
    d = logits[:gamma].gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    m = _first_rejection((d >= kth) & (d > float("-inf")))
    row = logits[m // G]
    fill = row.argmax(-1) if greedy else sample(row.softmax(-1), generator)
    return _assemble(draft, m, fill, G)
