"""The drafter registry: names a voice or model folder offers, and clear errors for the rest."""

from __future__ import annotations

import pytest

from voicespec.pipeline.drafters import build_drafter


def test_unknown_drafter_name():
    with pytest.raises(ValueError, match=r"unknown drafter 'nope' for voice 'v'; choose one of: none, ngram, auto, a, b"):
        build_drafter("nope", {"b": "x", "a": "y"}, owner="voice 'v'")


def test_draft_model_with_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        build_drafter("draft-model", {"draft-model": str(tmp_path / "nowhere")})

