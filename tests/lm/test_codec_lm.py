"""The codec LM: in frame-aligned mode the track conditions every step, fixes the length and
speculation stays exact; the coarse-first fine stage saves, loads and samples from exactly the
factorization it is trained on."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.engine.layout import CoarseFirstLayout, Prompt
from voicespec.lm.codec_lm import slot_mask, step_slots
from voicespec.lm.loading import load_step_lm
from voicespec.pipeline.tiny import codec_draft, tiny_codec_lm, tiny_flat

GREEDY = SamplingConfig(temperature=0)
P = 8


def aligned(seed: int = 3, delays=None):
    return tiny_codec_lm(seed=seed, n_codebooks=3, codebook_size=8, delays=delays, track_positions=P)


def track(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    units = torch.randint(1, 30, (n, 2), generator=g)
    pos = torch.randint(0, P, (n, 2), generator=g)
    return torch.cat([units, pos], dim=1)


@pytest.mark.parametrize("delays", [[0, 1, 2], [0, 0, 0]])
def test_aligned_speculation_equals_plain_and_length_is_the_tracks(delays, naive_greedy):
    target = aligned(delays=delays)
    prompt = target.layout.prompt([1, 2, 3], track=track(17))
    plain = SpecDecoder(target, None, DecodeConfig(GREEDY, gamma=0, max_steps=60)).generate(prompt)
    frames = plain.run()
    assert plain.stats.finish_reason == "eos" and frames.shape[1] == 17  # EOS forced at the track's end
    assert torch.equal(plain.generated, naive_greedy(target, prompt, 60))
    for drafter in (NGramDrafter(), ModelDrafter(codec_draft(target))):
        for gamma in (1, 4):
            gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=gamma, max_steps=60)).generate(prompt)
            assert torch.equal(gen.run(), frames), f"{drafter.name} γ={gamma}"


def test_sampled_length_is_exactly_the_tracks():
    target = aligned()
    prompt = target.layout.prompt([4], track=track(9, seed=1))
    for seed in range(5):
        config = DecodeConfig(gamma=2, seed=seed, max_steps=40)
        assert SpecDecoder(target, NGramDrafter(), config).generate(prompt).run().shape[1] == 9


def test_the_track_conditions_every_step():
    target = aligned()
    a, b = track(12, seed=1), track(12, seed=2)
    steps = torch.full((1, 3), target.layout.bos_id)
    la = target.start(Prompt(torch.tensor([1]), steps, a)).forward(steps)
    lb = target.start(Prompt(torch.tensor([1]), steps, b)).forward(steps)
    assert not torch.allclose(la, lb)


def test_incremental_track_rows_match_one_full_pass():
    target = aligned()
    prompt = target.layout.prompt([1, 2], track=track(10))
    gen = SpecDecoder(target, None, DecodeConfig(GREEDY, gamma=0, max_steps=30)).generate(prompt)
    gen.run()
    seq = torch.cat([prompt.steps, gen.generated])
    full = target.start(prompt).forward(seq)
    inc = target.start(prompt)
    parts = [inc.forward(seq[i : i + 4]) for i in range(0, seq.shape[0], 4)]
    assert torch.allclose(torch.cat(parts), full, atol=1e-5)


def test_embed_at_is_what_the_target_embeds_at_those_positions():
    """The drafters' lookup (track embeddings computed once per request) equals the model's own
    embedding of the same steps and track rows, inside the track, at its end and past it (END)."""
    target = aligned()
    prompt = target.layout.prompt([1, 2], track=track(10))
    session = target.start(prompt)
    steps = torch.tensor([[3, 1, 4], [1, 5, 9], [2, 6, 5]])[:, : target.layout.groups]
    for start in (0, 4, 9, 15):
        want = target.model.embed(None, steps[None], session.track_rows(start, 3))
        assert torch.equal(session.embed_at(steps, start), want), start
        # a tree depth's nodes: every step at one position
        same = torch.cat([target.model.embed(None, steps[i: i + 1][None], session.track_rows(start, 1)) for i in range(3)], 1)
        assert torch.equal(session.embed_at(steps, start, together=True), same), start


def test_newcomers_prefill_in_one_padded_pass_as_each_would_alone():
    """start_batch: prompts of different lengths in one pass give each session what starting it
    alone gives (hidden states, then its next pass); a prompt the model cannot read gets its own
    error and the others start."""
    target = aligned()
    prompts = [target.layout.prompt(list(range(1, 2 + 3 * i)), track=track(6 + 3 * i, seed=i)) for i in range(3)]
    alone = [target.start(p) for p in prompts]
    together = target.start_batch([prompts[0], Prompt(torch.tensor([1]), prompts[0].steps), prompts[1], prompts[2]])
    assert isinstance(together[1], ValueError) and "frame-aligned text track" in str(together[1])
    del together[1]
    for p, a, b in zip(prompts, alone, together):
        assert a.length == b.length and a.hidden.shape == b.hidden.shape
        assert torch.allclose(a.hidden, b.hidden, atol=1e-5)
        assert torch.allclose(a.forward(p.steps[-1:]), b.forward(p.steps[-1:]), atol=1e-5)


def test_track_mismatches_are_clear_errors():
    steps = torch.full((1, 3), 9)  # BOS of 3x8 codes
    with pytest.raises(ValueError, match="frame-aligned text track"):
        aligned().start(Prompt(torch.tensor([1]), steps))
    plain = tiny_codec_lm(n_codebooks=3, codebook_size=8)
    with pytest.raises(ValueError, match="no frame-aligned track"):
        plain.start(Prompt(torch.tensor([1]), steps, track(4)))
    with pytest.raises(ValueError, match="positions"):
        aligned().start(Prompt(torch.tensor([1]), steps, track(4) + P)).forward(steps)
    flat = tiny_flat()
    with pytest.raises(ValueError, match="no frame-aligned track"):
        flat.layout.initial_state(Prompt(torch.empty(0, dtype=torch.long), torch.ones(2, 1, dtype=torch.long), track(3)))


# --- coarse-first: the fine stage ----------------------------------------------------------------


def test_model_saves_and_loads_with_its_fine_stage(tmp_path):
    lm = tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=8, coarse_first=True, track_positions=4)
    lm.model.save(tmp_path / "m")
    back = load_step_lm(str(tmp_path / "m"))
    assert isinstance(back.layout, CoarseFirstLayout) and back.model.fine is not None
    codes = torch.randint(0, 8, (1, 5, 1))
    track = torch.zeros(1, 5, 4, dtype=torch.long)
    a, ha = lm.model.forward_hidden(torch.tensor([[1, 2]]), codes, track)
    b, hb = back.model.forward_hidden(torch.tensor([[1, 2]]), codes, track)
    assert a.shape == (1, 7, 1, 11) and torch.allclose(a, b) and torch.allclose(ha, hb)
    frames = torch.randint(0, 8, (5, 3))
    prev = torch.cat([torch.full((1, 3), 8), frames[:-1]])
    assert torch.allclose(lm.model.fine.logits(ha[0, 2:], frames, prev), back.model.fine.logits(hb[0, 2:], frames, prev))


@pytest.mark.parametrize("reads_prev,group", [(True, 1), (False, 1), (True, 2), (False, 2)])
def test_fine_stage_sampling_follows_its_teacher_forced_factorization(reads_prev, group):
    """``generate`` (slot by slot: codebook by codebook and, grouped, frame by frame inside a step;
    step by step, or all steps at once when the stage does not read the previous frame) picks from
    exactly the logits that ``logits`` (teacher-forced, the training loss) gives for the codes it picked."""
    fine = tiny_codec_lm(seed=4, n_codebooks=4, codebook_size=8, coarse_first=True, fine_reads_prev=reads_prev,
                         frames_per_step=group).model.fine
    assert (fine.prev is None) != reads_prev and fine.slots == 4 * group
    h, coarse = torch.randn(6, 64), torch.randint(0, 8, (6,))
    seen: dict[tuple[int, int], torch.Tensor] = {}

    def pick(logits: torch.Tensor, steps: list[tuple[int, int]], s: int) -> torch.Tensor:
        assert logits.shape == (len(steps), 8)
        for (b, j), row in zip(steps, logits):
            seen[j, s] = row
        return logits.argmax(-1)

    def argmax(x, steps, s):
        return x.argmax(-1)

    def generate(h, coarse, prev):
        return fine.generate([h], [coarse], prev[None], argmax)[0]

    with torch.no_grad():
        frames = fine.generate([h], [coarse], torch.full((1, 4), 8), pick)[0]  # [K, 6 G]
        slots = step_slots(frames.T, group)  # [6, 4 G]
        prev = torch.cat([torch.full((1, 4), 8), frames.T[group - 1:-1:group]])  # each step's previous frame
        forced = fine.logits(h, slots, prev)  # [6, 4 G - 1, 8]
    assert frames.shape == (4, 6 * group) and torch.equal(frames[0, ::group], coarse)
    S = fine.slots
    assert torch.allclose(torch.stack([seen[j, s] for j in range(6) for s in range(1, S)]).view(6, S - 1, 8), forced, atol=1e-5)
    # streaming: two calls carrying the last frame give the same frames as one call
    with torch.no_grad():
        first = generate(h[:2], coarse[:2], torch.full((4,), 8))
        rest = generate(h[2:], coarse[2:], first[:, -1])
    assert torch.equal(torch.cat([first, rest], 1), frames)
    # a batch of sessions with different step counts: each gets the frames it gets alone
    with torch.no_grad():
        batch = fine.generate([h[:2], h[2:], h[:1]], [coarse[:2], coarse[2:], coarse[:1]],
                              torch.stack([torch.full((4,), 8), first[:, -1], torch.full((4,), 8)]), argmax)
    assert torch.equal(batch[0], first) and torch.equal(batch[1], rest) and torch.equal(batch[2], first[:, :group])


def test_step_slots_and_their_mask_cover_a_short_last_step():
    frames = torch.arange(10).view(5, 2)  # [T=5, K=2]
    assert step_slots(frames, 1).equal(frames) and slot_mask(5, 1, 2).all()
    slots = step_slots(frames, 2)  # [3, 4]: the last step repeats frame 4
    assert slots.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 8, 9]]
    assert slot_mask(5, 2, 2).tolist() == [[True] * 4, [True] * 4, [True, True, False, False]]


def test_a_grouped_session_cuts_the_last_step_at_the_tracks_last_frame():
    """A track of 7 frames, two frames a step: 4 steps, and the fine stage's 8th frame is dropped;
    greedy speculation gives plain decoding's frames, batched too."""
    lm = tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=8, coarse_first=True, track_positions=P, frames_per_step=2)
    prompt = lm.layout.prompt([1, 2, 3], track=track(7))
    plain = SpecDecoder(lm, None, DecodeConfig(GREEDY, gamma=0, max_steps=60)).generate(prompt)
    frames = plain.run()
    assert plain.stats.finish_reason == "eos" and plain.generated.shape[0] == 5 and frames.shape == (3, 7)
    assert plain.stats.frames == 7
    for gamma in (1, 3):
        gen = SpecDecoder(lm, ModelDrafter(codec_draft(lm)), DecodeConfig(GREEDY, gamma=gamma, max_steps=60)).generate(prompt)
        assert torch.equal(gen.run(), frames)
    sampled = SpecDecoder(lm, NGramDrafter(), DecodeConfig(gamma=2, seed=1, max_steps=60)).generate(prompt).run()
    assert sampled.shape == (3, 7)


@pytest.mark.parametrize("reads_prev,group", [(True, 1), (False, 1), (True, 2), (False, 2)])
def test_sampled_fine_codes_do_not_depend_on_how_frames_are_grouped(reads_prev, group):
    """A session's fine codes are drawn step by step, slot by slot, from its own generator,
    however its steps arrive (one verify pass's worth at once, or one by one, as plain decoding
    gives them) and whoever shares the call."""
    lm = tiny_codec_lm(seed=4, n_codebooks=4, codebook_size=8, coarse_first=True, fine_reads_prev=reads_prev,
                       frames_per_step=group)
    sampling = SamplingConfig(temperature=1.5)
    session, other = lm.start(lm.layout.prompt([1, 2])), lm.start(lm.layout.prompt([3]))
    session.hidden, other.hidden = torch.randn(6, 64), torch.randn(6, 64)
    coarse = torch.randint(0, 8, (6,))

    def frames(groups: list[int], batched: bool, seed: int = 3) -> torch.Tensor:
        session.prev = torch.full((4,), 8)
        gen, out, first = torch.Generator().manual_seed(seed), [], 0
        for n in groups:
            works = [session.fine_work(coarse[first:first + n], session.hidden[first:first + n], sampling, gen)]
            if batched:
                works.append(other.fine_work(coarse[:3], other.hidden[:3], sampling, torch.Generator().manual_seed(9)))
            out.append(type(works[0]).run(works)[0])
            first += n
        return torch.cat(out, 1)

    together = frames([6], False)
    assert torch.equal(frames([1] * 6, False), together)
    assert torch.equal(frames([2, 3, 1], True), together)
    assert not torch.equal(frames([6], False, seed=4), together)  # the draws do matter
