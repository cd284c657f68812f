"""Token layouts: how codec frames map onto LM steps.

A *step* is one position of the LM; it carries ``groups`` tokens (1 for the flat layout, K for
delay/parallel). A layout knows which ids are legal at each step (the same mask is applied to the
target and to every drafter, so a draft can never win by proposing an id the target may not emit),
when generation has ended, and how to assemble complete ``[K, T]`` code frames from steps.

Everything here is pure arithmetic over small tensors; the state that masks depend on is the tiny
immutable :class:`LayoutState`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

import torch


@dataclass(frozen=True)
class LayoutState:
    """Where generation stands: steps generated so far and, once known, the number of frames.

    ``n_frames``: the utterance length when the conditioning dictates it (a frame-aligned text
    track): then EOS is forced at exactly that frame and illegal before it, so a sampled EOS can
    neither truncate nor overrun the text.
    """

    steps: int = 0
    end_frame: int | None = None
    n_frames: int | None = None


@dataclass(frozen=True)
class Prompt:
    """What the LM is conditioned on.

    ``text``: a conditioning prefix consumed before any step (empty for flat layouts, whose text
    ids are ordinary LM tokens and so live in ``steps``). ``steps``: ``[P, G]`` prompt steps; the
    last one is the start-of-audio step from which the first audio step is predicted.
    ``track``: optional frame-aligned conditioning ``[N, F]``, one row per output frame (see
    :func:`voicespec.frontend.duration.frame_track`); it fixes the utterance at ``N`` frames.
    """

    text: torch.Tensor
    steps: torch.Tensor
    track: torch.Tensor | None = None


def _check_prompt_ids(ids: Any, name: str, vocab_size: int | None = None) -> torch.Tensor:
    ids = torch.as_tensor(ids)
    if ids.numel() == 0:
        raise ValueError(f"empty prompt: {name} must contain at least one token id")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must be integer token ids, got {ids.dtype}")
    ids = ids.to(torch.long).reshape(-1)
    if vocab_size is not None and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{name} must lie in [0, {vocab_size}) (the vocabulary), got {ids.tolist()[:8]}")
    return ids


@dataclass(frozen=True)
class FlatLayout:
    """One token per step; codebook k of a frame is step ``f*K + k`` with id ``offset + k*C + code``.

    This is the Orpheus/SNAC style layout that any HF causal LM can learn: text ids, specials and
    audio ids share one vocabulary. EOS is legal only at a frame boundary, after ``min_frames``.
    """

    n_codebooks: int
    codebook_size: int
    audio_offset: int
    vocab_size: int
    start_id: int
    eos_id: int
    pad_id: int
    min_frames: int = 0
    kind: str = field(default="flat", init=False)
    fine = False

    def __post_init__(self) -> None:
        top = self.audio_offset + self.n_codebooks * self.codebook_size
        if self.n_codebooks < 1 or self.codebook_size < 1:
            raise ValueError("n_codebooks and codebook_size must be positive")
        if top > self.vocab_size:
            raise ValueError(f"audio ids end at {top} but vocab_size is {self.vocab_size}")
        for name in ("start_id", "eos_id", "pad_id"):
            i = getattr(self, name)
            if not 0 <= i < self.vocab_size or self.audio_offset <= i < top:
                raise ValueError(f"{name}={i} must be a non-audio id inside the vocabulary")

    @property
    def groups(self) -> int:
        return 1

    def initial_state(self, prompt: Prompt | None = None) -> LayoutState:
        if prompt is not None and prompt.track is not None:
            raise ValueError("flat layouts take no frame-aligned track")
        return LayoutState()

    def prompt(self, text_ids: Any) -> Prompt:
        ids = _check_prompt_ids(text_ids, "text_ids", self.vocab_size)
        steps = torch.cat([ids, torch.tensor([self.start_id])]).unsqueeze(1)
        return Prompt(text=torch.empty(0, dtype=torch.long), steps=steps)

    def mask(self, state: LayoutState) -> torch.Tensor:
        m = torch.zeros(1, self.vocab_size, dtype=torch.bool)
        if self.is_done(state):
            m[0, self.pad_id] = True
            return m
        k = state.steps % self.n_codebooks
        lo = self.audio_offset + k * self.codebook_size
        m[0, lo : lo + self.codebook_size] = True
        if k == 0 and state.steps // self.n_codebooks >= self.min_frames:
            m[0, self.eos_id] = True
        return m

    def advance(self, state: LayoutState, step: torch.Tensor) -> LayoutState:
        if state.end_frame is None and int(step[0]) == self.eos_id:
            return replace(state, steps=state.steps + 1, end_frame=state.steps // self.n_codebooks)
        return replace(state, steps=state.steps + 1)

    def is_done(self, state: LayoutState) -> bool:
        return state.end_frame is not None

    def complete_frames(self, state: LayoutState) -> int:
        if state.end_frame is not None:
            return state.end_frame
        return state.steps // self.n_codebooks

    def steps_for_frames_count(self, n_frames: int) -> int:
        """Steps that produce ``n_frames`` frames and the end marker."""
        return n_frames * self.n_codebooks + 1

    def frame_codes(self, generated: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Codes ``[K, stop-start]`` of frames ``start..stop`` from generated steps ``[N, 1]``."""
        K, C = self.n_codebooks, self.codebook_size
        ids = generated[start * K : stop * K, 0].reshape(stop - start, K).T
        return ids - self.audio_offset - torch.arange(K).unsqueeze(1) * C

    def steps_for_frames(self, codes: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`frame_codes`: frames ``[K, T]`` to steps ``[T*K, 1]`` (for training)."""
        K, C = self.n_codebooks, self.codebook_size
        ids = codes + self.audio_offset + torch.arange(K).unsqueeze(1) * C
        return ids.T.reshape(-1, 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DelayLayout:
    """K tokens per step from K heads; codebook k at step t holds frame ``t - delays[k]``.

    MusicGen's pattern with ``delays = (0, 1, ..., K-1)``; ``parallel`` is all delays 0. Per-head
    vocabulary: codes ``0..C-1``, then PAD (positions outside the utterance), BOS (input only, the
    start step) and EOS (codebook 0 only: it ends the utterance at that frame). The masks at a step
    depend only on earlier steps, so the K tokens of one step are conditionally independent given
    the prefix — which is what lets a frame be verified codebook by codebook, exactly.
    """

    n_codebooks: int
    codebook_size: int
    delays: tuple[int, ...]
    min_frames: int = 0
    kind: str = field(default="delay", init=False)
    fine = False  # frames come whole from the steps (see CoarseFirstLayout)

    def __post_init__(self) -> None:
        object.__setattr__(self, "delays", tuple(int(d) for d in self.delays))
        if self.n_codebooks < 1 or self.codebook_size < 1:
            raise ValueError("n_codebooks and codebook_size must be positive")
        if len(self.delays) != self.n_codebooks:
            raise ValueError(f"need {self.n_codebooks} delays, got {len(self.delays)}")
        if self.delays[0] != 0 or min(self.delays) < 0:
            raise ValueError("codebook 0 must have delay 0 and no delay may be negative")

    @classmethod
    def musicgen(cls, n_codebooks: int, codebook_size: int, **kw: Any) -> DelayLayout:
        return cls(n_codebooks, codebook_size, tuple(range(n_codebooks)), **kw)

    @classmethod
    def parallel(cls, n_codebooks: int, codebook_size: int, **kw: Any) -> DelayLayout:
        return cls(n_codebooks, codebook_size, (0,) * n_codebooks, **kw)

    @property
    def groups(self) -> int:
        return self.n_codebooks

    @property
    def vocab_size(self) -> int:
        return self.codebook_size + 3

    @property
    def pad_id(self) -> int:
        return self.codebook_size

    @property
    def bos_id(self) -> int:
        return self.codebook_size + 1

    @property
    def eos_id(self) -> int:
        return self.codebook_size + 2

    @property
    def max_delay(self) -> int:
        return max(self.delays)

    def initial_state(self, prompt: Prompt | None = None) -> LayoutState:
        n = None if prompt is None or prompt.track is None else prompt.track.shape[0]
        if n is not None and n < 1:
            raise ValueError("a frame-aligned track needs at least one frame")
        return LayoutState(n_frames=n)

    def prompt(self, text_ids: Any, track: torch.Tensor | None = None) -> Prompt:
        ids = _check_prompt_ids(text_ids, "text_ids")
        return Prompt(text=ids, steps=torch.full((1, self.n_codebooks), self.bos_id), track=track)

    def mask(self, state: LayoutState) -> torch.Tensor:
        m = torch.zeros(self.n_codebooks, self.vocab_size, dtype=torch.bool)
        t, end, n = state.steps, state.end_frame, state.n_frames
        for k, d in enumerate(self.delays):
            f = t - d
            if f < 0 or (end is not None and f >= end):
                m[k, self.pad_id] = True
            else:
                m[k, : self.codebook_size] = True
        if end is None and (t == n if n is not None else t >= self.min_frames):
            m[0, self.eos_id] = True
            if n is not None:
                m[0, : self.codebook_size] = False
        return m

    def advance(self, state: LayoutState, step: torch.Tensor | int) -> LayoutState:
        """The state after ``step [G]``, or after a step whose first code is the int ``step`` (the
        nodes of a draft tree are walked as ints: a tensor element read costs more than the rest)."""
        end = state.end_frame
        if end is None and (step if isinstance(step, int) else int(step[0])) == self.eos_id:
            end = state.steps
        return LayoutState(state.steps + 1, end, state.n_frames)  # not dataclasses.replace: 3x its cost, per drafted node

    def is_done(self, state: LayoutState) -> bool:
        end = state.end_frame
        return end is not None and state.steps >= end + max(1, self.max_delay)

    def steps_for_frames_count(self, n_frames: int) -> int:
        """Steps that produce ``n_frames`` frames and the end marker."""
        return n_frames + max(1, self.max_delay)

    def complete_frames(self, state: LayoutState) -> int:
        n = max(0, state.steps - self.max_delay)
        return n if state.end_frame is None else min(n, state.end_frame)

    def frame_codes(self, generated: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Codes ``[K, stop-start]``: codebook k of frame f is token k of step ``f + delays[k]``."""
        f = torch.arange(start, stop)
        rows = [generated[f + d, k] for k, d in enumerate(self.delays)]
        return torch.stack(rows) if rows else torch.empty(0, 0, dtype=torch.long)

    def steps_for_frames(self, codes: torch.Tensor, with_eos: bool = True) -> torch.Tensor:
        """Inverse of :meth:`frame_codes`: frames ``[K, T]`` to the steps that produce them.

        With ``with_eos`` the result is the full training target ``[T + max(1, max_delay), K]``:
        PAD outside the utterance and EOS on codebook 0 at step T.
        """
        K, T = codes.shape
        n = T + (max(1, self.max_delay) if with_eos else self.max_delay)
        steps = torch.full((n, K), self.pad_id, dtype=torch.long)
        for k, d in enumerate(self.delays):
            steps[d : d + T, k] = codes[k]
        if with_eos:
            steps[T, 0] = self.eos_id
        return steps

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["delays"] = list(self.delays)
        return d


@dataclass(frozen=True)
class CoarseFirstLayout:
    """One token per step: codebook 0 of the step's first frame; every other code of the step's
    ``frames_per_step`` frames (G) comes from the target's *fine stage*
    (:class:`voicespec.lm.codec_lm.FineStage`) once the step is verified. A verify position
    therefore checks one token, and a draft is judged on that coarse code alone, which carries most
    of what is said.

    With G = 1 step t is frame t. With G > 1 (VALL-E 2's grouped codes) step t holds frames
    ``tG .. tG+G-1``, so the backbone runs G times less often per second of audio; the fine stage
    completes the group (the first frame's codebooks 1..K-1, then the next frames' codes, one after
    another). The backbone reads only its own tokens, never the codes the fine stage adds: a verify
    pass embeds drafted steps whose fine codes cannot exist before they are verified.

    A frame-aligned track of N frames ends the utterance after ``ceil(N / G)`` steps; the last
    step's frames past N are dropped (the target's session cuts them), so an utterance need not
    end on a group boundary. Without a track EOS ends it on one.

    Ids: codes ``0..C-1``, then PAD (unused, kept so ids match the delay layout), BOS (input only)
    and EOS (ends the utterance at that step). Steps leave the assembler as ``[1, n]`` coarse
    rows; the target's session completes them to ``[K, <= nG]`` frames.
    """

    n_codebooks: int
    codebook_size: int
    min_frames: int = 0
    frames_per_step: int = 1
    kind: str = field(default="coarse", init=False)

    def __post_init__(self) -> None:
        if self.n_codebooks < 1 or self.codebook_size < 1:
            raise ValueError("n_codebooks and codebook_size must be positive")
        if self.frames_per_step < 1:
            raise ValueError(f"frames_per_step must be at least 1, got {self.frames_per_step}")

    groups = 1
    fine = True  # frames need the target's fine stage
    max_delay = 0
    vocab_size = DelayLayout.vocab_size
    pad_id = DelayLayout.pad_id
    bos_id = DelayLayout.bos_id
    eos_id = DelayLayout.eos_id
    initial_state = DelayLayout.initial_state
    advance = DelayLayout.advance
    is_done = DelayLayout.is_done
    complete_frames = DelayLayout.complete_frames  # complete *steps*: the assembler's unit

    def steps_of(self, n_frames: int) -> int:
        """Steps that hold ``n_frames`` frames: ``ceil(n_frames / G)``."""
        return -(-n_frames // self.frames_per_step)

    def steps_for_frames_count(self, n_frames: int) -> int:
        """Steps that produce ``n_frames`` frames and the end marker."""
        return self.steps_of(n_frames) + 1

    def prompt(self, text_ids: Any, track: torch.Tensor | None = None) -> Prompt:
        ids = _check_prompt_ids(text_ids, "text_ids")
        return Prompt(text=ids, steps=torch.full((1, 1), self.bos_id), track=track)

    def mask(self, state: LayoutState) -> torch.Tensor:
        """``[1, V]``, shared and read-only: a step's mask is one of five (ended; codes, EOS, both
        or neither legal), and a tree pass asks for one per node, so each is built once per layout."""
        t, end, n = state.steps, state.end_frame, state.n_frames
        if end is not None:
            return _coarse_mask(self, True, False, False)
        if n is not None:
            last = self.steps_of(n)
            return _coarse_mask(self, False, t < last, t == last)
        return _coarse_mask(self, False, True, t >= self.steps_of(self.min_frames))

    def frame_codes(self, generated: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """Coarse codes ``[1, stop-start]`` of steps ``start..stop`` (the fine stage adds the rest)."""
        return generated[start:stop, :1].T

    def steps_for_frames(self, codes: torch.Tensor, with_eos: bool = True) -> torch.Tensor:
        """Frames ``[K, T]`` to the coarse steps ``[ceil(T/G) (+1 with EOS), 1]`` that produce them."""
        steps = codes[:1, :: self.frames_per_step].T.clone().long()
        return torch.cat([steps, torch.tensor([[self.eos_id]])]) if with_eos else steps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TokenLayout = FlatLayout | DelayLayout | CoarseFirstLayout


def layout_from_dict(d: dict[str, Any]) -> TokenLayout:
    """Rebuild a layout from its ``to_dict`` form (as stored in a model's config)."""
    d = dict(d)
    kind = d.pop("kind", None)
    if kind == "flat":
        return FlatLayout(**d)
    if kind == "delay":
        return DelayLayout(**d)
    if kind == "coarse":
        return CoarseFirstLayout(**d)
    raise ValueError(f"unknown token layout kind {kind!r} (expected 'flat', 'delay' or 'coarse')")


@lru_cache(maxsize=64)
def _coarse_mask(layout: CoarseFirstLayout, ended: bool, codes: bool, eos: bool) -> torch.Tensor:
    """:meth:`CoarseFirstLayout.mask` by what it depends on (see there)."""
    m = torch.zeros(1, layout.vocab_size, dtype=torch.bool)
    m[0, layout.pad_id] = ended
    m[0, : layout.codebook_size] = codes
    m[0, layout.eos_id] = eos
    return m


def masks_along(layout: TokenLayout, state: LayoutState, steps: torch.Tensor) -> torch.Tensor:
    """Masks ``[T+1, G, V]`` for the step after each prefix of ``steps`` (``[T, G]``) from ``state``.

    This is how a verify pass gets, for every draft position, the mask plain decoding would have
    used had the draft so far been committed.
    """
    out = [layout.mask(state)]
    for step in steps:
        state = layout.advance(state, step)
        out.append(layout.mask(state))
    return torch.stack(out)


class FrameAssembler:
    """Turns committed steps into complete frames, in order, each exactly once."""

    def __init__(self, layout: TokenLayout) -> None:
        self.layout = layout
        self.emitted = 0

    def pop(self, generated: torch.Tensor, state: LayoutState) -> torch.Tensor:
        """Frames ``[K, n]`` completed since the last call (``n`` may be 0)."""
        ready = self.layout.complete_frames(state)
        codes = self.layout.frame_codes(generated, self.emitted, ready)
        self.emitted = max(self.emitted, ready)
        return codes
