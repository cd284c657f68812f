"""voicespec: real-time speech synthesis from codec language models, made fast by lossless
speculative decoding.

    import voicespec

    voice = voicespec.Voice.from_pretrained()          # the shipped default voice, "voicespec-tiny-g2"
    audio = voice.say("Hello there.", seed=1)          # an Audio: .pcm, .sample_rate, .words, .stats
    audio.save("hello.wav")
    for chunk in voice.stream("A longer text, sentence by sentence."):
        play(chunk.pcm)                                # float32 at the stream's sample rate

``voicespec.TTSClient`` speaks to a running ``voicespec serve``. Names resolve lazily, so
``import voicespec`` (and the command line's parser) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_EXPORTS = {
    "Voice": "voicespec.api",
    "Audio": "voicespec.pipeline.synthesis",
    "AudioChunk": "voicespec.pipeline.synthesis",
    "Timestamp": "voicespec.frontend.timestamps",
    "TTSClient": "voicespec.serve.client",
    "ServerError": "voicespec.serve.client",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'voicespec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
