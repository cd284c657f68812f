"""Engine fixtures: the exact distribution of a target by enumeration (from uncached forwards:
nothing shared with the engine's loop), a chi-square test against it, and the controls that show
those tests can fail (a wrong acceptance rule, sharpened random models)."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy import stats

from voicespec.engine.drafters import EarlyExitDrafter, FeatureDrafter, MedusaDrafter, ModelDrafter, NGramDrafter
from voicespec.engine.layout import LayoutState, Prompt
from voicespec.engine.policy import TokenPolicy
from voicespec.engine.verify import Verdict
from voicespec.lm.codec_lm import CodecStepLM
from voicespec.pipeline.tiny import tiny_codec_lm, tiny_draft_heads, tiny_flat


@pytest.fixture(scope="session")
def exact_distribution(full_logits):
    """``exact_distribution(lm, prompt, policy, n_steps)``: the target's exact probability of every
    sequence of ``n_steps`` steps (by enumeration)."""

    def exact(lm, prompt: Prompt, policy: TokenPolicy, n_steps: int) -> dict[tuple, float]:
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

    return exact


def _chi_square_pvalue(counts: dict[tuple, int], expected_probs: dict[tuple, float]) -> float:
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
    if len(obs) < 2:  # too few draws for any bin of its own: no test at all, neither a pass nor a failure
        raise ValueError(f"{n} draws leave {len(obs)} bin(s) after pooling: draw more")
    scale = sum(obs) / sum(exp)
    return float(stats.chisquare(obs, [e * scale for e in exp]).pvalue)


@pytest.fixture(scope="session")
def chi_square_pvalue():
    """``chi_square_pvalue(counts, expected_probs)``: Pearson chi-square goodness of fit; bins with
    expected count < 5 are pooled. An outcome the target gives probability zero is conclusive
    evidence against it: p-value 0."""
    return _chi_square_pvalue


def _rebuild(target):
    """A draft with the target's layout but unrelated random weights (low acceptance)."""
    if hasattr(target.model, "backbone"):
        c = target.model.config
        other = tiny_codec_lm(seed=99, n_codebooks=c.n_codebooks, codebook_size=c.codebook_size, delays=list(c.delays),
                              min_frames=c.min_frames, n_layers=1, coarse_first=c.coarse_first,
                              frames_per_step=c.frames_per_step)
        return (other.model,)
    other = tiny_flat(seed=99, n_layers=1, n_codebooks=target.layout.n_codebooks,
                      codebook_size=target.layout.codebook_size, min_frames=target.layout.min_frames)
    return other.model, target.layout


def _drafters_for(target, draft) -> dict:
    drafters = {
        "ngram": NGramDrafter(),
        "draft-model": ModelDrafter(draft),
        "independent-model": ModelDrafter(type(target)(*_rebuild(target))),
    }
    if isinstance(target, CodecStepLM):
        drafters["early-exit"] = EarlyExitDrafter(target, 1)
        if target.model.config.coarse_first:
            drafters["feature"] = FeatureDrafter(target, tiny_draft_heads(target))
            drafters["feature-int8"] = FeatureDrafter(target, tiny_draft_heads(target, inference_weights="int8"))
            drafters["medusa"] = MedusaDrafter(target, tiny_draft_heads(target, "medusa", n_heads=4, seed=1))
    return drafters


@pytest.fixture(scope="session")
def drafters_for():
    """``drafters_for(target, draft)``: name -> drafter: the n-gram drafter, ``draft`` itself, a
    model with the target's layout but unrelated weights (low acceptance), and for codec LM targets
    the drafters built on the target itself (early exit; feature and Medusa heads when coarse-first)."""
    return _drafters_for


def _accept_everything(draft, q, p, generator) -> Verdict:
    from voicespec.engine.sampling import sample

    bonus = sample(p[draft.shape[0]], generator)
    return Verdict(torch.cat([draft, bonus.unsqueeze(0)]), draft.shape[0], draft.numel())


@pytest.fixture(scope="session")
def accept_everything():
    """A wrong acceptance rule (``verify_sampling``'s signature): keeps every draft token, so the
    draft's distribution leaks into the output."""
    return _accept_everything


def _sharpened(lm, factor: float = 8.0):
    with torch.no_grad():
        lm.model.get_output_embeddings().weight.mul_(factor)
    return lm


@pytest.fixture(scope="session")
def sharpened():
    """``sharpened(lm, factor=8)``: random tiny models are nearly uniform; scale the output layer
    (in place; returns ``lm``) so that p and q differ clearly."""
    return _sharpened


@pytest.fixture(scope="session")
def flat_lm():
    """A tiny random-weight causal LM in the flat layout (shared: tests must not modify it)."""
    return tiny_flat(seed=0)


@pytest.fixture(scope="session")
def delay_lm():
    """A tiny random-weight codec LM, 3 codebooks of 8 codes, delay layout (shared: read only)."""
    return tiny_codec_lm(seed=0, n_codebooks=3, codebook_size=8)
