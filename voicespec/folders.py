"""Model folders we write ourselves (codec, recognizer): ``config.json`` + ``model.safetensors``
(or, past ``SHARD_BYTES``, numbered shards and an index, as Hugging Face writes them, so that no
shipped file outgrows git), read back with one clear error for every way a folder can be wrong."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import torch
from huggingface_hub import load_torch_model, save_torch_state_dict

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_BYTES = 16_000_000


def save_folder(path: str | Path, config: dict[str, Any], module: torch.nn.Module, shard_bytes: int = SHARD_BYTES) -> None:
    """Weights (one file, or shards + index past ``shard_bytes``; stale ones removed) and config."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # Own copies: a buffer may be a view into a larger storage, which the shared-tensor check refuses.
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    save_torch_state_dict(state, path, max_shard_size=shard_bytes)
    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")


def read_config(path: str | Path, type_key: str, type_value: str, what: str) -> dict[str, Any]:
    """The folder's config, checked to be a ``what`` (``config[type_key] == type_value``)."""
    path = Path(path)
    cfg_file = path / CONFIG_NAME
    if not cfg_file.is_file() or not ((path / WEIGHTS_NAME).is_file() or (path / INDEX_NAME).is_file()):
        raise FileNotFoundError(f"{path}: not {what} folder (needs {CONFIG_NAME} and {WEIGHTS_NAME} or {INDEX_NAME})")
    try:
        raw = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{cfg_file}: invalid JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get(type_key) != type_value:
        kind = raw.get(type_key) if isinstance(raw, dict) else None
        raise ValueError(f"{cfg_file}: not {what} config ({type_key}={kind!r})")
    return raw


def load_weights(path: str | Path, module: torch.nn.Module) -> None:
    path = Path(path)
    weights = path / INDEX_NAME if (path / INDEX_NAME).is_file() else path / WEIGHTS_NAME
    try:
        load_torch_model(module, path, strict=True)
    except Exception as e:  # safetensors raises several types for truncated/corrupt files
        raise ValueError(f"{weights}: corrupt or incompatible checkpoint ({e})") from None


class FolderConfig:
    """Mixin for a dataclass config kept as a folder's ``config.json``, tagged ``TYPE_KEY: TYPE``
    so that a folder of another kind is refused with a clear error instead of half-loading."""

    TYPE_KEY: ClassVar[str] = "model_type"
    TYPE: ClassVar[str]
    WHAT: ClassVar[str]  # "a voicespec codec": for error messages

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d[self.TYPE_KEY] = self.TYPE
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        return cls(**{k: v for k, v in d.items() if k != cls.TYPE_KEY})

    @classmethod
    def read(cls, path: str | Path):
        """The config of folder ``path``; ``ValueError`` naming the file if it is not a valid one."""
        raw = read_config(path, cls.TYPE_KEY, cls.TYPE, cls.WHAT)
        try:
            return cls.from_dict(raw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{Path(path) / CONFIG_NAME}: bad {cls.WHAT} config ({e})") from None


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
