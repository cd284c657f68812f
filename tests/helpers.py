"""Shared test helpers: reference decoders that share nothing with the engine's loop."""

from __future__ import annotations

import itertools

import torch
from scipy import stats

from voicespec.engine.layout import LayoutState, Prompt
from voicespec.engine.policy import TokenPolicy


def full_logits(lm, prompt: Prompt, steps: torch.Tensor) -> torch.Tensor:
    """Logits for the step after ``prompt + steps``, from one uncached forward of everything."""
    seq = torch.cat([prompt.steps, steps])
    fresh = lm.start(Prompt(prompt.text, seq[:1], prompt.track))
    return fresh.forward(seq)[-1]


def exact_distribution(lm, prompt: Prompt, policy: TokenPolicy, n_steps: int) -> dict[tuple, float]:
    """The target's exact probability of every sequence of ``n_steps`` steps (by enumeration)."""
    layout = lm.layout
    out: dict[tuple, float] = {}

    def walk(prefix: list[torch.Tensor], state: LayoutState, prob: float) -> None:
        if len(prefix) == n_steps or layout.is_done(state):
            key = tuple(tuple(s.tolist()) for s in prefix)
            out[key] = out.get(key, 0.0) + prob
            return
        steps = torch.stack(prefix) if prefix else prompt.steps[:0]
        raw = full_logits(lm, prompt, steps).unsqueeze(0)
        probs = policy.probs(policy.warp(raw, state, steps[:0], steps))[0]  # [G, V]
        choices = [torch.nonzero(row > 0).flatten().tolist() for row in probs]
        for combo in itertools.product(*choices):
            p = prob
            for k, tok in enumerate(combo):
                p *= float(probs[k, tok])
            step = torch.tensor(combo)
            walk(prefix + [step], layout.advance(state, step), p)

    walk([], layout.initial_state(prompt), 1.0)
    return out


def chi_square_pvalue(counts: dict[tuple, int], expected_probs: dict[tuple, float]) -> float:
    """Pearson chi-square goodness of fit; bins with expected count < 5 are pooled. An outcome
    the target gives probability zero is conclusive evidence against it: p-value 0."""
    n = sum(counts.values())
    if set(counts) - set(expected_probs):
        return 0.0
    obs, exp, pool_o, pool_e = [], [], 0, 0.0
    for key, p in expected_probs.items():
        e = p * n
        if e < 5:
            pool_o += counts.get(key, 0)
            pool_e += e
        else:
            obs.append(counts.get(key, 0))
            exp.append(e)
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    scale = sum(obs) / sum(exp)
    return float(stats.chisquare(obs, [e * scale for e in exp]).pvalue)
