"""Loading step LMs from HF-style folders (or hub ids, on machines with network).

A folder holds ``config.json`` + ``model.safetensors``. Our multi-head codec LM is recognised by its
``model_type``; any other causal LM is decoded in the flat layout recorded in its config under
``voicespec_layout`` (or passed explicitly, e.g. for a pretrained Orpheus-style checkpoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from voicespec.engine.layout import FlatLayout, TokenLayout, layout_from_dict
from voicespec.engine.step_lm import StepLM
from voicespec.folders import CONFIG_NAME, declared_type
from voicespec.lm.codec_lm import CodecLM, CodecLMConfig, CodecStepLM
from voicespec.weights import FolderModule

LAYOUT_KEY = "voicespec_layout"


def save_model(model: Any, path: str | Path) -> None:
    """A model folder :func:`load_step_lm` reads back: ours as we write folders, a ``transformers``
    model through its own ``save_pretrained``."""
    if isinstance(model, FolderModule):
        model.save(path)
    else:
        model.save_pretrained(path)


def attach_layout(model: Any, layout: FlatLayout) -> None:
    """Record the flat layout in the model's config so ``save_pretrained`` carries it."""
    setattr(model.config, LAYOUT_KEY, layout.to_dict())


def check_model_folder(path: str) -> None:
    """Local folders must exist and hold a config; anything shaped like ``org/name`` (or
    ``name``) that is not a local path is left to ``from_pretrained`` as a hub id."""
    p = Path(path)
    if p.exists():
        if not (p / CONFIG_NAME).is_file():
            raise FileNotFoundError(f"{path}: not a model folder (no config.json)")
        return
    looks_local = p.is_absolute() or path.startswith((".", "~")) or path.count("/") > 1 or os.sep != "/" and os.sep in path
    if looks_local:
        raise FileNotFoundError(f"{path}: no such model folder")


def load_step_lm(path: str, layout: TokenLayout | dict[str, Any] | None = None, device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None, **kw: Any) -> StepLM:
    """Load a model folder (or hub id) as a step LM ready for the decoder, its weights (and so its
    KV cache) on ``device`` in ``dtype`` (default: as saved). Our codec LMs load in plain torch;
    anything else goes through ``transformers`` (imported only then)."""
    check_model_folder(path)
    if declared_type(path) == CodecLMConfig.TYPE:
        return CodecStepLM(CodecLM.from_folder(path).to(device, dtype))
    from transformers import AutoConfig, AutoModelForCausalLM

    from voicespec.lm.hf import HFCausalLM

    config = AutoConfig.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, **kw).to(device, dtype)
    if isinstance(layout, dict):
        layout = layout_from_dict(layout)
    if layout is None:
        stored = getattr(config, LAYOUT_KEY, None)
        if stored is None:
            raise ValueError(f"{path}: config has no {LAYOUT_KEY!r}; pass the token layout explicitly")
        layout = layout_from_dict(json.loads(stored) if isinstance(stored, str) else stored)
    if not isinstance(layout, FlatLayout):
        raise ValueError("a plain causal LM decodes in the flat layout")
    return HFCausalLM(model, layout)
