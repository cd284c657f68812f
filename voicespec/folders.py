"""Model folders we write ourselves (codec, recognizer): ``config.json`` + ``model.safetensors``,
read back with one clear error for every way a folder can be wrong."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file, save_file

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def save_folder(path: str | Path, config: dict[str, Any], module: torch.nn.Module) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    save_file(state, str(path / WEIGHTS_NAME))
    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")


def read_config(path: str | Path, type_key: str, type_value: str, what: str) -> dict[str, Any]:
    """The folder's config, checked to be a ``what`` (``config[type_key] == type_value``)."""
    path = Path(path)
    cfg_file = path / CONFIG_NAME
    if not cfg_file.is_file() or not (path / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(f"{path}: not {what} folder (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    try:
        raw = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{cfg_file}: invalid JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get(type_key) != type_value:
        kind = raw.get(type_key) if isinstance(raw, dict) else None
        raise ValueError(f"{cfg_file}: not {what} config ({type_key}={kind!r})")
    return raw


def load_weights(path: str | Path, module: torch.nn.Module) -> None:
    weights = Path(path) / WEIGHTS_NAME
    try:
        module.load_state_dict(load_file(str(weights)))
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
