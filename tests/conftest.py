import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
torch.set_num_threads(1)

import pytest


@pytest.fixture(scope="session")
def tiny_voice_dir(tmp_path_factory):
    """A complete random-weight voice folder (delay layout), built once per test session."""
    from voicespec.pipeline.tiny import build_tiny_voice

    return build_tiny_voice(tmp_path_factory.mktemp("voices") / "tiny")


@pytest.fixture(scope="session")
def tiny_voice(tiny_voice_dir):
    from voicespec.pipeline.voice import Voice

    return Voice.load(tiny_voice_dir)
