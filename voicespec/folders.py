"""Model folders we write ourselves (codec, recognizer, durations): ``config.json`` +
``model.safetensors`` (or, past ``SHARD_BYTES``, numbered shards and an index, as Hugging Face
writes them, so that no shipped file outgrows git), read back with one clear error for every way a
folder can be wrong. This module is the configuration half (standard library only, so configs and
their defaults can be read without torch); :mod:`voicespec.weights` is the weights half."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_BYTES = 16_000_000
# What ``transformers`` writes into every config it saves: our LM folders were first written by it,
# and these keys describe that library's bookkeeping, not the model.
HF_BOOKKEEPING = ("architectures", "dtype", "torch_dtype", "transformers_version", "_name_or_path")


def _read_json(cfg_file: Path) -> Any:
    try:
        return json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{cfg_file}: invalid JSON ({e})") from None


def declared_type(path: str | Path, type_key: str = "model_type") -> str | None:
    """The type a local folder's config declares (None where there is no config, as for a hub
    id, or it declares none): how a loader picks the class before reading the folder as one."""
    cfg_file = Path(path) / CONFIG_NAME
    if not cfg_file.is_file():
        return None
    raw = _read_json(cfg_file)
    return raw.get(type_key) if isinstance(raw, dict) else None


def read_config(path: str | Path, type_key: str, type_value: str, what: str) -> dict[str, Any]:
    """The folder's config, checked to be a ``what`` (``config[type_key] == type_value``)."""
    path = Path(path)
    cfg_file = path / CONFIG_NAME
    if not cfg_file.is_file() or not ((path / WEIGHTS_NAME).is_file() or (path / INDEX_NAME).is_file()):
        raise FileNotFoundError(f"{path}: not {what} folder (needs {CONFIG_NAME} and {WEIGHTS_NAME} or {INDEX_NAME})")
    raw = _read_json(cfg_file)
    if not isinstance(raw, dict) or raw.get(type_key) != type_value:
        kind = raw.get(type_key) if isinstance(raw, dict) else None
        raise ValueError(f"{cfg_file}: not {what} config ({type_key}={kind!r})")
    return raw


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
        return cls(**{k: v for k, v in d.items() if k != cls.TYPE_KEY and k not in HF_BOOKKEEPING})

    @classmethod
    def read(cls, path: str | Path):
        """The config of folder ``path``; ``ValueError`` naming the file if it is not a valid one."""
        raw = read_config(path, cls.TYPE_KEY, cls.TYPE, cls.WHAT)
        try:
            return cls.from_dict(raw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{Path(path) / CONFIG_NAME}: bad {cls.WHAT} config ({e})") from None
