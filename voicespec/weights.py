"""The weights half of a model folder (:mod:`voicespec.folders` is the configuration half):
safetensors files written through ``huggingface_hub`` (one file, or shards and an index), read
back with ``safetensors`` and checked key for key, and a module base that does both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from huggingface_hub import save_torch_state_dict
from safetensors.torch import load_file
from torch.overrides import TorchFunctionMode

from voicespec.folders import CONFIG_NAME, INDEX_NAME, SHARD_BYTES, WEIGHTS_NAME, FolderConfig


def save_folder(path: str | Path, config: dict[str, Any], module: torch.nn.Module, shard_bytes: int = SHARD_BYTES) -> None:
    """Weights (one file, or shards + index past ``shard_bytes``; stale ones removed) and config."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # Own copies: a buffer may be a view into a larger storage, which the shared-tensor check refuses.
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    save_torch_state_dict(state, path, max_shard_size=shard_bytes)
    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of folder ``path`` (one file, or the shards its index names), on the CPU."""
    path = Path(path)
    index = path / INDEX_NAME
    if not index.is_file():
        return load_file(path / WEIGHTS_NAME)
    weight_map = json.loads(index.read_text())["weight_map"]
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        state.update(load_file(path / shard))
    if missing := set(weight_map) - set(state):
        raise ValueError(f"the index names tensors no shard holds: {sorted(missing)[:3]}")
    return state


def load_weights(path: str | Path, module: torch.nn.Module, legacy: tuple[str, ...] = ()) -> None:
    """Load folder ``path`` into ``module``, every key matched (``legacy``: keys older folders hold
    that the module no longer has, dropped)."""
    path = Path(path)
    weights = path / INDEX_NAME if (path / INDEX_NAME).is_file() else path / WEIGHTS_NAME
    try:
        state = read_weights(path)
        for key in legacy:
            state.pop(key, None)
        module.load_state_dict(state, strict=True)
    except Exception as e:  # safetensors raises several types for truncated/corrupt files
        raise ValueError(f"{weights}: corrupt or incompatible checkpoint ({e})") from None


class SkippedRandomInit(TorchFunctionMode):
    """While active, in this thread only (torch's function modes are per thread), random initialisers
    leave their tensor as it is: building a module whose every weight a checkpoint then overwrites
    need not draw them (about a third of loading the default voice). Fills (``zeros_``, ``ones_``)
    and computed buffers (RoPE frequencies, windows) run as usual. The ``nn.init`` functions that
    dispatch to a mode are skipped whole; the others (``xavier_*``, ``trunc_normal_``, ...) draw
    through the tensor methods listed here."""

    SKIPPED = frozenset({
        torch.Tensor.uniform_, torch.Tensor.normal_,
        torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.kaiming_uniform_, torch.nn.init.kaiming_normal_,
    })

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in self.SKIPPED:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


class FolderModule(torch.nn.Module):
    """A small ``nn.Module`` built from a :class:`FolderConfig` and kept as a folder: ``save`` and
    ``from_folder`` (weights checked against the architecture by ``load_weights``)."""

    config_class: ClassVar[type[FolderConfig]]
    LEGACY_KEYS: ClassVar[tuple[str, ...]] = ()  # in older folders, no longer in the module (see load_weights)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, path: str | Path) -> None:
        save_folder(path, self.config.to_dict(), self)

    @classmethod
    def from_folder(cls, path: str | Path):
        """The module saved in ``path``, built without drawing initial weights (every one is
        overwritten: ``load_weights`` is strict); the caller's random stream stays where it was."""
        config = cls.config_class.read(path)
        with torch.random.fork_rng(devices=[]), SkippedRandomInit():
            model = cls(config)
        load_weights(path, model, cls.LEGACY_KEYS)
        return model.eval()
