"""Drafters: propose future steps cheaply for the target to verify in one pass."""

from __future__ import annotations

from voicespec.engine.drafters.base import Draft, DraftContext, Drafter, DraftSession
from voicespec.engine.drafters.choice import ChoiceDrafter
from voicespec.engine.drafters.early_exit import EarlyExitDrafter
from voicespec.engine.drafters.feature import FeatureDrafter
from voicespec.engine.drafters.medusa import MedusaDrafter
from voicespec.engine.drafters.model import ModelDrafter
from voicespec.engine.drafters.ngram import NGramDrafter

__all__ = ["ChoiceDrafter", "Draft", "DraftContext", "DraftSession", "Drafter", "EarlyExitDrafter", "FeatureDrafter", "MedusaDrafter", "ModelDrafter", "NGramDrafter"]
