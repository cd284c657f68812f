"""The token policy: legality masks plus warpers, applied identically by the target and drafters."""

from __future__ import annotations

import torch

from dataclasses import dataclass
from typing import Any

from voicespec.engine.layout import LayoutState, TokenLayout, masks_along
from voicespec.engine.config import SamplingConfig
from voicespec.engine.sampling import recent_tokens, sample, warp
from voicespec.engine.work import Work, run_grouped


class TokenPolicy:
    """Turns raw logits at a block of positions into the distributions plain decoding would use.

    Position ``i`` of a block is conditioned on the committed steps followed by ``block[:i]``; its
    mask and repetition-penalty context are computed from exactly that prefix.
    """

    def __init__(self, layout: TokenLayout, sampling: SamplingConfig) -> None:
        self.layout = layout
        self.sampling = sampling

    def warp(
        self, raw: torch.Tensor, state: LayoutState, block: torch.Tensor, generated: torch.Tensor
    ) -> torch.Tensor:
        """``raw``: ``[T+1, G, V]`` logits after each prefix of ``block`` (``[T, G]``)."""
        return WarpWork.run([WarpWork(self, raw, state, block, generated)])[0]

    def warp_work(self, raw: torch.Tensor, state: LayoutState, block: torch.Tensor,
                  generated: torch.Tensor) -> WarpWork:
        """:meth:`warp` as a call a scheduler may batch with other sessions' (same sampling)."""
        return WarpWork(self, raw, state, block, generated)

    def warp_rows(self, raw: torch.Tensor, states: list[LayoutState], generated: list[torch.Tensor] | None) -> torch.Tensor:
        """:meth:`warp` of ``n`` independent positions as one call: ``raw [n, G, V]``, row ``i`` in
        ``states[i]`` after ``generated[i]`` (read only by a repetition penalty: None without
        one). A drafted step (``n = 1``, the lean path: its cost is part of every draft step's) or
        the nodes of a draft tree (one mask per distinct state, one warp)."""
        if len(states) == 1:
            mask = self.layout.mask(states[0])[None]
        else:
            masks: dict[LayoutState, torch.Tensor] = {}
            for s in states:
                if s not in masks:
                    masks[s] = self.layout.mask(s)
            mask = torch.stack([masks[s] for s in states])
        recent = None
        if self.sampling.uses_history:
            if generated is None:
                raise ValueError("a repetition penalty reads each row's generated steps")
            recent = torch.cat([recent_tokens(g, g[:0], self.sampling.repetition_window) for g in generated])
        return warp(raw, mask, self.sampling, recent)

    def warp_tree(self, raw: torch.Tensor, state: LayoutState, tokens: torch.Tensor, tree: Any,
                  generated: torch.Tensor) -> torch.Tensor:
        """:meth:`warp` for a draft tree: ``raw [1 + nodes, G, V]`` after each slot of ``tokens
        [1 + nodes, G]`` (slot 0 the pending step, then ``tree``'s nodes, parents first), each
        slot warped with the mask and recent tokens of its own path. One call for every slot."""
        history = self.sampling.uses_history
        states, paths, codes = [state], [generated], tokens[:, 0].tolist()
        for t in range(1, len(tree.parents)):
            parent = tree.parents[t]
            states.append(self.layout.advance(states[parent], codes[t]))
            if history:
                paths.append(torch.cat([paths[parent], tokens[t: t + 1]]))
        return self.warp_rows(raw, states, paths if history else None)

    def probs(self, warped: torch.Tensor) -> torch.Tensor:
        return warped.softmax(-1)

    def choose(self, warped: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The next tokens (``[..., G]``): argmax when greedy, else a sample."""
        if self.sampling.greedy:
            return warped.argmax(-1)
        return sample(self.probs(warped), generator)


@dataclass(eq=False)
class WarpWork(Work):
    """One session's :meth:`TokenPolicy.warp`. Sessions with the same sampling configuration warp
    as one call: positions are independent rows (each with its own mask and recent tokens), so
    stacking the rows of many sessions changes nothing for any of them."""

    policy: TokenPolicy
    raw: torch.Tensor
    state: LayoutState
    block: torch.Tensor
    generated: torch.Tensor

    @classmethod
    def run(cls, works: list[WarpWork]) -> list[torch.Tensor]:
        return run_grouped(works, lambda w: w.policy.sampling, cls._warp_group)

    @staticmethod
    def _warp_group(group: list[WarpWork]) -> tuple[torch.Tensor, ...]:
        """One warp over the rows of sessions that share a sampling configuration."""
        sampling = group[0].policy.sampling
        masks = torch.cat([masks_along(w.policy.layout, w.state, w.block) for w in group])
        recent = None
        if sampling.uses_history:
            recent = torch.cat([recent_tokens(w.generated, w.block, sampling.repetition_window) for w in group])
        raw = group[0].raw if len(group) == 1 else torch.cat([w.raw for w in group])
        return warp(raw, masks, sampling, recent).split([w.raw.shape[0] for w in group])
