"""Tree verification: the shape arithmetic, greedy and sampling rules on their own (a chi-square
of the committed tokens against the target's own distribution, with a broken residual as the
control), and trees through the decoder (greedy equal to plain; the cache left holding exactly the
committed prefix). The whole-frames chi-square through the decoder is in test_decoder_coarse_first.py."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import voicespec.engine.tree as tree_module
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import FeatureDrafter, MedusaDrafter
from voicespec.engine.tree import TreeShape, verify_tree_greedy, verify_tree_sampling
from voicespec.pipeline.tiny import tiny_codec_lm, tiny_draft_heads


def test_shape_arithmetic():
    t = TreeShape((2, 2, 1))
    assert t.nodes == 10 and t.depth == 3
    assert t.parents == (-1, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6)
    assert t.depths.tolist() == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    assert t.children(1) == [3, 4] and t.children(7) == []
    anc = t.ancestors
    assert anc[9].nonzero().flatten().tolist() == [0, 2, 5, 9]  # 9 -> 5 -> 2 -> root
    for bad in ((), (0,), (2, -1), (1.5,), "abc", (8, 8)):
        with pytest.raises(ValueError):
            TreeShape(bad)
    with pytest.raises(ValueError, match="trees"):
        DecodeConfig(SamplingConfig(lossy_top_k=2), tree=(2, 1))


def test_greedy_walks_down_while_the_argmax_is_a_child():
    shape = TreeShape((2, 1))  # slots: 0 root; 1, 2 children; 3 under 1, 4 under 2
    tokens = torch.tensor([9, 5, 7, 1, 3])
    logits = torch.full((5, 10), -1.0)
    logits[0, 7] = 5  # after the root the target wants 7: slot 2
    logits[2, 3] = 5  # after slot 2 it wants 3: slot 4
    logits[4, 8] = 5  # after slot 4: bonus 8
    v = verify_tree_greedy(shape, tokens, logits)
    assert v.path == [2, 4] and v.steps.flatten().tolist() == [7, 3, 8]
    logits[0] = -1.0
    logits[0, 6] = 5  # no child matches: the argmax alone
    v = verify_tree_greedy(shape, tokens, logits)
    assert v.path == [] and v.steps.flatten().tolist() == [6]


V = 5


def _two_level_case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    sharp = lambda n: (torch.randn(n, V, generator=g) * 2).softmax(-1)  # noqa: E731
    p_root, p_after = sharp(1)[0], sharp(V)  # the target: p(x1), p(x2 | x1)
    q_root, q_after = sharp(1)[0], sharp(V)  # the drafter, deliberately different
    return p_root, p_after, q_root, q_after


def _sample_pairs(n: int, shape: TreeShape, seed: int = 1) -> Counter:
    """(x1, x2) committed by tree verification (continued by plain sampling when only x1 was)."""
    p_root, p_after, q_root, q_after = _two_level_case()
    g = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    for _ in range(n):
        tokens, q, p = [torch.tensor(0)], [q_root], [p_root]
        level = [0]
        for b in shape.branching:
            nxt = []
            for t in level:
                picks = torch.multinomial(q[t], b, replacement=False, generator=g)
                for tok in picks:
                    tokens.append(tok)
                    q.append(q_after[tok])
                    p.append(p_after[tok])
                    nxt.append(len(tokens) - 1)
            level = nxt
        v = verify_tree_sampling(shape, torch.stack(tokens), torch.stack(q), torch.stack(p), g)
        steps = v.steps.flatten().tolist()
        if len(steps) == 1:
            steps.append(int(torch.multinomial(p_after[steps[0]], 1, generator=g)))
        counts[tuple(steps[:2])] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("branching", [(3,), (2, 2), (4, 1)])
def test_sampling_commits_the_targets_distribution(branching, chi_square_pvalue, monkeypatch):
    p_root, p_after, _, _ = _two_level_case()
    exact = {(a, b): float(p_root[a] * p_after[a, b]) for a in range(V) for b in range(V)}
    shape = TreeShape(branching)
    assert chi_square_pvalue(_sample_pairs(4000, shape), exact) > 1e-3
    # Control: a residual that forgets to subtract q (recursive rejection without the correction).
    monkeypatch.setattr(tree_module, "residual", lambda p, q, token: p)
    assert chi_square_pvalue(_sample_pairs(4000, shape), exact) < 1e-6


@pytest.fixture(scope="module")
def coarse():
    target = tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=16, min_frames=8, coarse_first=True)
    return target, FeatureDrafter(target, tiny_draft_heads(target)), target.layout.prompt([1, 2, 3, 4])


@pytest.mark.parametrize("branching", [(1, 1, 1), (2, 1), (3, 2, 1), (2, 2, 2, 2)])
def test_greedy_trees_equal_plain_decoding_and_leave_the_committed_prefix(coarse, branching):
    target, drafter, prompt = coarse
    # A cache that grew mid-decode holds inference tensors, and moving the path must work on them:
    # grow it so, with rows for everything below already there and one held all along (so it
    # never shrinks back to fresh tensors).
    holder, *spare = [target.start(prompt) for _ in range(4)]
    with torch.inference_mode():
        target.stack.pool.reserve(2 * target.stack.pool.capacity)
    for s in spare:
        s.close()
    greedy = SamplingConfig(temperature=0)
    plain = SpecDecoder(target).generate(prompt, DecodeConfig(greedy, gamma=0, max_steps=30))
    plain_frames = plain.run()
    gen = SpecDecoder(target, drafter).generate(prompt, DecodeConfig(greedy, tree=branching, max_steps=30))
    frames = []
    while not gen.done:
        frames.append(gen.step().frames)
        s = gen.target
        assert s.length == gen.history.shape[0] - 1
        fresh = target.start(prompt)
        fresh.forward(gen.history[fresh.length: -1])
        n = s.prefix + s.length
        assert torch.allclose(s.cache.k[:, s.row, :, :n], fresh.cache.k[:, fresh.row, :, :n], atol=1e-5)
        assert torch.allclose(s.cache.v[:, s.row, :, :n], fresh.cache.v[:, fresh.row, :, :n], atol=1e-5)
        fresh.close()
    assert torch.equal(gen.generated, plain.generated)
    assert torch.equal(torch.cat(frames, 1), plain_frames)
    assert gen.stats.accepted > 0, "the tree was never accepted: nothing tested"
    gen.close()
    holder.close()


def test_a_drafter_that_cannot_draft_trees_is_refused(coarse):
    target, _, prompt = coarse
    medusa = MedusaDrafter(target, tiny_draft_heads(target, "medusa", n_heads=2))
    with pytest.raises(ValueError, match="does not draft trees"):
        SpecDecoder(target, medusa).generate(prompt, DecodeConfig(tree=(2, 1)))


def test_tree_passes_batch_with_chain_and_plain_passes(coarse):
    """One batched pass may hold a tree row beside chain and plain rows (per-row masks and
    positions): every generation gets what it gets alone, greedy and seeded sampling."""
    target, drafter, prompt = coarse
    other = target.layout.prompt([4, 3, 2, 1, 4, 3])
    decoder = SpecDecoder(target, drafter)
    for sampling in (SamplingConfig(temperature=0), SamplingConfig(temperature=0.9, top_k=5)):
        configs = [DecodeConfig(sampling, tree=(2, 2), max_steps=25, seed=1), DecodeConfig(sampling, gamma=3, max_steps=25, seed=2),
                   DecodeConfig(sampling, gamma=0, max_steps=25, seed=3), DecodeConfig(sampling, tree=(3, 1, 1), max_steps=25, seed=4)]
        prompts = [prompt, other, prompt, other]
        together = decoder.run_batch(prompts, configs)
        for p, c, frames in zip(prompts, configs, together):
            assert torch.equal(frames, decoder.generate(p, c).run()), f"{c.tree or c.gamma} {sampling}"
