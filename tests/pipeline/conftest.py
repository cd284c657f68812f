"""Pipeline fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def aligned_voice(tmp_path_factory):
    """A tiny random-weight voice whose target is frame-aligned (its durations fix each length)."""
    from voicespec.pipeline.tiny import build_tiny_voice
    from voicespec.pipeline.voice import Voice

    return Voice.load(build_tiny_voice(tmp_path_factory.mktemp("voices") / "aligned", layout="aligned"))
