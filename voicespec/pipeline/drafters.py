"""The one drafter registry: a drafter by name, for a voice (its shipped draft models) or for the
engine-only ``generate`` command (a draft model folder given on the command line).

Names: ``none`` (plain decoding), ``ngram`` (prompt lookup, model-free), ``auto`` (all of the
voice's shipped drafters and n-gram, the controller choosing one per step), ``early-exit-N`` (the
target's first N layers), or the name of a draft
folder: a draft LM (its own cache) or draft heads over the target's hidden state (``feature``,
``medusa``; :mod:`voicespec.lm.draft_heads`), told apart by the folder's config. Lives here, not in the engine, because building a draft model means loading one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


from voicespec.engine.drafters import ChoiceDrafter, Drafter, EarlyExitDrafter, FeatureDrafter, MedusaDrafter, ModelDrafter, NGramDrafter
from voicespec.engine.step_lm import StepLM
from voicespec.lm.codec_lm import CodecStepLM
from voicespec.lm.draft_heads import DraftHeads, DraftHeadsConfig
from voicespec.folders import declared_type
from voicespec.lm.loading import check_model_folder, load_step_lm

BUILTIN = ("none", "ngram", "auto")
EARLY_EXIT = "early-exit-"  # + the layers kept: the target's first layers as its own draft


def early_exit_names(target: StepLM | None) -> list[str]:
    """``early-exit-1`` .. ``early-exit-(L-1)`` for a codec LM target over a plain-torch stack of L layers."""
    if not isinstance(target, CodecStepLM) or target.stack is None:
        return []
    return [f"{EARLY_EXIT}{n}" for n in range(1, target.stack.layers)]


def drafter_names(draft_models: Mapping[str, str | Path], target: StepLM | None = None) -> list[str]:
    return [*BUILTIN, *early_exit_names(target), *sorted(draft_models)]


def build_drafter(name: str, draft_models: Mapping[str, str | Path], ngram: Mapping[str, Any] | None = None,
                  owner: str = "", device: Any = "cpu", dtype: Any = None, target: StepLM | None = None,
                  resolve: Callable[[str], Drafter | None] | None = None) -> Drafter | None:
    """The drafter called ``name`` (None for ``none``; a draft model on ``device`` in ``dtype``;
    draft heads need the ``target`` they read); ValueError lists the names there are.
    ``resolve(name)``: how ``auto`` gets its candidates (default: built here; a voice passes its
    own cache, so no draft model is loaded twice)."""
    if name == "none":
        return None
    if name == "ngram":
        return NGramDrafter(**(ngram or {}))
    if name == "auto":  # every shipped drafter and n-gram; the controller picks one per step
        resolve = resolve or (lambda n: build_drafter(n, draft_models, ngram, owner, device, dtype, target))
        return ChoiceDrafter({n: resolve(n) for n in ("ngram", *sorted(draft_models))})
    if name in early_exit_names(target):
        return EarlyExitDrafter(target, int(name.removeprefix(EARLY_EXIT)))
    if name in draft_models:
        folder = str(draft_models[name])
        check_model_folder(folder)
        if declared_type(folder) == DraftHeadsConfig.TYPE:
            if target is None:
                raise ValueError(f"drafter {name!r} reads the target's hidden state: it needs the target")
            heads = DraftHeads.from_folder(folder).to(device, dtype)
            kind = FeatureDrafter if heads.config.kind == "feature" else MedusaDrafter
            return kind(target, heads, name)
        return ModelDrafter(load_step_lm(folder, device=device, dtype=dtype))
    where = f" for {owner}" if owner else ""
    raise ValueError(f"unknown drafter {name!r}{where}; choose one of: {', '.join(drafter_names(draft_models, target))}")
