"""Model folders we write ourselves (codec, recognizer): ``config.json`` + ``model.safetensors``
(or, past ``SHARD_BYTES``, numbered shards and an index, as Hugging Face writes them, so that no
shipped file outgrows git), read back with one clear error for every way a folder can be wrong."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file, save_file

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_BYTES = 16_000_000


def _shards(state: dict[str, torch.Tensor], limit: int) -> list[dict[str, torch.Tensor]]:
    """Tensors in order, cut into groups of at most ``limit`` bytes (a bigger tensor gets its own)."""
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in state.items():
        n = t.numel() * t.element_size()
        if groups[-1] and size + n > limit:
            groups.append({})
            size = 0
        groups[-1][name] = t
        size += n
    return groups


def save_folder(path: str | Path, config: dict[str, Any], module: torch.nn.Module, shard_bytes: int = SHARD_BYTES) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for old in [path / WEIGHTS_NAME, path / INDEX_NAME, *path.glob("model-*-of-*.safetensors")]:
        old.unlink(missing_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
    groups = _shards(state, shard_bytes)
    if len(groups) == 1:
        save_file(state, str(path / WEIGHTS_NAME))
    else:
        weight_map = {}
        for i, group in enumerate(groups, 1):
            name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
            save_file(group, str(path / name))
            weight_map.update(dict.fromkeys(group, name))
        total = sum(t.numel() * t.element_size() for t in state.values())
        (path / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
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
    index = path / INDEX_NAME
    weights = index if index.is_file() else path / WEIGHTS_NAME
    try:
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            state = {k: v for f in files for k, v in load_file(str(path / f)).items()}
        else:
            state = load_file(str(weights))
        module.load_state_dict(state)
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
