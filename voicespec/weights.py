"""The weights half of a model folder (:mod:`voicespec.folders` is the configuration half):
safetensors files written and loaded through ``huggingface_hub``, and a module base that does both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from huggingface_hub import load_torch_model, save_torch_state_dict

from voicespec.folders import CONFIG_NAME, INDEX_NAME, SHARD_BYTES, WEIGHTS_NAME, FolderConfig


def save_folder(path: str | Path, config: dict[str, Any], module: torch.nn.Module, shard_bytes: int = SHARD_BYTES) -> None:
    """Weights (one file, or shards + index past ``shard_bytes``; stale ones removed) and config."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # Own copies: a buffer may be a view into a larger storage, which the shared-tensor check refuses.
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    save_torch_state_dict(state, path, max_shard_size=shard_bytes)
    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")


def load_weights(path: str | Path, module: torch.nn.Module) -> None:
    path = Path(path)
    weights = path / INDEX_NAME if (path / INDEX_NAME).is_file() else path / WEIGHTS_NAME
    try:
        load_torch_model(module, path, strict=True)
    except Exception as e:  # safetensors raises several types for truncated/corrupt files
        raise ValueError(f"{weights}: corrupt or incompatible checkpoint ({e})") from None


class FolderModule(torch.nn.Module):
    """A small ``nn.Module`` built from a :class:`FolderConfig` and kept as a folder: ``save`` and
    ``from_folder`` (weights checked against the architecture by ``load_weights``)."""

    config_class: ClassVar[type[FolderConfig]]

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, path: str | Path) -> None:
        save_folder(path, self.config.to_dict(), self)

    @classmethod
    def from_folder(cls, path: str | Path):
        model = cls(cls.config_class.read(path))
        load_weights(path, model)
        return model.eval()
