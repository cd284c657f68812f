"""Fixtures every test package may use. Test files never import each other (pytest runs with
``--import-mode=importlib``): what they share lives here or in a package's own conftest.py."""

from __future__ import annotations

import json
import math

import importlib
import io

import pytest
import torch

torch.set_num_threads(1)
# CPython 3.11's AST constructor keeps one recursion counter per interpreter, and an error inside
# it (gh-106905, fixed in 3.12) leaves the counter off, so a later ast.parse raises "AST
# constructor recursion depth mismatch". Tracebacks formatted on the servers' threads parse
# source lines; pytest parses modules it imports late to rewrite them. The hypothesis plugin
# imported this module lazily at the end of the session: imported here, before any thread.
importlib.import_module("hypothesis.internal.observability")


@pytest.fixture(scope="session")
def tiny_voice_dir(tmp_path_factory):
    """A complete random-weight voice folder (delay layout), built once per test session."""
    from voicespec.pipeline.tiny import build_tiny_voice

    return build_tiny_voice(tmp_path_factory.mktemp("voices") / "tiny")


@pytest.fixture(scope="session")
def aligned_voice_dir(tmp_path_factory):
    """A tiny voice with a duration predictor (aligned layout): one that can change its speed."""
    from voicespec.pipeline.tiny import build_tiny_voice

    return build_tiny_voice(tmp_path_factory.mktemp("voices") / "aligned", layout="aligned")


class _TerminalStream(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal_stream():
    """``terminal_stream()``: a text stream that says it is a terminal (for stdin/stdout/stderr checks)."""
    return _TerminalStream


@pytest.fixture(scope="session")
def tiny_voice(tiny_voice_dir):
    from voicespec.api import Voice  # the pipeline's Voice, with the Python API's say/stream

    return Voice.load(tiny_voice_dir)


def _full_logits(lm, prompt, steps: torch.Tensor) -> torch.Tensor:
    from voicespec.engine.layout import Prompt

    seq = torch.cat([prompt.steps, steps])
    fresh = lm.start(Prompt(prompt.text, seq[:1], prompt.track))
    return fresh.forward(seq)[-1]


@pytest.fixture(scope="session")
def full_logits():
    """``full_logits(lm, prompt, steps)``: logits for the step after ``prompt + steps``, from one
    uncached forward of everything (a reference that shares nothing with the engine's loop)."""
    return _full_logits


def _naive_greedy(lm, prompt, max_steps: int) -> torch.Tensor:
    from voicespec.engine.config import SamplingConfig
    from voicespec.engine.policy import TokenPolicy

    layout, policy = lm.layout, TokenPolicy(lm.layout, SamplingConfig(temperature=0))
    state, steps = layout.initial_state(prompt), prompt.steps[:0]
    while len(steps) < max_steps and not layout.is_done(state):
        raw = _full_logits(lm, prompt, steps).unsqueeze(0)
        token = policy.choose(policy.warp(raw, state, steps[:0], steps), None)[0]
        steps = torch.cat([steps, token.unsqueeze(0)])
        state = layout.advance(state, token)
    return steps


@pytest.fixture(scope="session")
def naive_greedy():
    """``naive_greedy(lm, prompt, max_steps)``: plain greedy decoding with no KV cache: every step
    recomputes the whole sequence."""
    return _naive_greedy


@pytest.fixture(scope="session")
def tiny_asr_config():
    """A recognizer small enough to train for a few steps in well under a second."""
    from voicespec.eval.recognizer import AsrConfig

    return AsrConfig(conv_channels=16, conv_layers=1, hidden=16, layers=1, dropout=0.0)


@pytest.fixture(scope="session")
def tiny_duration_config():
    from voicespec.frontend.duration import DurationConfig

    return DurationConfig(embed_dim=16, conv_channels=16, conv_layers=1, hidden=16, dropout=0.0)


def _speech_corpus(folder, sr: int = 24000) -> None:
    texts = ["a ba", "ab", "bab a", "aa b", "b a", "ba ab"]
    import soundfile as sf

    (folder / "wav").mkdir(parents=True)
    lines = []
    g = torch.Generator().manual_seed(0)
    for i, text in enumerate(texts):
        t = torch.arange(int(sr * (0.5 + 0.1 * i))) / sr
        x = 0.3 * torch.sin(2 * math.pi * (150 + 50 * i) * t) * (torch.sin(2 * math.pi * 3 * t) > 0)
        x = x + 0.01 * torch.randn(t.shape, generator=g)
        sf.write(str(folder / "wav" / f"u{i}.wav"), x.numpy(), sr)
        lines.append(json.dumps({"id": f"u{i}", "raw": text, "text": text, "split": "heldout" if i == 0 else "train",
                                 "wav": f"wav/u{i}.wav", "seconds": len(t) / sr, "sample_rate": sr}))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="session")
def speech_corpus():
    """``speech_corpus(folder)`` writes a six-utterance teacher corpus (``u0`` held out): gated
    tones, 0.5-1.0 s at 24 kHz, with transcripts over the letters a, b and space, as
    ``voicespec train data`` lays one out."""
    return _speech_corpus


def _one_hot_log_probs(labels: list[int], vocab: int | None = None, p: float = 0.9) -> torch.Tensor:
    from voicespec.frontend.text import DEFAULT_ALPHABET

    vocab = len(DEFAULT_ALPHABET) + 1 if vocab is None else vocab
    probs = torch.full((len(labels), vocab), (1 - p) / (vocab - 1))
    probs[torch.arange(len(labels)), torch.tensor(labels)] = p
    return probs.log()


@pytest.fixture(scope="session")
def one_hot_log_probs():
    """``one_hot_log_probs(labels)``: CTC log-probabilities over the default alphabet (+ blank)
    whose frame ``t`` has its best class ``labels[t]`` (probability ``p``, the rest shared)."""
    return _one_hot_log_probs
