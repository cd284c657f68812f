"""The frame cache: what keys a sentence's frames, LRU by bytes, and replays equal to decoding."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.pipeline.frame_cache import FrameCache, frame_key
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer

GREEDY = SamplingConfig(temperature=0)
SAMPLED = SamplingConfig(temperature=0.9, top_k=8, coupling="residual")
INVARIANT = replace(SAMPLED, coupling="invariant")


def test_greedy_and_invariant_frames_do_not_depend_on_drafting_but_residual_ones_do():
    t = object()
    g = DecodeConfig(GREEDY, gamma=4, seed=1)
    assert frame_key(t, [1, 2], g, "ngram") == frame_key(t, [1, 2], replace(g, gamma="auto", seed=9), "none")
    assert frame_key(t, [1, 2], g, "ngram") != frame_key(t, [1, 3], g, "ngram")
    assert frame_key(t, [1, 2], g, "ngram") != frame_key(object(), [1, 2], g, "ngram")  # another target
    s = DecodeConfig(SAMPLED, gamma=3, seed=1)
    assert frame_key(t, [1], s, "ngram") != frame_key(t, [1], replace(s, seed=2), "ngram")
    assert frame_key(t, [1], s, "ngram") != frame_key(t, [1], s, "draft-model")
    assert frame_key(t, [1], s, "ngram") != frame_key(t, [1], replace(s, gamma=2), "ngram")
    assert frame_key(t, [1], s, "none") == frame_key(t, [1], replace(s, gamma=0), "ngram")  # both plain
    assert frame_key(t, [1], replace(s, gamma="auto"), "ngram") is None  # timing decides the draws
    assert frame_key(t, [1], replace(s, seed=None), "ngram") is None
    i = DecodeConfig(INVARIANT, gamma=3, seed=1)  # the seed's tokens, whoever drafts them and however long
    assert frame_key(t, [1], i, "ngram") == frame_key(t, [1], replace(i, gamma="auto"), "none") is not None
    assert frame_key(t, [1], i, "ngram") != frame_key(t, [1], replace(i, seed=2), "ngram")
    assert frame_key(t, [1], replace(i, seed=None), "ngram") is None


def test_least_recently_used_sentences_leave_first_and_bytes_stay_bounded():
    chunk = torch.zeros(2, 4, dtype=torch.long)  # 64 bytes
    cache = FrameCache(max_bytes=200)
    for k in "abc":
        cache.put((k,), [chunk])
    assert cache.get(("a",)) is not None  # a is now the most recent
    cache.put(("d",), [chunk])  # evicts b, the least recently used
    assert cache.get(("b",)) is None and cache.get(("c",)) is not None and len(cache) == 3 and cache.bytes == 192
    cache.put(("huge",), [torch.zeros(100, 100, dtype=torch.long)])  # larger than the whole cache: not kept
    assert cache.get(("huge",)) is None
    assert (cache.counts.hits, cache.counts.misses, cache.counts.evictions) == (2, 2, 1)
    with pytest.raises(ValueError):
        FrameCache(-1)


def _speak(voice, text, options):
    stream = Synthesizer(voice).stream(text, options)
    pcm = torch.cat([c.pcm for c in stream])
    return pcm, stream


@pytest.mark.slow
@pytest.mark.parametrize("sampling,gamma", [(GREEDY, 3), (SAMPLED, 2)])
def test_a_replayed_sentence_is_the_audio_a_decode_would_have_made(tiny_voice, sampling, gamma):
    options = SynthesisOptions(DecodeConfig(sampling, gamma=gamma, max_steps=60, seed=4), drafter="ngram")
    text = "Good morning. Good morning. See you."
    want, plain = _speak(tiny_voice, text, options)
    tiny_voice.frame_cache = cache = FrameCache(1 << 20)
    try:
        first, a = _speak(tiny_voice, text, options)
        second, b = _speak(tiny_voice, text, options)
    finally:
        tiny_voice.frame_cache = None
    assert torch.equal(first, want) and torch.equal(second, want)
    assert [f.tolist() for f in b.frames] == [f.tolist() for f in plain.frames]
    # greedy: the repeated sentence is a hit within the first utterance already (its seed does not matter)
    assert a.stats.cached_sentences == (1 if sampling.greedy else 0)
    assert b.stats.cached_sentences == 3 and b.stats.decode.target_passes == 0
    assert cache.counts.hits == a.stats.cached_sentences + 3
