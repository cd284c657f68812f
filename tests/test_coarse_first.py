"""The coarse-first layout and its fine stage: layout arithmetic, save/load, greedy exactness,
fine-stage streaming, and the sampled distribution of whole frames (chi-square, with controls)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import voicespec.engine.decoder as decoder_module
from helpers import chi_square_pvalue, exact_distribution
from test_distribution import accept_everything, sharpened
from test_exactness import drafters_for
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import Generation, SpecDecoder
from voicespec.engine.drafters import ModelDrafter
from voicespec.engine.layout import CoarseFirstLayout, LayoutState, layout_from_dict, masks_along
from voicespec.lm.loading import load_step_lm
from voicespec.engine.policy import TokenPolicy
from voicespec.engine.sampling import top_k_filter, top_p_filter
from voicespec.pipeline.tiny import codec_draft, tiny_codec_lm

GREEDY = SamplingConfig(temperature=0)


def test_layout_is_one_token_per_step_and_round_trips_frames():
    layout = CoarseFirstLayout(n_codebooks=3, codebook_size=8, min_frames=2)
    assert layout.groups == 1 and layout.vocab_size == 11 and layout.fine
    assert layout_from_dict(layout.to_dict()) == layout
    codes = torch.randint(0, 8, (3, 5))
    steps = layout.steps_for_frames(codes)
    assert steps.shape == (6, 1) and steps[-1, 0] == layout.eos_id and torch.equal(steps[:5, 0], codes[0])
    state = layout.initial_state()
    for s in steps:
        state = layout.advance(state, s)
    assert layout.is_done(state) and layout.complete_frames(state) == 5
    assert torch.equal(layout.frame_codes(steps, 0, 5), codes[:1])


def test_masks_forbid_eos_early_and_force_it_at_the_track_end():
    layout = CoarseFirstLayout(n_codebooks=2, codebook_size=4, min_frames=2)
    m = masks_along(layout, LayoutState(), torch.tensor([[0], [1], [2]]))
    assert not m[0, 0, layout.eos_id] and not m[1, 0, layout.eos_id] and m[2, 0, layout.eos_id]
    assert m[:, 0, :4].all() and not m[:, 0, layout.bos_id].any()
    fixed = layout.mask(LayoutState(steps=3, n_frames=3))  # a frame-aligned track of 3 frames
    assert fixed[0, layout.eos_id] and not fixed[0, :4].any()
    assert layout.mask(LayoutState(steps=4, end_frame=3))[0].nonzero().flatten().tolist() == [layout.pad_id]


def test_model_saves_and_loads_with_its_fine_stage(tmp_path):
    lm = tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=8, coarse_first=True, track_positions=4)
    lm.model.save_pretrained(tmp_path / "m")
    back = load_step_lm(str(tmp_path / "m"))
    assert isinstance(back.layout, CoarseFirstLayout) and back.model.fine is not None
    codes = torch.randint(0, 8, (1, 5, 1))
    track = torch.zeros(1, 5, 4, dtype=torch.long)
    a, _, ha = lm.model.forward_hidden(torch.tensor([[1, 2]]), codes, track)
    b, _, hb = back.model.forward_hidden(torch.tensor([[1, 2]]), codes, track)
    assert a.shape == (1, 7, 1, 11) and torch.allclose(a, b) and torch.allclose(ha, hb)
    frames = torch.randint(0, 8, (5, 3))
    prev = torch.cat([torch.full((1, 3), 8), frames[:-1]])
    assert torch.allclose(lm.model.fine.logits(ha[0, 2:], frames, prev), back.model.fine.logits(hb[0, 2:], frames, prev))


def test_fine_stage_sampling_follows_its_teacher_forced_factorization():
    """``generate`` (codebook by codebook, frame by frame) picks from exactly the logits that
    ``logits`` (teacher-forced, the training loss) gives for the codes it picked."""
    fine = tiny_codec_lm(seed=4, n_codebooks=4, codebook_size=8, coarse_first=True).model.fine
    h, coarse = torch.randn(6, 64), torch.randint(0, 8, (6,))
    seen: list[torch.Tensor] = []

    def pick(logits: torch.Tensor) -> torch.Tensor:
        seen.append(logits)
        return logits.argmax()

    with torch.no_grad():
        frames = fine.generate(h, coarse, torch.full((4,), 8), pick)
        prev = torch.cat([torch.full((1, 4), 8), frames.T[:-1]])
        forced = fine.logits(h, frames.T, prev)  # [6, 3, 8]
    assert torch.equal(frames[0], coarse)
    assert torch.allclose(torch.stack(seen).view(6, 3, 8), forced, atol=1e-5)
    # streaming: two calls carrying the last frame give the same frames as one call
    with torch.no_grad():
        first = fine.generate(h[:2], coarse[:2], torch.full((4,), 8), lambda x: x.argmax())
        rest = fine.generate(h[2:], coarse[2:], first[:, -1], lambda x: x.argmax())
    assert torch.equal(torch.cat([first, rest], 1), frames)


def test_greedy_speculation_equals_plain_frames_for_every_drafter():
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=6, coarse_first=True)
    prompt = target.layout.prompt([1, 2, 3, 4])
    plain = SpecDecoder(target, None, DecodeConfig(GREEDY, gamma=0, max_steps=40)).generate(prompt)
    plain_frames = plain.run()
    assert plain_frames.shape[0] == 3 and plain_frames.shape[1] == plain.stats.frames > 0
    for name, drafter in drafters_for(target, codec_draft(target)).items():
        for gamma in (1, 3, 6):
            gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=gamma, max_steps=40)).generate(prompt)
            frames = gen.run()
            assert torch.equal(gen.generated, plain.generated), f"{name} γ={gamma}"
            assert torch.equal(frames, plain_frames), f"{name} γ={gamma}"


def test_sampled_fine_codes_do_not_depend_on_gamma():
    """The fine stage draws from its own seeded stream: the same coarse codes get the same fine
    codes whatever γ (here the draft is the target itself, so every γ commits the same coarse
    sequence only when each draw agrees; we compare frames wherever the coarse rows agree)."""
    target = tiny_codec_lm(seed=6, n_codebooks=3, codebook_size=8, min_frames=6, coarse_first=True)
    prompt = target.layout.prompt([1, 2])
    sampling = SamplingConfig(temperature=0.9, top_k=4)
    runs = [SpecDecoder(target, ModelDrafter(target), DecodeConfig(sampling, gamma=g, max_steps=30, seed=7))
            .generate(prompt).run() for g in (0, 3)]
    n = min(r.shape[1] for r in runs)
    agree = (runs[0][0, :n] == runs[1][0, :n]).long().cumprod(0).sum()  # common coarse prefix
    assert agree > 0 and torch.equal(runs[0][:, :agree], runs[1][:, :agree])


# --- sampling: the whole frames' distribution -----------------------------------------------------

SAMPLING = SamplingConfig(temperature=1.3, top_k=3)
N_STEPS = 2


def coarse_case():
    target = sharpened(tiny_codec_lm(seed=21, n_codebooks=2, codebook_size=4, min_frames=3, coarse_first=True))
    with torch.no_grad():
        for mlp in target.model.fine.depth:
            mlp[-1].weight.mul_(8.0)
    draft = sharpened(tiny_codec_lm(seed=22, n_layers=1, n_codebooks=2, codebook_size=4, min_frames=3, coarse_first=True))
    return target, draft, target.layout.prompt([1, 2, 3])


def _fine_probs(logits: torch.Tensor) -> torch.Tensor:
    x = top_p_filter(top_k_filter(logits / SAMPLING.temperature, SAMPLING.top_k), SAMPLING.top_p)
    return x.softmax(-1)


def exact_frames(target, prompt) -> dict[tuple, float]:
    """P(frames) = P(coarse codes) x P(fine codes | hidden states, coarse codes), enumerated."""
    coarse = exact_distribution(target, prompt, TokenPolicy(target.layout, SAMPLING), N_STEPS)
    model, S, C = target.model, prompt.text.numel(), target.layout.codebook_size
    out: dict[tuple, float] = {}
    for seq, p in coarse.items():
        steps = torch.tensor(seq)
        with torch.no_grad():
            _, _, h = model.forward_hidden(prompt.text[None], torch.cat([prompt.steps, steps])[None])
            first = _fine_probs(model.fine.logits(h[0, S:S + 1], torch.tensor([[seq[0][0], 0]]), torch.tensor([[C, C]]))[0, 0])
            for f1 in first.nonzero().flatten().tolist():
                prev = torch.tensor([[seq[0][0], f1]])
                second = _fine_probs(model.fine.logits(h[0, S + 1:S + 2], torch.tensor([[seq[1][0], 0]]), prev)[0, 0])
                for f2 in second.nonzero().flatten().tolist():
                    key = ((seq[0][0], seq[1][0]), (f1, f2))
                    out[key] = p * float(first[f1]) * float(second[f2])
    return out


def empirical_frames(target, drafter, prompt, n: int) -> Counter:
    counts: Counter = Counter()
    decoder = SpecDecoder(target, drafter, DecodeConfig(SAMPLING, gamma=2, max_steps=N_STEPS))
    for seed in range(n):
        frames = decoder.generate(prompt, DecodeConfig(SAMPLING, gamma=2, max_steps=N_STEPS, seed=seed)).run()
        counts[tuple(tuple(row) for row in frames.tolist())] += 1
    return counts


@pytest.mark.slow
def test_speculative_sampling_gives_the_targets_distribution_of_whole_frames(monkeypatch):
    target, draft, prompt = coarse_case()
    exact = exact_frames(target, prompt)
    assert abs(sum(exact.values()) - 1) < 1e-5
    counts = empirical_frames(target, ModelDrafter(draft), prompt, 800)
    assert set(counts) <= set(exact), "produced frames the target gives probability zero"
    assert chi_square_pvalue(counts, exact) > 1e-3

    # Controls: a wrong acceptance rule, and a fine stage that ignores its distribution, both fail.
    with monkeypatch.context() as m:
        m.setattr(decoder_module, "verify_sampling", accept_everything)
        assert chi_square_pvalue(empirical_frames(target, ModelDrafter(draft), prompt, 300), exact) < 1e-6
    with monkeypatch.context() as m:
        m.setattr(Generation, "_pick_fine", lambda self, logits: logits.argmax())
        assert chi_square_pvalue(empirical_frames(target, ModelDrafter(draft), prompt, 300), exact) < 1e-6


def test_a_delay_draft_is_refused_for_a_coarse_first_target():
    target = tiny_codec_lm(seed=8, n_codebooks=3, codebook_size=8, coarse_first=True)
    draft = codec_draft(target)
    assert ModelDrafter(draft).layout == target.layout and draft.model.fine is None  # drafts carry no fine stage
    delay = tiny_codec_lm(seed=8, n_codebooks=3, codebook_size=8)
    with pytest.raises(ValueError, match="does not match"):
        SpecDecoder(target, ModelDrafter(delay))
