"""The voices one server speaks: the default one loaded at start, any other installed voice on
first use, on a thread, so the event loop never waits on a load and an unused voice costs nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from voicespec.pipeline.drafters import BUILTIN
from voicespec.pipeline.voice import VOICE_FILE, Voice, resolve_voice


class VoiceSet:
    """``default`` answers to its name, ``None`` and ``"default"``; ``names`` are the other voices
    a client may name (resolved by :func:`~voicespec.pipeline.voice.resolve_voice`); ``load``
    loads one (on a worker thread), ``prepare`` readies it for serving (draft models, caches)."""

    def __init__(self, default: Voice, names: Sequence[str], load: Callable[[str], Voice],
                 prepare: Callable[[Voice], None], aliases: Sequence[str] = ()) -> None:
        self.default = default
        self._loaded: dict[str, Voice] = {default.name: default}
        self._aliases = set(aliases)  # what the operator named the default voice by (a folder, say): it too
        self._names = [default.name, *(n for n in names if n != default.name and n not in self._aliases)]
        self._load, self._prepare = load, prepare
        self._loading: dict[str, asyncio.Future] = {}
        prepare(default)

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def canonical(self, name: str | None) -> str | None:
        """The served name ``name`` refers to, or None if this server does not speak it."""
        if name in (None, "default") or name in self._aliases:
            return self.default.name
        return name if name in self._names else None

    def loaded(self, name: str | None) -> Voice | None:
        return self._loaded.get(self.canonical(name) or "")

    async def ensure(self, name: str | None) -> Voice | None:
        """The voice, loaded if need be (concurrent requests share one load); None if unknown.
        A failed load raises, and is tried again by the next request."""
        key = self.canonical(name)
        if key is None:
            return None
        if key in self._loaded:
            return self._loaded[key]
        if key not in self._loading:
            self._loading[key] = asyncio.ensure_future(asyncio.to_thread(self._load_ready, key))
        try:
            voice = await asyncio.shield(self._loading[key])
        finally:
            if self._loading.get(key) is not None and self._loading[key].done():
                del self._loading[key]
        self._loaded[key] = voice
        return voice

    def _load_ready(self, name: str) -> Voice:
        voice = self._load(name)
        self._prepare(voice)
        return voice

    def describe(self) -> list[dict[str, Any]]:
        """For ``GET /v1/voices``: each voice's rate, drafters and abilities; an unloaded one
        described from its folder (its drafters: the built-in ones and those it ships)."""
        out = []
        for name in self._names:
            voice = self._loaded.get(name)
            if voice is not None:
                out.append({"name": name, "loaded": True, "sample_rate": voice.codec.sample_rate,
                            "drafters": voice.drafter_names, "default_drafter": voice.config.default_drafter,
                            "speed": voice.duration is not None, "timestamps": voice.duration is not None})
            else:
                try:
                    out.append(describe_folder(name))
                except (OSError, ValueError, KeyError) as e:  # one broken folder does not hide the others
                    out.append({"name": name, "loaded": False, "error": f"{type(e).__name__}: {e}"})
        return out


def describe_folder(name: str) -> dict[str, Any]:
    """A voice's description read from its folder without loading it."""
    folder: Path = resolve_voice(name)
    cfg = json.loads((folder / VOICE_FILE).read_text())
    codec = json.loads((folder / "codec" / "config.json").read_text())
    drafters = folder / "drafters"
    shipped = sorted(d.name for d in drafters.iterdir() if d.is_dir()) if drafters.is_dir() else []
    timed = bool(cfg.get("duration"))
    return {"name": name, "loaded": False, "sample_rate": codec.get("sample_rate"), "drafters": [*BUILTIN, *shipped],
            "default_drafter": cfg.get("default_drafter", "ngram"), "speed": timed, "timestamps": timed}
