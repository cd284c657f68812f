"""Drafters: propose future steps cheaply for the target to verify in one pass."""

from __future__ import annotations

from voicespec.engine.drafters.base import Draft, DraftContext, Drafter, DraftSession
from voicespec.engine.drafters.model import ModelDrafter
from voicespec.engine.drafters.ngram import NGramDrafter

__all__ = ["Draft", "DraftContext", "DraftSession", "Drafter", "ModelDrafter", "NGramDrafter"]
