"""Drafters: propose future steps cheaply for the target to verify in one pass."""

from __future__ import annotations

from voicespec.engine.drafters.base import Draft, DraftContext, Drafter, DraftSession
from voicespec.engine.drafters.model import ModelDrafter
from voicespec.engine.drafters.ngram import NGramDrafter

DRAFTERS = ("none", "ngram", "draft-model")


def make_drafter(name: str, draft_model: str | None = None) -> Drafter | None:
    """A drafter by name (``none`` gives plain decoding). ``draft-model`` needs a model folder."""
    if name == "none":
        return None
    if name == "ngram":
        return NGramDrafter()
    if name == "draft-model":
        if not draft_model:
            raise ValueError("drafter 'draft-model' needs --draft-model DIR (a model folder)")
        from voicespec.lm.loading import load_step_lm

        return ModelDrafter(load_step_lm(draft_model))
    raise ValueError(f"unknown drafter {name!r}; choose one of: {', '.join(DRAFTERS)}")


__all__ = ["DRAFTERS", "Draft", "DraftContext", "DraftSession", "Drafter", "ModelDrafter", "NGramDrafter", "make_drafter"]
