"""The speculative decoding loop: draft → verify (one target pass) → commit/rollback → adapt.

γ = 0 is plain decoding through the same code, so the baseline every benchmark compares against
differs from speculation only in whether drafts are proposed. Only verified steps ever leave the
loop (as complete codec frames); the engine never touches audio.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from voicespec.engine.config import DecodeConfig
from voicespec.engine.controller import ControllerMemory
from voicespec.engine.tree_shapes import DynamicTree
from voicespec.engine.drafters.base import Draft, DraftContext, Drafter, DraftSession
from voicespec.engine.layout import FrameAssembler, Prompt
from voicespec.engine.step_lm import LMSession, Pass, Prefill, StepLM
from voicespec.engine.policy import TokenPolicy
from voicespec.engine.stats import DecodeStats
from voicespec.engine.tree import TreeShape, static_tree, verify_tree_greedy, verify_tree_sampling
from voicespec.engine.noise import PositionNoise
from voicespec.engine.verify import Verdict, verify_greedy, verify_lossy_top_k, verify_sampling
from voicespec.engine.work import Work, drive, drive_batch
from voicespec.frame_blocks import FrameBlocks


@dataclass(frozen=True)
class Chunk:
    """What one verify pass committed: the new steps ``[m, G]`` and the frames ``[K, n]`` they
    completed (n may be 0, e.g. while a delay layout fills its first frame)."""

    steps: torch.Tensor
    frames: torch.Tensor


@dataclass(frozen=True)
class _Step:
    """What a chain or tree step hands back to :meth:`Generation.advance`: the verdict, the pass
    that verified it, when drafting ended, the verify seconds, and the draft's size (positions
    deep, tokens in all) and the tokens accepted."""

    verdict: Verdict
    work: Pass
    t_drafted: float
    verify_s: float
    drafted: int
    drafted_tokens: int
    accepted_tokens: int
    gamma: int  # what the controller chose (the tree's depth)
    tree: Any = None  # a tree step: the tree as configured or chosen (a static one's branching)


class SpecDecoder:
    """Holds the target, the drafter and the configuration; each request is a :class:`Generation`.
    ``memory``: what the adaptive γ controller learnt from earlier requests of this drafter (pass
    one that outlives the decoder, e.g. :meth:`Voice.controller_memory`, to keep it across decoders)."""

    def __init__(self, target: StepLM, drafter: Drafter | None = None, config: DecodeConfig | None = None,
                 memory: ControllerMemory | None = None, fine_blocks: FrameBlocks | None = None) -> None:
        """``fine_blocks``: a fine stage's frames are completed when they reach a block end of
        these (the codec's blocks: :attr:`Voice.frame_blocks`), many steps in one call; None: after
        every pass, its steps in one call."""
        self.target = target
        self.drafter = drafter
        self.config = config or DecodeConfig()
        self.fine_blocks = fine_blocks
        self.memory = memory if memory is not None else ControllerMemory()
        # Set by a scheduler while its machine is saturated (more sessions ready than a tick
        # steps): every pass is then plain, whatever γ or tree was asked for. A draft widens the
        # batched pass every neighbour in the tick waits for (at batch 16 on 2 cores: width 4
        # costs twice width 1), and the tokens are the same either way.
        self.plain_only = False
        if drafter is not None and drafter.layout is not None and drafter.layout != target.layout:
            raise ValueError(
                f"drafter {drafter.name!r} does not match the target's vocabulary/layout: "
                f"draft {drafter.layout} vs target {target.layout}"
            )

    def generate(self, prompt: Prompt, config: DecodeConfig | None = None, frames_before: int = 0) -> Generation:
        """A generation of ``prompt``, its prompt prefilled now. ``frames_before``: frames already in
        the stream its frames join (earlier sentences of one waveform): the fine stage's block ends
        are counted from the stream's start, as the codec's are."""
        return Generation(self, prompt, config or self.config, frames_before=frames_before)

    def open(self, prompt: Prompt, config: DecodeConfig | None = None,
             frames_before: int = 0) -> Generator[Work, Any, Generation]:
        """:meth:`generate` as a coroutine: the prefill is yielded (a :class:`Prefill`), so a
        scheduler prefills the newcomers of a tick in one pass."""
        config = config or self.config
        check_prompt(self.target.layout, prompt)
        work = Prefill(self.target, prompt)
        session = yield work
        if isinstance(session, Exception):
            raise session
        return Generation(self, prompt, config, (session, work.seconds), frames_before)

    def run_batch(self, prompts: list[Prompt], configs: list[DecodeConfig] | None = None) -> list[torch.Tensor]:
        """Decode several prompts together — each step one batched target pass over all the
        unfinished ones — and return each one's frames ``[K, T]``: what :meth:`Generation.run`
        gives it alone (greedy: token for token; seeded sampling: draw for draw)."""
        configs = configs or [self.config] * len(prompts)

        def decode(prompt: Prompt, config: DecodeConfig) -> Generator[Work, Any, torch.Tensor]:
            return (yield from (yield from self.open(prompt, config)).decode())

        return drive_batch([decode(p, c) for p, c in zip(prompts, configs)])


def check_prompt(layout: Any, prompt: Prompt) -> None:
    """ValueError unless ``prompt``'s steps are ``[P >= 1, groups]`` of ``layout``."""
    if prompt.steps.ndim != 2 or prompt.steps.shape[0] < 1 or prompt.steps.shape[1] != layout.groups:
        raise ValueError(f"prompt steps must be [P >= 1, {layout.groups}], got {tuple(prompt.steps.shape)}")


class Generation:
    """One request: iterate to get :class:`Chunk` s; ``stats`` is live while it runs."""

    def __init__(self, decoder: SpecDecoder, prompt: Prompt, config: DecodeConfig,
                 prefilled: tuple[LMSession, float] | None = None, frames_before: int = 0) -> None:
        """``prefilled``: the target's session for ``prompt`` and the seconds its prefill took
        (:meth:`SpecDecoder.open`); else the prompt is prefilled here."""
        layout = decoder.target.layout
        check_prompt(layout, prompt)
        self._decoder = decoder
        self.layout = layout
        self.config = config
        self.policy = TokenPolicy(layout, config.sampling)
        self.controller = config.make_controller(decoder.memory, trees=getattr(decoder.drafter, "trees", ()))
        self.generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
        sampling = config.sampling
        # The invariant coupling draws each position's token from that position's own noise
        # (``noise.py``): with no seed, a seed drawn from torch's global generator stands in.
        self.noise = None if sampling.greedy or sampling.lossy_top_k or sampling.coupling != "invariant" else \
            PositionNoise(config.seed if config.seed is not None else int(torch.randint(0, 2**62, ())))
        # The fine stage draws from its own stream, so its codes depend only on the verified coarse
        # codes, not on how many draws verification made (same frames with speculation on or off).
        # Its seed is a multiplicative hash of the seed: torch's CPU generator keeps only the low 32
        # bits, and neighbouring sentences count up from a base seed, so no plain offset is safe.
        self.fine_generator = None if config.seed is None else \
            torch.Generator().manual_seed((config.seed * 2654435761 + 0x5EED) & 0xFFFFFFFF)
        self._fine_from = 0  # row of the last target pass whose hidden state predicted the first new step
        # Verified steps the fine stage has yet to complete: coarse codes [n] and the hidden rows [n, D] that predicted them
        self._waiting: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._completed = 0  # steps the fine stage completed
        self._frames_before = frames_before  # frames of the stream before this generation's (SpecDecoder.generate)
        self._complete_at = self._next_end()  # frames (of this generation) at which the waiting steps are completed
        self._fine_rate = 0.0  # seconds a step of its last call: what a pass is charged for its steps
        self._last_new = 0  # steps the last pass committed (0: no pass yet)
        self.stats = DecodeStats(acceptance=config.sampling.acceptance)
        self.assembler = FrameAssembler(layout)
        self.state = layout.initial_state(prompt)
        self.n_prompt = prompt.steps.shape[0]
        self._buf = torch.empty(self.n_prompt + config.max_steps, layout.groups, dtype=torch.long)
        self._buf[: self.n_prompt] = prompt.steps
        self.length = self.n_prompt
        self._drafter = decoder.drafter
        self.tree = static_tree(config.tree) if isinstance(config.tree, tuple) else config.tree
        if self.tree is not None and not getattr(self._drafter, "drafts_trees", False):
            name = getattr(self._drafter, "name", "none")
            raise ValueError(f"drafter {name!r} does not draft trees (the feature drafter does)")
        t0 = time.perf_counter()
        self.target: LMSession = decoder.target.start(prompt) if prefilled is None else prefilled[0]
        self.draft_session: DraftSession | None = self._drafter.start(prompt) if self._drafter else None
        if hasattr(self.draft_session, "choose"):  # a drafter that chooses among drafters is its own controller
            self.draft_session.configure(config.controller)
            self.controller = self.draft_session
        self.stats.prefill_s = time.perf_counter() - t0 + (0.0 if prefilled is None else prefilled[1])
        self.stats.total_s = self.stats.prefill_s

    @property
    def history(self) -> torch.Tensor:
        """Every committed step, prompt steps first."""
        return self._buf[: self.length]

    @property
    def generated(self) -> torch.Tensor:
        return self._buf[self.n_prompt : self.length]

    @property
    def done(self) -> bool:
        return self.layout.is_done(self.state) or self.length - self.n_prompt >= self.config.max_steps

    def __iter__(self) -> Iterator[Chunk]:
        """Every chunk to the end, then the cache rows given back."""
        while not self.done:
            yield self.step()
        self.close()

    def _draft(self, gamma: int) -> Draft:
        if gamma == 0 or self.draft_session is None:
            return Draft(self.history[:0])
        return self.draft_session.propose(self.draft_context(), gamma)

    def draft_context(self) -> DraftContext:
        """What a drafter reads to propose the steps after the committed ones, now."""
        return DraftContext(self.history, self.n_prompt, self.state, self.policy, self.generator, self.target,
                            self._features(), self.noise)

    def _features(self) -> torch.Tensor | None:
        """The target's final hidden state that predicted the pending step: row ``_fine_from +
        (steps committed by the last pass) - 1`` of its last forward (the prefill's last row
        before the first pass)."""
        hidden = getattr(self.target, "hidden", None)
        if hidden is None:
            return None
        return hidden[-1] if self._last_new == 0 else hidden[self._fine_from + self._last_new - 1]

    def _verify(self, draft: Draft, warped: torch.Tensor) -> Verdict:
        """The verdict on ``draft`` given the target's warped logits ``[γ+1, G, V]`` after each of its prefixes."""
        sampling = self.config.sampling
        if sampling.lossy_top_k:
            return verify_lossy_top_k(draft.steps, warped, sampling.lossy_top_k, self.generator, sampling.greedy)
        if sampling.greedy:
            return verify_greedy(draft.steps, warped)
        if self.noise is not None:  # the target's own draw at every position: what plain decoding commits
            start = self.length - self.n_prompt
            return verify_greedy(draft.steps, self.noise.perturb(warped, list(range(start, start + warped.shape[0]))))
        return verify_sampling(draft.steps, draft.probs, self.policy.probs(warped), self.generator)

    def step(self) -> Chunk:
        """One draft-and-verify step, its target pass run alone (see :meth:`advance`)."""
        return drive(self.advance())

    def advance(self) -> Generator[Work, Any, Chunk]:
        """One draft-and-verify step as a coroutine: it yields its target pass (a :class:`Pass`,
        which a scheduler may batch with other sessions' passes) and, for a coarse-first target,
        its fine-stage call; it is resumed with each one's result and returns the :class:`Chunk`
        it committed (between 1 and γ+1 steps; with a tree, up to its depth + 1)."""
        t0 = time.perf_counter()
        remaining = self.config.max_steps - (self.length - self.n_prompt)
        if self._decoder.plain_only:
            step = yield from self._chain_step(0)
        elif self.tree is not None and remaining > self.tree.depth:
            step = yield from self._tree_step(self.tree)
        else:
            plan = self.controller.choose(max(0, remaining - 1)) if self._drafter else 0
            if isinstance(plan, tuple):
                step = yield from self._tree_step(static_tree(plan))
            else:
                step = yield from self._chain_step(plan)
        verdict, work = step.verdict, step.work

        old = self.length
        new = self._commit(verdict.steps[:remaining])
        self._last_new = new.shape[0]
        keep = min(old + verdict.accepted_steps, self.length - 1)
        self.target.truncate(keep)
        if self.draft_session is not None:
            self.draft_session.rollback(keep)
        frames = self.assembler.pop(self.generated, self.state)
        fine_s = 0.0
        if self.layout.fine:
            t_fine = time.perf_counter()
            frames = yield from self._complete(frames[0])
            fine_s = time.perf_counter() - t_fine

        # In a batch every session waits for every session's drafting (drafts run one session
        # after another), so drafting costs the batch B times what it costs this session: so
        # charged, speculation turns itself off under load where it no longer pays. The pass is
        # charged with everything after drafting (verdict, commit) but the fine stage's calls,
        # which the controller fits per pass and per committed step (``commit_s``: this pass's
        # steps at the last call's cost a step): one frame after another it costs per frame
        # whatever γ is; as one batch per pass, about once per pass; in blocks, per step.
        commit_s = self._fine_rate * new.shape[0]
        draft_s = step.t_drafted - t0
        pass_s = time.perf_counter() - step.t_drafted - fine_s
        # The pass is priced by its width (its longest block: every row is padded to it), so in a
        # batch a tree that widens every row's pass is charged for it, and so is a chain beside one.
        self.controller.observe(step.drafted, verdict.accepted_steps, draft_s * work.batch, pass_s, commit_s,
                                step.tree, work.width, work.batch)
        s = self.stats
        s.target_passes += 1
        s.generated_steps = self.length - self.n_prompt
        s.frames += frames.shape[1]
        s.gammas.append(step.gamma)
        s.tree_passes += step.tree is not None
        s.record_draft(step.drafted, verdict.accepted_steps, step.drafted_tokens, step.accepted_tokens)
        s.draft_s += draft_s
        s.verify_s += step.verify_s
        s.total_s += draft_s + step.verify_s
        if self.done:
            s.finish_reason = "eos" if self.layout.is_done(self.state) else "length"
        return Chunk(new, frames)

    def _complete(self, coarse: torch.Tensor) -> Generator[Work, Any, torch.Tensor]:
        """Frames ``[K, n]`` of the verified steps whose block is complete. The coarse codes
        ``[m]`` just verified wait with the hidden rows that predicted them until the frames waiting
        reach the decoder's next block end (or the utterance ends); then one fine-stage call
        completes them all: its weights are read once for many steps (a plain pass verifies one)."""
        if coarse.numel():
            rows = self.target.hidden[self._fine_from: self._fine_from + coarse.numel()]
            self._waiting.append((coarse, rows.clone()))  # the next pass replaces (a tree step moves) these rows
        n = sum(c.numel() for c, _ in self._waiting)
        G, blocks = self.layout.frames_per_step, self._decoder.fine_blocks
        if not n or (blocks is not None and not self.done and (self._completed + n) * G < self._complete_at):
            return torch.empty(self.layout.n_codebooks, 0, dtype=torch.long)
        coarse, hidden = (torch.cat(t) for t in zip(*self._waiting))
        self._waiting = []
        t0 = time.perf_counter()
        frames = yield self.target.fine_work(coarse, hidden, self.config.sampling, self.fine_generator)
        self._fine_rate = (time.perf_counter() - t0) / n
        self._completed += n
        self._complete_at = self._next_end()
        return frames

    def _next_end(self) -> int:
        """This generation's frames at the stream's next block end after those completed."""
        blocks, before = self._decoder.fine_blocks, self._frames_before
        done = self._completed * self.layout.frames_per_step if self.layout.fine else 0
        return 0 if blocks is None else blocks.next_end(before + done) - before

    def _chain_step(self, gamma: int) -> Generator[Work, Any, _Step]:
        """Draft ``gamma`` steps in a chain and verify them (0 is plain decoding)."""
        draft = self._draft(gamma)
        n_draft = draft.steps.shape[0]
        t1 = time.perf_counter()
        block = torch.cat([self.history[self.target.length:], draft.steps])
        work = Pass(self.target, block)
        raw = (yield work)[-(n_draft + 1):]
        self._fine_from = block.shape[0] - n_draft - 1
        t2 = time.perf_counter()
        verdict = self._verify(draft, (yield self.policy.warp_work(raw, self.state, draft.steps, self.generated)))
        verify_s = work.seconds + time.perf_counter() - t2  # the pass at this batch size, plus the verdict
        return _Step(verdict, work, t1, verify_s, n_draft, draft.steps.numel(), verdict.accepted_tokens, gamma)

    def _tree_step(self, spec: TreeShape | DynamicTree) -> Generator[Work, Any, _Step]:
        """Draft a tree (a static shape, or one grown for this step) and verify every node in one
        pass (:mod:`voicespec.engine.tree`); the accepted path's keys, values and hidden states
        are then moved into place."""
        start = self.length - 1  # the pending step's position: the root
        draft = self.draft_session.propose_tree(self.draft_context(), spec)
        tree = draft.tree
        t1 = time.perf_counter()
        if self.target.length != start:
            raise RuntimeError("a tree pass needs the target's cache to hold every committed step but the pending one")
        work = Pass(self.target, draft.tokens, tree=tree)
        raw = yield work  # [1 + nodes, G, V]
        t2 = time.perf_counter()
        warped = self.policy.warp_tree(raw, self.state, draft.tokens, tree, self.generated)[:, 0]  # [1 + nodes, V]
        if self.noise is not None:  # slot s holds the logits of the step after it: position start + its depth
            base = self.length - self.n_prompt
            positions = [base + d for d in tree.depths.tolist()]
            verdict = verify_tree_greedy(tree, draft.tokens[:, 0], self.noise.perturb(warped[:, None], positions)[:, 0])
        elif self.config.sampling.greedy:
            verdict = verify_tree_greedy(tree, draft.tokens[:, 0], warped)
        else:
            verdict = verify_tree_sampling(tree, draft.tokens[:, 0], draft.q, warped.softmax(-1), self.generator)
        self.target.keep_path(start, verdict.path)
        self._fine_from = 0
        verify_s = work.seconds + time.perf_counter() - t2
        m = verdict.accepted_steps
        key = spec.branching if isinstance(spec, TreeShape) else spec
        return _Step(Verdict(verdict.steps, m, m), work, t1, verify_s, tree.depth, tree.nodes, m, tree.depth, key)

    def close(self) -> None:
        """Give back the sessions' cache rows (also done when the generation is collected)."""
        self.target.close()
        if self.draft_session is not None:
            self.draft_session.close()

    def _commit(self, steps: torch.Tensor) -> torch.Tensor:
        """Append steps up to the end of the utterance; return those appended."""
        n = 0
        for step in steps:
            if self.layout.is_done(self.state):
                break
            self.state = self.layout.advance(self.state, step)
            n += 1
        self._buf[self.length : self.length + n] = steps[:n]
        self.length += n
        return steps[:n]

    def run(self) -> torch.Tensor:
        """Decode to the end; return all frames ``[K, T]``."""
        return drive(self.decode())

    def decode(self) -> Generator[Work, Any, torch.Tensor]:
        """:meth:`run` as a coroutine of works: many generations decode together with
        :func:`~voicespec.engine.work.drive_batch` (see :meth:`SpecDecoder.run_batch`)."""
        chunks = []
        while not self.done:
            chunks.append((yield from self.advance()).frames)
        self.close()
        K = self.layout.n_codebooks
        return torch.cat(chunks, dim=1) if chunks else torch.empty(K, 0, dtype=torch.long)
