"""Decoding the coarse-first layout, one frame a step and grouped (two frames a step): greedy
exactness, fine codes independent of γ, and the sampled distribution of whole frames (chi-square,
with controls). The layout's arithmetic is in test_layout.py, the fine stage's own tests in
tests/lm/test_codec_lm.py."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import replace

import pytest
import torch

import voicespec.engine.decoder as decoder_module
import voicespec.engine.tree as tree_module
import voicespec.lm.codec_lm as codec_lm_module
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import EarlyExitDrafter, FeatureDrafter, MedusaDrafter, ModelDrafter
from voicespec.engine.drafters.base import Draft
from voicespec.engine.step_lm import Pass
from voicespec.engine.policy import TokenPolicy
from voicespec.engine.sampling import top_k_filter, top_p_filter
from voicespec.engine.work import drive_batch
from voicespec.frame_blocks import FrameBlocks
from voicespec.pipeline.tiny import codec_draft, tiny_codec_lm, tiny_draft_heads

GREEDY = SamplingConfig(temperature=0)


GROUPINGS = pytest.mark.parametrize("reads_prev,group", [(True, 1), (False, 1), (True, 2), (False, 2)],
                                    ids=["fine-reads-prev", "fine-batched", "grouped-reads-prev", "grouped-batched"])


@pytest.mark.slow
@GROUPINGS
def test_greedy_speculation_equals_plain_frames_for_every_drafter(drafters_for, reads_prev, group):
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=6, coarse_first=True, fine_reads_prev=reads_prev,
                           frames_per_step=group)
    prompt = target.layout.prompt([1, 2, 3, 4])
    plain = SpecDecoder(target, None, DecodeConfig(GREEDY, gamma=0, max_steps=40)).generate(prompt)
    plain_frames = plain.run()
    steps = plain.generated.shape[0] - (plain.stats.finish_reason == "eos")  # the EOS step holds no frame
    assert plain_frames.shape[0] == 3 and plain_frames.shape[1] == plain.stats.frames == group * steps > 0
    for name, drafter in drafters_for(target, codec_draft(target)).items():
        for gamma in (1, 3, 6):
            gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=gamma, max_steps=40)).generate(prompt)
            frames = gen.run()
            assert torch.equal(gen.generated, plain.generated), f"{name} γ={gamma}"
            assert torch.equal(frames, plain_frames), f"{name} γ={gamma}"


@GROUPINGS
def test_sampled_fine_codes_do_not_depend_on_gamma(reads_prev, group):
    """The fine stage draws from its own seeded stream: the same coarse codes get the same fine
    codes whatever γ (here the draft is the target itself, so every γ commits the same coarse
    sequence only when each draw agrees; we compare frames wherever the backbone's tokens agree)."""
    target = tiny_codec_lm(seed=6, n_codebooks=3, codebook_size=8, min_frames=6, coarse_first=True, fine_reads_prev=reads_prev,
                           frames_per_step=group)
    prompt = target.layout.prompt([1, 2])
    sampling = SamplingConfig(temperature=0.9, top_k=4)
    gens = [SpecDecoder(target, ModelDrafter(target), DecodeConfig(sampling, gamma=g, max_steps=30, seed=7)).generate(prompt)
            for g in (0, 3)]
    runs = [g.run() for g in gens]
    n = min(g.generated.shape[0] for g in gens)
    agree = int((gens[0].generated[:n, 0] == gens[1].generated[:n, 0]).long().cumprod(0).sum())  # common step prefix
    assert agree > 0 and torch.equal(runs[0][:, :group * agree], runs[1][:, :group * agree])


# --- sampling: the whole frames' distribution -----------------------------------------------------

SAMPLING = SamplingConfig(temperature=1.3, top_k=3, coupling="residual")  # the residual rule (Leviathan et al.)
INVARIANT = replace(SAMPLING, coupling="invariant")  # each position's own Gumbel noise (engine/noise.py)
N_STEPS = 2


def coarse_case(sharpened, reads_prev: bool = True, group: int = 1):
    target = sharpened(tiny_codec_lm(seed=21, n_codebooks=2, codebook_size=4, min_frames=3, coarse_first=True,
                                     fine_reads_prev=reads_prev, frames_per_step=group))
    with torch.no_grad():  # sharpened so the whole frames' distribution has bins a chi-square can test: a step
        for mlp in target.model.fine.depth:  # of two frames has three fine slots (6,561 outcomes in all at 8x)
            mlp[-1].weight.mul_(8.0 if group == 1 else 300.0)
    draft = sharpened(tiny_codec_lm(seed=22, n_layers=1, n_codebooks=2, codebook_size=4, min_frames=3, coarse_first=True,
                                    frames_per_step=group))
    return target, draft, target.layout.prompt([1, 2, 3])


def _fine_probs(logits: torch.Tensor) -> torch.Tensor:
    x = top_p_filter(top_k_filter(logits / SAMPLING.temperature, SAMPLING.top_k), SAMPLING.top_p)
    return x.softmax(-1)


def exact_frames(target, prompt, exact_distribution) -> dict[tuple, float]:
    """P(frames) = P(coarse codes) x P(every other code of each step, slot by slot | its hidden
    state, the codes before it), enumerated; keyed by the frames' rows."""
    coarse = exact_distribution(target, prompt, TokenPolicy(target.layout, SAMPLING), N_STEPS)
    model, S, C = target.model, prompt.text.numel(), target.layout.codebook_size
    fine, K = model.fine, model.config.n_codebooks
    out: dict[tuple, float] = {}

    def walk(h: torch.Tensor, seq: tuple, j: int, slots: list[int], done: list[list[int]], p: float) -> None:
        """Step ``j``'s slots so far ``slots``; ``done``: the slots of the steps before it."""
        if len(slots) == fine.slots:
            slots, done, j = [], done + [slots], j + 1
        if j == len(seq):
            frames = torch.tensor(done).view(len(done), fine.G, K).flatten(0, 1).T  # [K, steps G]
            key = tuple(tuple(row) for row in frames.tolist())
            out[key] = out.get(key, 0.0) + p
            return
        if not slots:
            slots = [seq[j][0]]
        prev = torch.tensor([done[-1][-K:] if done else [C] * K])
        codes = torch.tensor([slots + [0] * (fine.slots - len(slots))])
        probs = _fine_probs(fine.logits(h[j: j + 1], codes, prev)[0, len(slots) - 1])
        for code in probs.nonzero().flatten().tolist():
            walk(h, seq, j, slots + [code], done, p * float(probs[code]))

    for seq, p in coarse.items():
        steps = torch.tensor(seq)
        with torch.no_grad():
            _, h = model.forward_hidden(prompt.text[None], torch.cat([prompt.steps, steps])[None])
            walk(h[0, S:], seq, 0, [], [], p)
    return out


def _key(frames: torch.Tensor) -> tuple:
    return tuple(tuple(row) for row in frames.tolist())


def empirical_frames(target, drafter, prompt, n: int, tree=None, sampling: SamplingConfig = SAMPLING) -> Counter:
    counts: Counter = Counter()
    decoder = SpecDecoder(target, drafter, DecodeConfig(sampling, gamma=2, max_steps=N_STEPS))
    for seed in range(n):
        config = DecodeConfig(sampling, gamma=2, max_steps=N_STEPS, seed=seed, tree=tree)
        counts[_key(decoder.generate(prompt, config).run())] += 1
    return counts


def empirical_frames_tree(target, drafter, prompt, n: int) -> Counter:
    """As :func:`empirical_frames`, the first step a draft tree of two candidates (the second,
    with one step left, plain)."""
    return empirical_frames(target, drafter, prompt, n, tree=(2,))


def empirical_frames_batched(target, drafter, prompt, n: int, per_batch: int = 6) -> Counter:
    """As :func:`empirical_frames`, but each generation shares its passes (target, fine stage,
    warp) with others of the batch: more of the same prompt, and sessions of other lengths."""
    counts: Counter = Counter()
    decoder = SpecDecoder(target, drafter, DecodeConfig(SAMPLING, gamma=2, max_steps=N_STEPS))
    others = [target.layout.prompt([1]), target.layout.prompt([3, 1, 2, 3, 1, 2])]
    for first in range(0, n, per_batch):
        gens = [decoder.generate(prompt, DecodeConfig(SAMPLING, gamma=2, max_steps=N_STEPS, seed=s))
                for s in range(first, min(first + per_batch, n))]
        extra = [decoder.generate(p, DecodeConfig(SAMPLING, gamma=g, max_steps=5, seed=first + g))
                 for g, p in enumerate(others, start=1)]

        for frames in drive_batch([g.decode() for g in gens + extra])[: len(gens)]:
            counts[_key(frames)] += 1
    return counts


def empirical_frames_batched_fine(target, drafter, prompt, n: int) -> Counter:
    """As :func:`empirical_frames`, with a target whose fine stage completes a pass's frames at once."""
    return empirical_frames(target, drafter, prompt, n)


def _drafter(kind: str, target, draft):
    if kind == "draft-model":
        return ModelDrafter(draft)
    if kind == "early-exit":
        return EarlyExitDrafter(target, 1)
    if kind == "medusa":
        return MedusaDrafter(target, tiny_draft_heads(target, kind, n_heads=2))
    return FeatureDrafter(target, tiny_draft_heads(target, inference_weights="int8" if kind == "feature-int8" else "float32"))


@pytest.mark.slow
@pytest.mark.parametrize("empirical,kind,group", [
    (empirical_frames, "draft-model", 1), (empirical_frames_batched, "draft-model", 1), (empirical_frames, "feature", 1),
    (empirical_frames, "medusa", 1), (empirical_frames_batched, "early-exit", 1), (empirical_frames_tree, "feature-int8", 1),
    (empirical_frames_batched_fine, "feature", 1), (empirical_frames_batched, "draft-model", 2),
    (empirical_frames_batched_fine, "feature", 2)],
    ids=["alone", "batched", "feature-heads", "medusa-heads", "early-exit-batched", "feature-int8-tree",
         "feature-heads-batched-fine", "grouped-batched", "grouped-feature-heads-batched-fine"])
def test_speculative_sampling_gives_the_targets_distribution_of_whole_frames(
        empirical, kind, group, monkeypatch, sharpened, exact_distribution, chi_square_pvalue, accept_everything):
    """Alone, and through the batched path with each generation mixed with sessions of other
    prompt lengths and γ; a separate draft model, and draft heads reading the target's state;
    one frame a step, and two (the whole groups' distribution)."""
    target, draft, prompt = coarse_case(sharpened, reads_prev=empirical is not empirical_frames_batched_fine, group=group)
    drafter = _drafter(kind, target, draft)
    exact = exact_frames(target, prompt, exact_distribution)
    assert abs(sum(exact.values()) - 1) < 1e-5
    counts = empirical(target, drafter, prompt, 800)
    assert set(counts) <= set(exact), "produced frames the target gives probability zero"
    assert chi_square_pvalue(counts, exact) > 1e-3

    # Controls: a wrong acceptance rule, and a fine stage that ignores its distribution, both fail.
    # (The early exit is the target's own first layer: its drafts are close to the target's, so
    # accepting all of them needs more samples to show.)
    n_control = 800 if kind == "early-exit" else 300
    with monkeypatch.context() as m:
        if empirical is empirical_frames_tree:  # recursive rejection without subtracting q
            m.setattr(tree_module, "residual", lambda p, q, token: p)
        else:
            m.setattr(decoder_module, "verify_sampling", accept_everything)
        assert chi_square_pvalue(empirical(target, drafter, prompt, n_control), exact) < 1e-6
    with monkeypatch.context() as m:
        m.setattr(codec_lm_module, "choose_rows", lambda logits, config, uniforms: logits.argmax(-1))
        assert chi_square_pvalue(empirical(target, drafter, prompt, 300), exact) < 1e-6


@pytest.mark.slow
def test_a_tree_by_node_samples_the_targets_coarse_codes(sharpened, exact_distribution, chi_square_pvalue, monkeypatch):
    """Three steps, the first a tree by node (two candidates, then two children under the first
    and one under the second: the second takes the first of its two draws): the coarse codes
    are the target's; the control, a residual that forgets to subtract q, is not."""
    target, _, prompt = coarse_case(sharpened)
    drafter = FeatureDrafter(target, tiny_draft_heads(target))
    exact = exact_distribution(target, prompt, TokenPolicy(target.layout, SAMPLING), 3)
    decoder = SpecDecoder(target, drafter)

    def coarse_codes(n: int) -> Counter:
        counts: Counter = Counter()
        for seed in range(n):
            gen = decoder.generate(prompt, DecodeConfig(SAMPLING, max_steps=3, seed=seed, tree=((2,), (2, 1))))
            gen.run()
            assert gen.stats.tree_passes >= 1
            counts[tuple(tuple(step) for step in gen.generated.tolist())] += 1
        return counts

    assert chi_square_pvalue(coarse_codes(500), exact) > 1e-3
    monkeypatch.setattr(tree_module, "residual", lambda p, q, token: p)
    assert chi_square_pvalue(coarse_codes(400), exact) < 1e-6


@pytest.mark.slow
@GROUPINGS
def test_invariant_sampling_commits_plain_decodings_frames_for_every_drafter_gamma_tree_and_batch(drafters_for, reads_prev,
                                                                                                  group):
    """The invariant coupling: for a seed, speculation changes nothing but the speed (every
    drafter, γ, a tree, the adaptive controller, and batched with other sessions)."""
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=6, coarse_first=True, fine_reads_prev=reads_prev,
                           frames_per_step=group)
    prompt = target.layout.prompt([1, 2, 3, 4])
    sampling = SamplingConfig(temperature=1.0, top_k=5)
    assert sampling.coupling == "invariant"  # the default
    for seed in range(3):
        plain = SpecDecoder(target, None, DecodeConfig(sampling, gamma=0, max_steps=30, seed=seed)).generate(prompt)
        plain_frames = plain.run()
        accepted = 0
        for name, drafter in drafters_for(target, codec_draft(target)).items():
            trees = [(2, 1), ((3,), (2, 1, 0))] if getattr(drafter, "drafts_trees", False) else []
            for gamma, tree in [(1, None), (4, None), ("auto", None), *((2, t) for t in trees)]:
                config = DecodeConfig(sampling, gamma=gamma, max_steps=30, seed=seed, tree=tree)
                gen = SpecDecoder(target, drafter, config).generate(prompt)
                frames = gen.run()
                assert torch.equal(gen.generated, plain.generated), f"{name} γ={gamma} tree={tree} seed={seed}"
                assert torch.equal(frames, plain_frames), f"{name} γ={gamma} tree={tree} seed={seed}"
                accepted += gen.stats.accepted
            batch = [SpecDecoder(target, drafter, DecodeConfig(sampling, gamma=g, max_steps=30, seed=s)).generate(p)
                     for g, s, p in [(2, seed, prompt), (3, seed + 7, target.layout.prompt([2])), (1, seed, prompt)]]
            out = drive_batch([g.decode() for g in batch])
            assert torch.equal(out[0], plain_frames) and torch.equal(out[2], plain_frames), f"{name} batched"
        assert accepted > 0  # drafts were accepted: speculation took part


def _accept_everything_greedy(draft, logits):
    from voicespec.engine.verify import _assemble

    return _assemble(draft, draft.numel(), logits[draft.shape[0]].argmax(-1), logits.shape[1])


@pytest.mark.slow
@pytest.mark.parametrize("group", [1, 2], ids=["frames", "groups"])
def test_invariant_sampling_gives_the_targets_distribution_of_whole_frames(
        group, monkeypatch, sharpened, exact_distribution, chi_square_pvalue):
    """Whole frames (and whole groups) under the invariant coupling, speculating with a separate
    draft model; the controls: uniform noise in place of Gumbel noise, and accepting every draft, both fail."""
    import voicespec.engine.noise as noise_module

    target, draft, prompt = coarse_case(sharpened, group=group)
    drafter = ModelDrafter(draft)
    exact = exact_frames(target, prompt, exact_distribution)
    counts = empirical_frames(target, drafter, prompt, 800, sampling=INVARIANT)
    assert set(counts) <= set(exact), "produced frames the target gives probability zero"
    assert chi_square_pvalue(counts, exact) > 1e-3
    with monkeypatch.context() as m:
        m.setattr(noise_module.PositionNoise, "at", lambda self, position, shape: torch.rand(shape))
        assert chi_square_pvalue(empirical_frames(target, drafter, prompt, 300, sampling=INVARIANT), exact) < 1e-6
    with monkeypatch.context() as m:
        m.setattr(decoder_module, "verify_greedy", _accept_everything_greedy)
        assert chi_square_pvalue(empirical_frames(target, drafter, prompt, 300, sampling=INVARIANT), exact) < 1e-6


def test_a_delay_draft_is_refused_for_a_coarse_first_target():
    target = tiny_codec_lm(seed=8, n_codebooks=3, codebook_size=8, coarse_first=True)
    draft = codec_draft(target)
    assert ModelDrafter(draft).layout == target.layout and draft.model.fine is None  # drafts carry no fine stage
    delay = tiny_codec_lm(seed=8, n_codebooks=3, codebook_size=8)
    with pytest.raises(ValueError, match="does not match"):
        SpecDecoder(target, ModelDrafter(delay))


class _Oracle:
    """A drafter that knows the greedy continuation (so every draft is accepted) and takes
    ``step_s`` seconds per drafted step."""

    name, layout = "oracle", None

    def __init__(self, steps: torch.Tensor, step_s: float) -> None:
        self.steps, self.step_s = steps, step_s

    def start(self, prompt):
        return self

    def propose(self, ctx, gamma):
        n = ctx.history.shape[0] - ctx.n_prompt
        out = self.steps[n: n + gamma]
        time.sleep(self.step_s * out.shape[0])
        return Draft(out)

    def rollback(self, keep):
        pass

    def close(self):
        pass


@pytest.mark.slow
def test_under_load_drafting_is_charged_per_session_in_the_batch_and_speculation_turns_off():
    """The same generation, its passes reported as run alone or in a batch of 64: alone, a
    perfect drafter at a fraction of a pass's cost pays (γ > 0); in the batch, where every session
    waits for each one's drafts, the controller switches speculation off (only probes remain)."""
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=200, coarse_first=True)
    prompt = target.layout.prompt([1, 2, 3])
    config = DecodeConfig(GREEDY, gamma="auto", max_steps=200)
    plain = SpecDecoder(target, None, replace(config, gamma=0)).generate(prompt)
    plain.run()
    pass_s = plain.stats.verify_s / plain.stats.target_passes

    def gammas(batch: int) -> list[int]:
        gen = SpecDecoder(target, _Oracle(plain.generated, pass_s / 10), config).generate(prompt)

        def steps():
            while not gen.done:
                yield from gen.advance()

        co, result = steps(), None
        with contextlib.suppress(StopIteration):
            while True:
                work = co.send(result)
                result = type(work).run([work])[0]
                if isinstance(work, Pass):
                    work.batch = batch
        assert torch.equal(gen.generated, plain.generated)
        return gen.stats.gammas[10:]

    alone, loaded = gammas(1), gammas(64)
    assert sum(g > 0 for g in alone) > 0.8 * len(alone)
    assert sum(g > 0 for g in loaded) < 0.2 * len(loaded)


@pytest.mark.parametrize("group", [1, 2], ids=["frames", "groups"])
def test_run_batch_equals_each_prompt_alone(group):
    """Greedy and seeded sampling, prompts of different lengths, speculation with rejections."""
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=4, coarse_first=True, frames_per_step=group)
    decoder = SpecDecoder(target, ModelDrafter(codec_draft(target)))
    prompts = [target.layout.prompt(ids) for ids in ([1], [2, 3, 1, 2], [3, 3, 1])]
    for sampling in (GREEDY, SamplingConfig(temperature=1.0, top_k=4)):
        configs = [DecodeConfig(sampling, gamma=g, max_steps=30, seed=9 + g) for g in (0, 2, 3)]
        batch = decoder.run_batch(prompts, configs)
        for p, c, frames in zip(prompts, configs, batch):
            alone = decoder.generate(p, c).run()
            assert frames.shape[1] > 0 and torch.equal(frames, alone)


def test_the_auto_drafter_changes_no_token_whoever_drafts():
    """Candidates that are always right, always wrong, and n-gram: greedy output is plain decoding's."""
    from voicespec.engine.drafters import ChoiceDrafter, NGramDrafter

    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=60, coarse_first=True)
    prompt = target.layout.prompt([1, 2, 3])
    config = DecodeConfig(GREEDY, gamma="auto", max_steps=60)
    plain = SpecDecoder(target, None, replace(config, gamma=0)).generate(prompt)
    plain_frames = plain.run()
    choice = ChoiceDrafter({"wrong": _Oracle((plain.generated + 1) % 8, 0.0), "oracle": _Oracle(plain.generated, 0.0),
                            "ngram": NGramDrafter()})
    gen = SpecDecoder(target, choice, config).generate(prompt)
    assert torch.equal(gen.run(), plain_frames) and torch.equal(gen.generated, plain.generated)
    assert set(gen.draft_session.chosen) == {"wrong", "oracle", "ngram"}



@pytest.mark.slow
@GROUPINGS
@pytest.mark.parametrize("before", [0, 5], ids=["first", "later-sentence"])
def test_fine_stage_in_blocks_gives_the_same_frames_at_block_ends(reads_prev, group, before):
    """With ``fine_blocks`` the fine stage completes the verified steps only once their frames
    reach the stream's next block end (2, 6, 14, 22, ... frames, counted from the stream's start:
    ``before`` frames of earlier sentences) or the utterance ends, in one call: the same frames as
    after every pass, greedy and seeded sampling, plain and speculative, alone and batched."""
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=30, coarse_first=True, fine_reads_prev=reads_prev,
                           frames_per_step=group)
    prompts = [target.layout.prompt(ids) for ids in ([1, 2, 3, 4], [2, 1])]
    blocks = FrameBlocks(2, 8)
    for sampling in (GREEDY, SamplingConfig(temperature=1.0, top_k=4)):
        for gamma in (0, 3):
            config = DecodeConfig(sampling, gamma=gamma, max_steps=25, seed=4)
            every_pass = SpecDecoder(target, ModelDrafter(codec_draft(target)), config).generate(prompts[0]).run()
            in_blocks = SpecDecoder(target, ModelDrafter(codec_draft(target)), config, fine_blocks=blocks)
            gen, chunks, released, calls = in_blocks.generate(prompts[0], frames_before=before), [], 0, 0
            while not gen.done:
                chunks.append(gen.step().frames)
                verified = group * (gen.stats.generated_steps - (gen.stats.finish_reason == "eos"))  # their frames (EOS has none)
                due = blocks.next_end(before + released) - before
                assert chunks[-1].shape[1] == (verified - released if verified >= due or gen.done else 0), (sampling, gamma)
                released, calls = released + chunks[-1].shape[1], calls + bool(chunks[-1].shape[1])
            assert torch.equal(torch.cat(chunks, 1), every_pass) and every_pass.shape[1] > 14, (sampling, gamma)
            assert gamma or calls < gen.stats.target_passes / 2  # plain: a call per block, not per step
            batch = in_blocks.run_batch(prompts, [config] * 2)
            assert torch.equal(batch[0], every_pass), (sampling, gamma)
