"""Token layouts: bad arguments fail early with an error that names the problem; valid ones
round-trip frames; the coarse-first layout's arithmetic and masks."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.layout import (
    CoarseFirstLayout, DelayLayout, FlatLayout, LayoutState, layout_from_dict, masks_along,
)


# --- prompts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("empty", [[], (), torch.empty(0, dtype=torch.long)])
def test_empty_prompt_flat(empty, flat_lm):
    with pytest.raises(ValueError, match="empty prompt"):
        flat_lm.layout.prompt(empty)


@pytest.mark.parametrize("empty", [[], torch.empty(0, dtype=torch.long)])
def test_empty_prompt_delay(empty, delay_lm):
    with pytest.raises(ValueError, match="empty prompt"):
        delay_lm.layout.prompt(empty)


# --- layouts -----------------------------------------------------------------------------------


def _flat(**kw):
    base = dict(n_codebooks=2, codebook_size=8, audio_offset=10, vocab_size=26, start_id=0, eos_id=1, pad_id=2)
    base.update(kw)
    return FlatLayout(**base)


def test_valid_flat_layout():
    layout = _flat()  # audio ids 10..25 fill the vocabulary up to its last id
    assert layout_from_dict(layout.to_dict()) == layout
    # the first step may be any codebook-0 id (or EOS: min_frames is 0), nothing else
    assert layout.mask(layout.initial_state())[0].nonzero().flatten().tolist() == [1, *range(10, 18)]
    codes = torch.tensor([[0, 7, 3], [5, 1, 2]])
    steps = layout.steps_for_frames(codes)
    assert steps.flatten().tolist() == [10, 23, 17, 19, 13, 20]
    assert torch.equal(layout.frame_codes(steps, 0, 3), codes)


@pytest.mark.parametrize("name", ["start_id", "eos_id", "pad_id"])
@pytest.mark.parametrize("value", [10, 17, 25])
def test_flat_specials_inside_audio_range(name, value):
    with pytest.raises(ValueError, match=rf"{name}={value} must be a non-audio id inside the vocabulary"):
        _flat(**{name: value})


@pytest.mark.parametrize("name", ["start_id", "eos_id", "pad_id"])
@pytest.mark.parametrize("value", [-1, 26, 100])
def test_flat_specials_outside_vocabulary(name, value):
    with pytest.raises(ValueError, match=rf"{name}={value} must be a non-audio id inside the vocabulary"):
        _flat(**{name: value, "vocab_size": 26})


def test_flat_audio_ids_beyond_vocabulary():
    with pytest.raises(ValueError, match="audio ids end at 26 but vocab_size is 25"):
        _flat(vocab_size=25)


@pytest.mark.parametrize("kw", [{"n_codebooks": 0}, {"codebook_size": 0}])
def test_flat_nonpositive_sizes(kw):
    with pytest.raises(ValueError, match="n_codebooks and codebook_size must be positive"):
        _flat(**kw)


@pytest.mark.parametrize("delays", [(1, 0, 0), (2, 1, 0), (0, -1, 1)])
def test_delay_first_delay_nonzero_or_negative(delays):
    with pytest.raises(ValueError, match="codebook 0 must have delay 0"):
        DelayLayout(3, 8, delays)


@pytest.mark.parametrize("delays", [(0, 1), (0, 1, 2, 3), ()])
def test_delay_wrong_number_of_delays(delays):
    with pytest.raises(ValueError, match=rf"need 3 delays, got {len(delays)}"):
        DelayLayout(3, 8, delays)


@pytest.mark.parametrize("kw", [{"n_codebooks": 0, "delays": ()}, {"codebook_size": 0}])
def test_delay_nonpositive_sizes(kw):
    args = {"n_codebooks": 3, "codebook_size": 8, "delays": (0, 1, 2)}
    args.update(kw)
    with pytest.raises(ValueError, match="n_codebooks and codebook_size must be positive"):
        DelayLayout(**args)


def test_layout_from_dict_unknown_kind():
    with pytest.raises(ValueError, match="unknown token layout kind 'interleaved'"):
        layout_from_dict({"kind": "interleaved", "n_codebooks": 2})
    with pytest.raises(ValueError, match="unknown token layout kind None"):
        layout_from_dict({"n_codebooks": 2})


# --- coarse-first ------------------------------------------------------------------------------


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


def test_coarse_masks_are_built_once_per_kind_and_stay_right():
    """The coarse layout hands out one shared mask per kind of step (a tree pass asks for one per
    node); each is still exactly the rule, and states of one kind share the same tensor."""
    layout = CoarseFirstLayout(n_codebooks=2, codebook_size=4, min_frames=2)
    rule = {  # state -> legal ids
        LayoutState(steps=0): [0, 1, 2, 3], LayoutState(steps=5): [0, 1, 2, 3, layout.eos_id],
        LayoutState(steps=1, n_frames=3): [0, 1, 2, 3], LayoutState(steps=3, n_frames=3): [layout.eos_id],
        LayoutState(steps=4, n_frames=3): [], LayoutState(steps=4, end_frame=2): [layout.pad_id],
    }
    for state, legal in rule.items():
        assert layout.mask(state)[0].nonzero().flatten().tolist() == legal, state
    assert layout.mask(LayoutState(steps=7)) is layout.mask(LayoutState(steps=9))
    other = CoarseFirstLayout(n_codebooks=2, codebook_size=4, min_frames=8)  # another layout: its own masks
    assert not other.mask(LayoutState(steps=5))[0, other.eos_id]


def test_a_grouped_layout_counts_steps_of_frames_and_ends_a_track_inside_its_last_group():
    """Two frames a step: the steps hold every other frame's coarse code; a track of 5 frames
    ends after ceil(5/2) = 3 steps (EOS illegal before, forced there), min_frames counts frames."""
    layout = CoarseFirstLayout(n_codebooks=3, codebook_size=8, min_frames=3, frames_per_step=2)
    assert layout.groups == 1 and layout_from_dict(layout.to_dict()) == layout
    assert layout_from_dict({"kind": "coarse", "n_codebooks": 3, "codebook_size": 8}).frames_per_step == 1  # v2 configs
    codes = torch.randint(0, 8, (3, 5))
    steps = layout.steps_for_frames(codes)
    assert steps.shape == (4, 1) and torch.equal(steps[:3, 0], codes[0, ::2]) and steps[3, 0] == layout.eos_id
    assert [layout.steps_for_frames_count(n) for n in (1, 2, 3, 4, 5)] == [2, 2, 3, 3, 4]
    legal = [layout.mask(LayoutState(steps=t, n_frames=5))[0] for t in range(4)]
    assert [bool(m[layout.eos_id]) for m in legal] == [False, False, False, True]
    assert [bool(m[:8].all()) for m in legal] == [True, True, True, False]
    free = [bool(layout.mask(LayoutState(steps=t))[0, layout.eos_id]) for t in range(4)]
    assert free == [False, False, True, True]  # min_frames 3: two steps (four frames) at least
    with pytest.raises(ValueError, match="frames_per_step"):
        CoarseFirstLayout(n_codebooks=3, codebook_size=8, frames_per_step=0)
