"""The voices one server speaks: the default one loaded at start, any other installed voice on
first use, on a thread, so the event loop never waits on a load and an unused voice costs nothing."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from voicespec.pipeline.drafters import BUILTIN
from voicespec.pipeline.voice import VOICE_FILE, Voice, VoiceConfig, resolve_voice

log = logging.getLogger("voicespec.server")


class VoiceLoadError(Exception):
    """An installed voice that failed to load. Its message is for clients: it names the voice,
    never a path or the exception (those are in the server's log, once)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"voice {name!r} failed to load on the server (its operator's log says why); "
                         "choose another voice (GET /v1/voices)")
        self.name = name


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
        self._broken: set[str] = set()  # voices whose load failed: not tried again (see ensure)
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

        A failed load is logged once, with its traceback, and remembered: it raises
        :class:`VoiceLoadError` for this request and, without loading again, for every later one.
        A broken folder stays broken until the server restarts (a fixed folder is not reloaded):
        otherwise every request for it reloads it and logs a traceback, which any client could
        turn into a flood of both (issue 39)."""
        key = self.canonical(name)
        if key is None:
            return None
        if key in self._loaded:
            return self._loaded[key]
        if key in self._broken:
            raise VoiceLoadError(key)
        if key not in self._loading:
            self._loading[key] = asyncio.ensure_future(self._load_once(key))
        try:
            return await asyncio.shield(self._loading[key])
        finally:
            if self._loading.get(key) is not None and self._loading[key].done():
                del self._loading[key]

    async def _load_once(self, key: str) -> Voice:
        """One load of ``key`` on a worker thread, its outcome remembered either way."""
        try:
            voice = await asyncio.to_thread(self._load_ready, key)
        except Exception:  # a broken voice folder: this voice fails, the server goes on
            log.exception("loading voice %r failed; requests for it fail until the server restarts", key)
            self._broken.add(key)
            raise VoiceLoadError(key) from None
        self._loaded[key] = voice
        return voice

    def _load_ready(self, name: str) -> Voice:
        voice = self._load(name)
        self._prepare(voice)
        return voice

    def describe(self) -> list[dict[str, Any]]:
        """For ``GET /v1/voices``: each voice's rate, drafters, default decoding ("greedy": a seed changes
        nothing unless a temperature is asked for) and abilities; an unloaded one
        described from its folder (its drafters: the built-in ones and those it ships)."""
        out = []
        for name in self._names:
            voice = self._loaded.get(name)
            if name in self._broken:
                out.append({"name": name, "loaded": False, "error": "failed to load on the server"})
            elif voice is not None:
                out.append({"name": name, "loaded": True, "sample_rate": voice.codec.sample_rate,
                            "drafters": voice.drafter_names, "default_drafter": voice.config.default_drafter,
                            "decoding": voice.config.decoding, "speed": voice.duration is not None,
                            "timestamps": voice.duration is not None})
            else:
                try:
                    out.append(describe_folder(name))
                except (OSError, ValueError, KeyError) as e:  # one broken folder does not hide the others
                    # Named without its path or the exception's text: this page is for clients.
                    out.append({"name": name, "loaded": False,
                                "error": f"its folder could not be read ({type(e).__name__})"})
        return out


def describe_folder(name: str) -> dict[str, Any]:
    """A voice's description read from its folder without loading it."""
    folder: Path = resolve_voice(name)
    cfg = json.loads((folder / VOICE_FILE).read_text())
    codec = json.loads((folder / cfg.get("codec", VoiceConfig.codec) / "config.json").read_text())
    drafters = folder / "drafters"
    shipped = sorted(d.name for d in drafters.iterdir() if d.is_dir()) if drafters.is_dir() else []
    timed = bool(cfg.get("duration"))
    return {"name": name, "loaded": False, "sample_rate": codec.get("sample_rate"), "drafters": [*BUILTIN, *shipped],
            "default_drafter": cfg.get("default_drafter", VoiceConfig.default_drafter),
            "decoding": cfg.get("decoding", VoiceConfig.decoding), "speed": timed, "timestamps": timed}
