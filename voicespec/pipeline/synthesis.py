"""Text → PCM as an iterator: front end → prompt → SpecDecoder → frames → streaming codec → PCM.

The server, the batch writer and the harness all consume :class:`SynthesisStream`; none of them
knows how drafting works. Sentences are decoded one after another by the LM but through *one*
streaming codec decoder, so the waveform runs on across sentence joins with no gap or click.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from enum import Enum
from typing import Any

import numpy as np
import torch

from voicespec.audio import StreamingResampler, encode_audio, write_audio_atomic
from voicespec.engine.config import DecodeConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.layout import Prompt
from voicespec.engine.stats import DecodeStats
from voicespec.codec.stream import CodecFlush, CodecPush
from voicespec.engine.work import Work, outputs
from voicespec.frontend.timestamps import Timestamp, Timestamps, sentence_timestamps
from voicespec.options import SAMPLING_OPTIONS, check_sample_rate, check_speed
from voicespec.frontend.ssml import Script
from voicespec.pipeline.frame_cache import frame_key
from voicespec.pipeline.voice import Voice


def sentence_config(voice: Voice, base: DecodeConfig, i: int, n_chars: int, prompt: Prompt) -> DecodeConfig:
    """The decode config of sentence ``i`` (``n_chars`` long): seed ``base.seed + i``, and steps capped
    by the prompt's track length or else the voice's runaway guard for that many characters."""
    seed = None if base.seed is None else base.seed + i
    frames = voice.max_frames(n_chars) if prompt.track is None else prompt.track.shape[0]
    max_steps = voice.target.layout.steps_for_frames_count(frames)
    return replace(base, seed=seed, max_steps=min(base.max_steps, max_steps))


@dataclass(frozen=True)
class SynthesisOptions:
    """Per-request options. ``decode.seed`` seeds sentence i with ``seed + i``; ``sample_rate``
    None keeps the codec's rate; ``speed`` > 1 speaks faster than the voice's own pace (a voice
    with a duration predictor divides its durations by it; any other voice refuses a speed)."""

    decode: DecodeConfig = field(default_factory=DecodeConfig)
    drafter: str | None = None  # None: the voice's default
    sample_rate: int | None = None
    speed: float = 1.0
    timestamps: bool = False  # also yield each sentence's Timestamps before its audio (aligned voices)

    def __post_init__(self) -> None:
        if self.sample_rate is not None:
            check_sample_rate(self.sample_rate)
        check_speed(self.speed)

    def speed_of(self, script: Script, i: int) -> float:
        """Sentence ``i`` of ``script``'s speed: the request's, times its ``<prosody rate>``."""
        return self.speed * script.speeds.get(i, 1.0)


@dataclass
class AudioChunk:
    pcm: torch.Tensor  # float32 at the output rate
    sentence: int


@dataclass
class SynthesisStats:
    sentences: int = 0
    frames: int = 0
    samples: int = 0
    sample_rate: int = 0
    frontend_s: float = 0.0
    codec_s: float = 0.0
    resample_s: float = 0.0
    wall_s: float = 0.0
    ttfa_s: float | None = None  # wall time to the first non-empty PCM chunk
    cached_sentences: int = 0  # replayed from the voice's frame cache, not decoded
    decode: DecodeStats = field(default_factory=DecodeStats)

    @property
    def audio_s(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0

    @property
    def rtf(self) -> float:
        """Real-time factor: wall seconds per audio second (< 1 is faster than real time)."""
        return self.wall_s / self.audio_s if self.audio_s else float("inf")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["decode"] = self.decode.to_dict()
        d.update(audio_s=self.audio_s, rtf=self.rtf)
        return d

    def summary(self) -> str:
        d = self.decode
        return (
            f"audio {self.audio_s:.2f}s  wall {self.wall_s:.2f}s  RTF {self.rtf:.3f}  "
            f"acceptance {d.acceptance_rate:.2f}  mean accepted length {d.mean_accepted_length:.2f}"
        )


class Step(Enum):
    """What a :class:`SynthesisStream` does next (see ``SynthesisStream._next_step``)."""

    SENTENCE = "sentence"  # decode the next sentence
    WAIT = "wait"  # caught up while more text may come: yield None, the consumer does other work
    END = "end"  # no more text: flush the codec's tail and stop


class SynthesisStream:
    """Iterate for :class:`AudioChunk` s; ``cancel()`` stops before the next decode step."""

    def __init__(self, voice: Voice, text: str, options: SynthesisOptions,
                 sentences: list[tuple[str, list[int]]] | Script | None = None) -> None:
        """``sentences``: ``voice.frontend.sentences(text)`` where the caller has them already
        (the server runs the front end off its event loop, once per text), or the
        :class:`~voicespec.frontend.ssml.Script` of a marked-up text (its silences, rates and
        pronunciations with it)."""
        t0 = time.perf_counter()
        self.voice = voice
        self.options = options
        self.script = Script()  # silences, rates and pronunciations by sentence (none for plain text)
        # raises TextError before any work
        if isinstance(sentences, Script):
            self.script, sentences = sentences, sentences.sentences
        self.sentences = voice.frontend.sentences(text) if sentences is None else sentences
        voice.check(options)
        self._check_script(self.script)
        self.drafter_name = options.drafter or voice.config.default_drafter
        self.decoder = SpecDecoder(voice.target, voice.drafter(self.drafter_name), options.decode,
                                   voice.controller_memory(self.drafter_name), voice.frame_blocks)
        self.stats = SynthesisStats(sample_rate=options.sample_rate or voice.codec.sample_rate)
        self.stats.frontend_s = time.perf_counter() - t0
        self._t0 = t0
        self.cancelled = False
        self.frames: list[torch.Tensor] = []  # code frames [K, T] of each sentence decoded so far
        self.timestamps: list[Timestamps] = []  # of each sentence begun (voices with a duration predictor)
        self._frames_done = 0  # frames of the sentences before the current one: where it starts

    def cancel(self) -> None:
        self.cancelled = True

    def _check_script(self, script: Script) -> None:
        """ValueError for rates this voice cannot speak at (no duration predictor, or a speed out of range)."""
        for rate in set(script.speeds.values()):
            if self.voice.duration is None:
                raise ValueError(f"voice {self.voice.name!r} has no duration predictor: it cannot change its rate "
                                 "(<prosody rate>)")
            check_speed(self.options.speed * rate)

    def _silence(self, i: int, sentence: int) -> AudioChunk | None:
        """The silence before sentence ``i`` (a ``<break>``), in whole codec frames, so the words
        after it are timed exactly by it."""
        codec = self.voice.codec
        frames = round(self.script.pauses.pop(i) * codec.sample_rate / codec.hop_length)
        self._frames_done += frames
        n = round(frames * codec.hop_length * self.stats.sample_rate / codec.sample_rate)
        return self._emit(torch.zeros(n), sentence)

    def _emit(self, pcm: torch.Tensor, sentence: int) -> AudioChunk | None:
        if pcm.numel() == 0:
            return None
        s = self.stats
        now = time.perf_counter() - self._t0
        if s.ttfa_s is None:
            s.ttfa_s = now
        s.samples += pcm.numel()
        s.wall_s = now
        return AudioChunk(pcm, sentence)

    def _sentence(self, i: int, codec_stream, resampler: StreamingResampler) -> Iterator[AudioChunk | None]:
        """Decode sentence ``i`` through the shared codec decoder; per step that completed frames,
        a chunk, or None when the codec has no new samples yet."""
        s, codec = self.stats, self.voice.codec
        sentence, ids = self.sentences[i]
        speed = self.options.speed_of(self.script, i)
        durations = self.voice.durations(ids, speed)
        prompt = self.voice.prompt(ids, durations)
        config = sentence_config(self.voice, self.options.decode, i, len(sentence), prompt)
        if durations is not None:
            self.timestamps.append(self._timestamps(i, sentence, ids, durations, config.max_steps))
            if self.options.timestamps:
                yield self.timestamps[-1]
        s.sentences += 1
        self.frames.append(torch.zeros(codec.n_codebooks, 0, dtype=torch.long))
        cache = self.voice.frame_cache
        key = frame_key(self.voice.target, ids, config, self.drafter_name, speed) if cache is not None else None
        replay = cache.get(key) if key is not None else None
        # The prefill is yielded: a scheduler prefills a tick's newcomers in one pass.
        gen = None if replay is not None else (yield from self.decoder.open(prompt, config, codec_stream.frames_in))
        chunks: list[torch.Tensor] = []  # this sentence's frames [K, n] per step: joined once, at its end

        def audio(frames: torch.Tensor) -> Generator[CodecPush, Any, Any]:
            chunks.append(frames)
            self._pushed = True
            # Yielded: a scheduler decodes many sessions' frames in one call, or on another thread
            # (then the chunk goes out from there and this gets DEFERRED back).
            return (yield CodecPush(codec_stream, frames, partial(self._finish, resampler, i, frames.shape[1])))

        try:
            if replay is not None:
                for frames in replay:
                    if self.cancelled:
                        break
                    yield (yield from audio(frames))
                s.cached_sentences += 1
                return
            while not gen.done and not self.cancelled:  # a cancel lands before the next decode step
                frames = (yield from gen.advance()).frames  # the target pass is yielded: a scheduler may batch it
                if frames.shape[1]:
                    yield (yield from audio(frames))
        finally:  # also when the consumer stops iterating mid-sentence
            if chunks:
                self.frames[-1] = torch.cat(chunks, dim=1)
            self._frames_done += self.frames[-1].shape[1]
            if gen is not None:
                gen.close()
        s.decode.merge(gen.stats)
        if key is not None and gen.done and not self.cancelled:
            cache.put(key, chunks)

    def _timestamps(self, i: int, sentence: str, ids: list[int], durations: list[int], max_steps: int) -> Timestamps:
        tokenizer, codec, layout = self.voice.tokenizer, self.voice.codec, self.voice.target.layout
        words, word_of = tokenizer.words(sentence, self.script.lexicons.get(i))
        words = [self.script.spoken.get(w.lower(), w) for w in words]  # a <phoneme> word as written
        units = [tokenizer.decode([j]) for j in ids]
        n_frames = sum(durations)
        while n_frames and layout.steps_for_frames_count(n_frames) > max_steps + 1:  # the step cap cuts it short
            n_frames -= 1
        return sentence_timestamps(i, words, word_of, units, durations, codec.hop_length / codec.sample_rate,
                                   self._frames_done, n_frames)

    def _finish(self, resampler: StreamingResampler, sentence: int, frames: int, pcm: torch.Tensor,
                seconds: float) -> AudioChunk | None:
        """The chunk of codec output ``pcm`` (of ``frames`` frames; ``seconds`` of codec time)."""
        s = self.stats
        t = time.perf_counter()
        pcm = resampler.push(pcm)
        s.codec_s += seconds
        s.resample_s += time.perf_counter() - t
        s.frames += frames
        return self._emit(pcm, sentence)

    def _finish_tail(self, resampler: StreamingResampler, sentence: int, pcm: torch.Tensor,
                     seconds: float) -> AudioChunk | None:
        """The last chunk of a waveform: the codec's tail and the resampler's."""
        self.stats.codec_s += seconds
        return self._emit(torch.cat([resampler.push(pcm), resampler.flush()]), sentence)

    def _flush_codec(self, codec_stream, resampler: StreamingResampler, sentence: int) -> Generator[CodecFlush, Any, Any]:
        self._pushed = False
        return (yield CodecFlush(codec_stream, partial(self._finish_tail, resampler, sentence)))

    def _next_step(self, i: int) -> Step | Any:
        """What to do once ``i`` sentences are decoded; a subclass whose text arrives while it runs
        also waits (:attr:`Step.WAIT`) and places marks (any other value)."""
        return Step.SENTENCE if i < len(self.sentences) else Step.END

    def _waveform(self) -> tuple[Any, StreamingResampler]:
        """A fresh codec decoder and resampler: audio pushed through one pair runs on seamlessly."""
        return self.voice.codec_stream(), StreamingResampler(self.voice.codec.sample_rate, self.stats.sample_rate)

    def __iter__(self) -> Iterator[Any]:
        """:class:`AudioChunk` s, sentence after sentence through one waveform, its tail flushed at
        the end. Where :meth:`_next_step` says so, also None (a wait) and marks: a mark comes after
        all audio before it (the waveform is flushed and a new one begins)."""
        return outputs(self.run())

    def run(self) -> Generator[Any, Any, None]:
        """:meth:`__iter__` as a coroutine that also yields its model calls (:class:`~voicespec.engine.work.Work`)
        and expects each one's result back: the form a batching scheduler drives."""
        codec_stream, resampler = self._waveform()
        self._pushed = False  # frames pushed into the codec since its last flush
        i = 0
        while not self.cancelled:
            step = self._next_step(i)
            if i in self.script.pauses and step in (Step.SENTENCE, Step.END):  # a <break>: the waveform ends, silence
                if self._pushed:
                    if isinstance(tail := (yield from self._flush_codec(codec_stream, resampler, i - 1)), AudioChunk):
                        yield tail
                    codec_stream, resampler = self._waveform()
                if isinstance(silence := self._silence(i, max(i - 1, 0)), AudioChunk):
                    yield silence
            if step is Step.END:
                break
            if step is Step.WAIT:
                yield None
            elif step is Step.SENTENCE:
                sentence, result = self._sentence(i, codec_stream, resampler), None
                try:
                    while True:
                        try:
                            item = sentence.send(result)
                        except StopIteration:
                            break
                        result = None
                        if isinstance(item, Work):
                            result = yield item
                        elif isinstance(item, (AudioChunk, Timestamps)):
                            yield item
                finally:
                    sentence.close()
                i += 1
            else:
                if self._pushed:
                    if isinstance(tail := (yield from self._flush_codec(codec_stream, resampler, i - 1)), AudioChunk):
                        yield tail
                    codec_stream, resampler = self._waveform()
                yield step
        if self.cancelled:
            self.stats.decode.finish_reason = "cancelled"
        elif self._pushed:
            if isinstance(tail := (yield from self._flush_codec(codec_stream, resampler, i - 1)), AudioChunk):
                yield tail
        self.stats.wall_s = time.perf_counter() - self._t0


def request_options(voice: Voice, *, drafter: str | None = None, gamma: int | str = "auto",
                    tree: Sequence[int] | Sequence[Sequence[int]] | str | None = None, seed: int | None = None, speed: float = 1.0,
                    sample_rate: int | None = None, max_steps: int | None = None, timestamps: bool = False,
                    **sampling: Any) -> SynthesisOptions:
    """:class:`SynthesisOptions` from keyword options, as the Python API takes them: sampling
    fields (``temperature``, ``top_k``, ...) override the voice's own settings; ``gamma=0`` or
    ``drafter="none"`` decodes plainly. Unknown names are a ``TypeError`` naming them."""
    known = {o.name for o in SAMPLING_OPTIONS}
    unknown = sorted(set(sampling) - known)
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; sampling options are {', '.join(sorted(known))}")
    decode = DecodeConfig(replace(voice.sampling, **sampling), gamma=gamma, seed=seed,
                          tree=tree,  # any form: DecodeConfig checks it (check_tree)
                          **({} if max_steps is None else {"max_steps": max_steps}))
    return SynthesisOptions(decode, drafter=drafter, sample_rate=sample_rate, speed=speed, timestamps=timestamps)


@dataclass
class Audio:
    """One finished utterance, as :meth:`Voice.say` returns it: the samples with their rate, what
    was said when, and how it was made. ``save`` writes it (format by extension)."""

    pcm: np.ndarray = field(repr=False)  # float32 [n], mono, in [-1, 1], at sample_rate
    sample_rate: int
    stats: SynthesisStats = field(repr=False)
    timestamps: list[Timestamps] = field(default_factory=list, repr=False)  # per sentence (aligned voices)
    frames: list[torch.Tensor] = field(default_factory=list, repr=False)  # code frames [K, T] per sentence

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate

    @property
    def words(self) -> list[Timestamp]:
        """Every word with its start and end (seconds), all sentences in order."""
        return [w for t in self.timestamps for w in t.words]

    def save(self, path: str | Path) -> Path:
        """Write the audio atomically; the extension picks the format (.wav .flac .ogg .mp3)."""
        write_audio_atomic(path, self.pcm, self.sample_rate)
        return Path(path)

    def to_bytes(self, format: str = "wav") -> bytes:
        """The whole file in ``format`` (wav, flac, ogg, mp3), e.g. for an HTTP response."""
        return encode_audio(self.pcm, self.sample_rate, "." + format.lower().lstrip("."))

    def __repr__(self) -> str:
        return f"Audio({self.duration_s:.2f} s at {self.sample_rate} Hz, {len(self.words)} words timed)"

    def _repr_html_(self) -> str:  # a player in Jupyter
        data = base64.b64encode(self.to_bytes("wav")).decode()
        return f'<audio controls src="data:audio/wav;base64,{data}"></audio>'


def collect(stream: SynthesisStream) -> Audio:
    """Run ``stream`` to its end and gather its audio."""
    chunks = [c.pcm for c in stream if isinstance(c, AudioChunk)]
    pcm = torch.cat(chunks).numpy() if chunks else np.zeros(0, np.float32)
    return Audio(pcm.astype(np.float32, copy=False), stream.stats.sample_rate, stream.stats,
                 list(stream.timestamps), list(stream.frames))


class Synthesizer:
    def __init__(self, voice: Voice) -> None:
        self.voice = voice

    def stream(self, text: str, options: SynthesisOptions | None = None) -> SynthesisStream:
        return SynthesisStream(self.voice, text, options or SynthesisOptions(DecodeConfig(self.voice.sampling)))

    def synthesize(self, text: str, options: SynthesisOptions | None = None) -> tuple[torch.Tensor, SynthesisStats]:
        audio = collect(self.stream(text, options))
        return torch.from_numpy(audio.pcm), audio.stats
