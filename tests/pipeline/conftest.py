"""Pipeline fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def aligned_voice(tmp_path_factory):
    """A tiny random-weight voice whose target is frame-aligned (its durations fix each length)."""
    from voicespec.pipeline.tiny import build_tiny_voice
    from voicespec.api import Voice  # the pipeline's Voice, with the Python API's say/stream

    return Voice.load(build_tiny_voice(tmp_path_factory.mktemp("voices") / "aligned", layout="aligned"))
