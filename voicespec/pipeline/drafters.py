"""The one drafter registry: a drafter by name, for a voice (its shipped draft models) or for the
engine-only ``generate`` command (a draft model folder given on the command line).

Names: ``none`` (plain decoding), ``ngram`` (prompt lookup, model-free), or the name of a draft
model folder. Lives here, not in the engine, because building a draft model means loading one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from voicespec.engine.drafters import Drafter, ModelDrafter, NGramDrafter
from voicespec.lm.loading import load_step_lm

BUILTIN = ("none", "ngram")


def drafter_names(draft_models: Mapping[str, str | Path]) -> list[str]:
    return [*BUILTIN, *sorted(draft_models)]


def build_drafter(name: str, draft_models: Mapping[str, str | Path], ngram: Mapping[str, Any] | None = None,
                  owner: str = "", device: Any = "cpu", dtype: Any = None) -> Drafter | None:
    """The drafter called ``name`` (None for ``none``; a draft model on ``device`` in ``dtype``);
    ValueError lists the names there are."""
    if name == "none":
        return None
    if name == "ngram":
        return NGramDrafter(**(ngram or {}))
    if name in draft_models:
        return ModelDrafter(load_step_lm(str(draft_models[name]), device=device, dtype=dtype))
    where = f" for {owner}" if owner else ""
    raise ValueError(f"unknown drafter {name!r}{where}; choose one of: {', '.join(drafter_names(draft_models))}")
