"""The controller chooses the drafter: several drafters behind one, the best one (and its γ) each step.

Each candidate keeps its own :class:`~voicespec.engine.controller.AdaptiveGamma` (acceptance by
position, cost per drafted step), all sharing one fitted line of verify costs (the target's pass
does not depend on who drafted). Each step the candidate whose best γ promises the most steps per
second drafts; one never measured is tried first, and every ``probe_every`` steps the one least
recently used drafts once, so a drafter that would now pay (a later part of the utterance, a
smaller batch) can win back. Every candidate's session sees every rollback, so any of them can take
over at any step; plain decoding competes through γ = 0.
"""

from __future__ import annotations

from collections.abc import Hashable

from voicespec.engine.controller import AdaptiveGamma, ControllerConfig, CostLine
from voicespec.engine.drafters.base import Draft, DraftContext, Drafter, DraftSession
from voicespec.engine.layout import Prompt, TokenLayout


class ChoiceSession:
    """Both a draft session and the request's γ controller (``choose``/``observe``)."""

    def __init__(self, sessions: dict[str, DraftSession], config: ControllerConfig) -> None:
        self.sessions = sessions
        self.configure(config)
    def configure(self, config: ControllerConfig) -> None:
        """The request's controller settings (γ cap, latency budget) for every candidate."""
        shared = CostLine()
        self.controllers = {name: AdaptiveGamma(config, shared) for name in self.sessions}
        self.config = config
        self.active = next(iter(self.sessions))
        self.gamma = 0
        self.last_used = {name: -1 for name in self.sessions}
        self.steps = 0
        self.chosen: list[str] = []  # the drafter of every step, for the stats

    def choose(self, limit: int) -> int:
        self.steps += 1
        fresh = [n for n, t in self.last_used.items() if t < 0]
        if fresh:
            self.active = fresh[0]
        elif self.steps % self.config.probe_every == 0:
            self.active = min(self.last_used, key=self.last_used.get)
        else:
            self.active = max(self.controllers, key=lambda n: self.controllers[n].best(limit)[1])
        self.last_used[self.active] = self.steps
        self.chosen.append(self.active)
        self.gamma = self.controllers[self.active].choose(limit)
        return self.gamma

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float, commit_s: float = 0.0,
                tree: Hashable | None = None, slots: int = 0, batch: int = 1) -> None:
        """A drafter asked for steps that proposed none (n-gram without a match) is scored as one
        rejected step at what the attempt cost, so it cannot keep its optimistic prior. (It
        chooses no trees: ``tree`` is for a request that fixed one.)"""
        if drafted == 0 and self.gamma > 0:
            drafted = 1
        self.controllers[self.active].observe(drafted, accepted, draft_s, verify_s, commit_s, tree, slots, batch)

    def propose(self, ctx: DraftContext, gamma: int) -> Draft:
        return self.sessions[self.active].propose(ctx, gamma)

    def rollback(self, keep: int) -> None:
        for s in self.sessions.values():
            s.rollback(keep)

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()


class ChoiceDrafter:
    """``drafters``: the candidates, by name (all for the same target)."""

    name = "auto"

    def __init__(self, drafters: dict[str, Drafter], config: ControllerConfig | None = None) -> None:
        if not drafters:
            raise ValueError("the auto drafter needs at least one drafter to choose from")
        layouts = {d.layout for d in drafters.values() if d.layout is not None}
        if len(layouts) > 1:
            raise ValueError(f"the auto drafter's candidates disagree on the layout: {sorted(map(str, layouts))}")
        self.drafters = drafters
        self.config = config or ControllerConfig()
        self.layout: TokenLayout | None = layouts.pop() if layouts else None

    def start(self, prompt: Prompt) -> ChoiceSession:
        return ChoiceSession({name: d.start(prompt) for name, d in self.drafters.items()}, self.config)
