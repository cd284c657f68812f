"""Tree verification: the shape arithmetic, greedy and sampling rules on their own (a chi-square
of the committed tokens against the target's own distribution, with a broken residual as the
control), and trees through the decoder (greedy equal to plain; the cache left holding exactly the
committed prefix). The whole-frames chi-square through the decoder is in test_decoder_coarse_first.py."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

import voicespec.engine.tree as tree_module
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.controller import ControllerConfig
from voicespec.engine.tree_shapes import DEFAULT_TREES, DynamicTree, check_tree
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import FeatureDrafter, MedusaDrafter
from voicespec.engine.drafters.base import DraftContext
from voicespec.engine.tree import DraftTree, TreeShape, verify_tree_greedy, verify_tree_sampling
from voicespec.options import parse_tree
from voicespec.pipeline.synthesis import request_options
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


def test_a_tree_by_children_per_node():
    t = TreeShape(((3,), (2, 0, 1), (1, 0, 2)))  # slots: 1, 2, 3 under the root; 4, 5 under 1, 6 under 3; 7 under 4, 8, 9 under 6
    assert t.parents == (-1, 0, 0, 0, 1, 1, 3, 4, 6, 6) and t.nodes == 9 and t.depth == 3
    assert t.children(2) == [] and t.children(5) == [] and t.children(6) == [8, 9]
    assert str(t) == "3/2,0,1/1,0,2" and parse_tree(str(t)) == t.branching == ((3,), (2, 0, 1), (1, 0, 2))
    assert parse_tree("2/2,2/1,1,1,1") == (2, 2, 1) == check_tree([[2], [2, 2], [1, 1, 1, 1]])  # alike per depth: one key
    assert TreeShape(((2,), (2, 2))).parents == TreeShape((2, 2)).parents
    for bad, why in (("3/2,1/1", "needs 3 counts"), ("2/0,0", "no node"), ("2/1,-1", "needs 2 counts"),
                     ("8/8,8,8,8,8,8,8,8", "more than 64"), ("2/a", "per node depth by depth")):
        with pytest.raises(ValueError, match=why):
            parse_tree(bad)
    with pytest.raises(ValueError, match="children per node"):
        check_tree([[2], 2])
    with pytest.raises(ValueError, match="more than 64"):  # sized by arithmetic, not by listing a billion nodes
        check_tree([10**9, 10**9, 10**9])


def test_a_tree_from_its_parents():
    t = DraftTree((-1, 0, 0, 1, 3))
    assert t.nodes == 4 and t.depth == 3 and t.children(0) == [1, 2] and t.children(2) == []
    assert t.depths.tolist() == [0, 1, 1, 2, 3]
    assert t.ancestors[4].nonzero().flatten().tolist() == [0, 1, 3, 4]
    for bad in ((), (0,), (-1, 1), (-1, 0, 3), (-1, -1)):
        with pytest.raises(ValueError, match="parents"):
            DraftTree(bad)


def test_dynamic_tree_specs_parse_check_and_refuse_sampling():
    assert DynamicTree.parse("dynamic") == DynamicTree() == DynamicTree(16, 6, 4)
    assert DynamicTree.parse("dynamic:24") == DynamicTree(24, 6, 4)
    assert DynamicTree.parse("dynamic:3") == DynamicTree(3, 3, 4)  # the depth never exceeds the nodes
    assert DynamicTree.parse("dynamic:24:8:2") == DynamicTree(24, 8, 2)
    assert DynamicTree.parse(str(DynamicTree(24, 8, 2))) == DynamicTree(24, 8, 2)
    assert parse_tree("dynamic:10") == DynamicTree(10, 6, 4) and parse_tree("2x2") == (2, 2)
    for bad in ("dynamic:0", "dynamic:65", "dynamic:8:9", "dynamic:8:2:0", "dynamic:8:2:17", "dynamic:a",
                "dynamic:1:1:1:1", "dynamo", "dynamic:2.5"):
        with pytest.raises(ValueError, match="tree"):
            parse_tree(bad)
    assert DecodeConfig(SamplingConfig(temperature=0), tree="dynamic:8").tree == DynamicTree(8, 6, 4)
    with pytest.raises(ValueError, match="greedy"):
        DecodeConfig(SamplingConfig(temperature=0.7), tree="dynamic")


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
        for group in shape.counts:
            nxt = []
            for t, b in zip(level, group):
                picks = torch.multinomial(q[t], b, replacement=False, generator=g) if b else []
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
@pytest.mark.parametrize("branching", [(3,), (2, 2), (4, 1), ((3,), (2, 0, 1))], ids=str)
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


@pytest.mark.parametrize("branching", [(1, 1, 1), (2, 1), (3, 2, 1), (2, 2, 2, 2), ((3,), (2, 0, 1), (1, 0, 2)), DynamicTree(6, 3, 2),
                                       DynamicTree(12, 4, 3), DynamicTree(5, 5, 1)], ids=str)
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


@pytest.mark.parametrize("tree", [(2, 1), DynamicTree(6, 3, 2)], ids=str)
def test_greedy_trees_under_a_repetition_penalty_equal_plain_decoding(coarse, tree):
    """The penalty reads each node's own path, in the draft as in the verify pass."""
    target, drafter, prompt = coarse
    greedy = SamplingConfig(temperature=0, repetition_penalty=1.5, repetition_window=4)
    plain = SpecDecoder(target).generate(prompt, DecodeConfig(greedy, gamma=0, max_steps=30))
    plain.run()
    gen = SpecDecoder(target, drafter).generate(prompt, DecodeConfig(greedy, tree=tree, max_steps=30))
    gen.run()
    assert torch.equal(gen.generated, plain.generated)
    assert gen.stats.accepted > 0, "no tree was accepted: nothing tested"


def test_the_api_takes_a_tree_as_text(tiny_voice):
    options = request_options(tiny_voice, tree="dynamic:8", temperature=0)
    assert options.decode.tree == DynamicTree(8, 6, 4)
    assert request_options(tiny_voice, tree="2,1").decode.tree == (2, 1) == request_options(tiny_voice, tree=[2, 1]).decode.tree
    by_node = request_options(tiny_voice, tree="3/2,1,0").decode.tree
    assert by_node == ((3,), (2, 1, 0)) == request_options(tiny_voice, tree=[[3], [2, 1, 0]]).decode.tree
    with pytest.raises(ValueError, match="greedy"):
        request_options(tiny_voice, tree="dynamic", temperature=0.7)
    with pytest.raises(ValueError, match="tree"):
        request_options(tiny_voice, tree="two")


def _context_after_a_step(coarse, sampling):
    """A draft context as the decoder builds it, one step into a decode (so with features)."""
    target, drafter, prompt = coarse
    gen = SpecDecoder(target, drafter).generate(prompt, DecodeConfig(sampling, gamma=2, max_steps=30, seed=5))
    gen.step()
    return gen, DraftContext(gen.history, gen.n_prompt, gen.state, gen.policy, gen.generator, gen.target, gen._features())


def _path_probs(drafter, ctx, path_steps):
    """The drafter's warped logits ``[V]`` after ``path_steps`` (pending step first), drafted one by one."""
    next_logits, state, generated = drafter.next_logits_for(ctx, len(path_steps)), ctx.state, ctx.generated
    with torch.inference_mode():
        for j, step in enumerate(path_steps):
            logits = next_logits(j, step)
            if j:
                state = ctx.policy.layout.advance(state, step)
                generated = torch.cat([generated, step[None]])
        return ctx.policy.warp_rows(logits, [state], [generated])[0, 0]


def test_each_tree_node_drafts_what_the_chain_drafter_would_after_its_path(coarse):
    """The tree is drafted a depth at a time (one block call for all its nodes): every inner
    node's children come from the distribution the one-by-one chain computes after its path —
    top tokens when greedy, ``q`` rows in slot order when sampling."""
    _, drafter, _ = coarse
    for shape, sampling in itertools.product((TreeShape((2, 2, 1)), TreeShape(((3,), (2, 0, 1), (1, 0, 2)))),
                                             (SamplingConfig(temperature=0), SamplingConfig(temperature=0.9, top_k=6))):
        gen, ctx = _context_after_a_step(coarse, sampling)
        draft = drafter.tree(ctx, shape)
        tokens = draft.tokens
        for slot in range(len(shape.parents)):
            children = shape.children(slot)
            if not children:
                assert draft.q is None or not draft.q[slot].any()  # a leaf, or a node without children, proposes nothing
                continue
            path = [slot]
            while path[-1]:
                path.append(shape.parents[path[-1]])
            warped = _path_probs(drafter, ctx, [tokens[t] for t in reversed(path)])
            if sampling.greedy:
                assert tokens[children, 0].tolist() == warped.topk(len(children)).indices.tolist()
            else:
                assert torch.allclose(draft.q[slot], warped.softmax(-1), atol=1e-5)
                assert len(set(tokens[children, 0].tolist())) == len(children)  # drawn without replacement
        gen.close()


def test_a_dynamic_tree_keeps_the_likeliest_paths(coarse):
    _, drafter, _ = coarse
    gen, ctx = _context_after_a_step(coarse, SamplingConfig(temperature=0))
    chain = drafter.start(None).propose(ctx, 4).steps
    line = drafter.dynamic_tree(ctx, DynamicTree(4, 4, 1))  # one candidate a depth: the greedy chain
    assert line.tree.parents == (-1, 0, 1, 2, 3) and torch.equal(line.tokens[1:], chain)
    spec = DynamicTree(10, 4, 3)
    draft = drafter.dynamic_tree(ctx, spec)
    tree, tokens = draft.tree, draft.tokens[:, 0]
    assert tree.nodes == spec.nodes and tree.depth <= spec.depth
    for slot in range(1, len(tree.parents)):
        parent = tree.parents[slot]
        path = [parent]
        while path[-1]:
            path.append(tree.parents[path[-1]])
        logp = _path_probs(drafter, ctx, [draft.tokens[t] for t in reversed(path)]).log_softmax(-1)
        assert int(tokens[slot]) in logp.topk(spec.top_k).indices.tolist()  # among its parent's top k
    siblings = [tokens[tree.children(s)].tolist() for s in range(len(tree.parents))]
    assert all(len(set(c)) == len(c) for c in siblings)
    assert tree.depth > 1 and any(len(c) > 1 for c in siblings), "a line, not a tree: nothing tested"
    gen.close()


def test_the_controller_drafts_trees_where_they_pay_and_changes_no_token(coarse):
    """γ=auto with a drafter that drafts trees: the controller probes its candidate tree and
    drafts it where it promises more; greedy output equals plain decoding all the same."""
    target, drafter, prompt = coarse
    greedy = SamplingConfig(temperature=0)
    plain = SpecDecoder(target).generate(prompt, DecodeConfig(greedy, gamma=0, max_steps=30)).run()
    decoder = SpecDecoder(target, drafter)
    config = DecodeConfig(greedy, gamma="auto", max_steps=30,
                          controller=ControllerConfig(probe_every=2, tree_probe=3, trees=((2, 1),)))
    for _ in range(3):  # the memory carries the tree's record from one request to the next
        gen = decoder.generate(prompt, config)
        assert torch.equal(gen.run(), plain)
    record = gen.controller.estimates.trees[(2, 1)]
    assert record.passes >= 3, "the tree was never drafted: nothing tested"
    # A request that fixes its own tree, or accepts LOSSY (a rule for chains), is not offered the candidates.
    assert not decoder.generate(prompt, DecodeConfig(greedy, gamma="auto", tree=(3,), controller=config.controller)).controller.trees
    lossy = SamplingConfig(temperature=0, lossy_top_k=2)
    assert not decoder.generate(prompt, DecodeConfig(lossy, gamma="auto", controller=config.controller)).controller.trees


def test_draft_heads_carry_their_fitted_trees_to_the_controller(coarse):
    target, drafter, prompt = coarse
    assert drafter.trees == DEFAULT_TREES  # none fitted
    heads = tiny_draft_heads(target)
    heads.config.draft_trees = ["3/2,1,0", "2,2"]
    fitted = FeatureDrafter(target, heads)
    assert fitted.trees == (((3,), (2, 1, 0)), (2, 2))
    assert SpecDecoder(target, fitted).generate(prompt, DecodeConfig(gamma="auto")).controller.trees == fitted.trees
    for bad in (["3/2,1"], "3,1", [[3, 1]]):
        heads.config.draft_trees = bad
        with pytest.raises(ValueError, match="draft_trees"):
            FeatureDrafter(target, heads)


def test_a_drafter_that_cannot_draft_trees_is_refused(coarse):
    target, _, prompt = coarse
    medusa = MedusaDrafter(target, tiny_draft_heads(target, "medusa", n_heads=2))
    with pytest.raises(ValueError, match="does not draft trees"):
        SpecDecoder(target, medusa).generate(prompt, DecodeConfig(tree=(2, 1)))
    # Nor does the controller offer it one, however long it decodes (its probes would draft it).
    assert medusa.trees == ()
    gen = SpecDecoder(target, medusa).generate(prompt, DecodeConfig(SamplingConfig(temperature=0), gamma="auto", max_steps=30,
                                                                     controller=ControllerConfig(probe_every=1)))
    gen.run()
    assert not gen.controller.trees and gen.stats.tree_passes == 0


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
