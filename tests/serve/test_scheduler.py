"""The decode worker's continuous batching, driven directly (no sockets): many contexts share one
batched target pass per tick, and each one's audio is what it would synthesize alone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.pipeline.synthesis import AudioChunk, SynthesisOptions, Synthesizer
from voicespec.pipeline.tiny import build_tiny_voice
from voicespec.pipeline.voice import Voice
from voicespec.serve.scheduler import FINISHED, Credits, DecodeWorker, Failed, IncrementalStream, Job

TEXTS = ["Hello there.", "A much longer sentence, to keep its row busy for a while. And a second one.",
         "Short.", "Numbers like 42 are spoken too.", "Yes? No!"]


@pytest.fixture(scope="module")
def coarse_voice(tmp_path_factory):
    return Voice.load(build_tiny_voice(tmp_path_factory.mktemp("voices") / "coarse", layout="coarse"))


class Collector:
    """A ``deliver`` callback: every item per job; credits released at once (a fast reader)."""

    def __init__(self, n: int) -> None:
        self.hold: set[int] = set()  # contexts whose reader never reads
        self.items: dict[int, list] = {}
        self.order: list[int] = []  # the context of each item, as delivered
        self.done = threading.Semaphore(0)
        self.lock = threading.Lock()

    def __call__(self, job: Job, item) -> None:
        with self.lock:
            self.items.setdefault(job.ctx, []).append(item)
            self.order.append(job.ctx)
        if isinstance(item, AudioChunk) and job.ctx not in self.hold:
            job.credits.released += 1
        if item is FINISHED or isinstance(item, Failed):
            self.done.release()

    def pcm(self, ctx: int) -> torch.Tensor:
        return torch.cat([i.pcm for i in self.items[ctx] if isinstance(i, AudioChunk)])


def _run_worker(voice, texts, options, cancel_after: dict[int, int] | None = None, tick_contexts: int | None = None,
                tick_prefill: int | None = None, started: Callable[[DecodeWorker], None] | None = None,
                spec_contexts: int | None = None, decoding_contexts: int | None = None):
    got = Collector(len(texts))
    worker = DecodeWorker(queue_limit=4, deliver=got, tick_contexts=tick_contexts, tick_prefill=tick_prefill,
                          spec_contexts=spec_contexts, decoding_contexts=decoding_contexts)
    if started:
        started(worker)
    jobs = []
    for i, text in enumerate(texts):
        stream = IncrementalStream(voice, text, options)
        stream.close()
        jobs.append(Job(stream, i, object(), Credits(), None))
    for job in jobs:  # all queued before the thread starts: the first tick batches them all
        worker.add(job)
    worker.start()
    try:
        for _ in texts:
            assert got.done.acquire(timeout=120)
    finally:
        worker.stop()
    return got, worker, jobs


@pytest.mark.slow
@pytest.mark.parametrize("layout,greedy", [("coarse", True),  # the fast tier: the shipped layout
                                           pytest.param("delay", False, marks=pytest.mark.slow),
                                           pytest.param("delay", True, marks=pytest.mark.slow),
                                           pytest.param("coarse", False, marks=pytest.mark.slow)])
def test_batched_contexts_each_get_their_offline_audio(layout, greedy, tiny_voice, coarse_voice):
    voice = tiny_voice if layout == "delay" else coarse_voice
    sampling = SamplingConfig(temperature=0) if greedy else voice.sampling
    options = SynthesisOptions(DecodeConfig(sampling, seed=11, gamma=0))
    got, worker, _ = _run_worker(voice, TEXTS, options)
    assert max(worker.batch_sizes) == len(TEXTS) and min(worker.batch_sizes) < len(TEXTS)  # sessions joined and left
    for i, text in enumerate(TEXTS):
        alone, _ = Synthesizer(voice).synthesize(text, options)
        assert got.items[i][-1] is FINISHED
        assert torch.equal(got.pcm(i), alone), f"context {i} changed in the batch"


@pytest.mark.slow
def test_the_shipped_voice_batched_gives_each_context_its_offline_audio_bit_for_bit():
    """The default voice sampling (T 0.7; feature drafter, γ auto): four contexts
    batched in the worker, their frames decoded together by the iSTFT codec on the audio thread,
    and each one's PCM is exactly its offline synthesis, not merely within a 16-bit step."""
    from voicespec.pipeline.synthesis import request_options

    voice = Voice.from_pretrained()
    options = request_options(voice, seed=7, temperature=voice.sampled.temperature)
    got, worker, _ = _run_worker(voice, TEXTS[:4], options)
    assert max(worker.batch_sizes) == 4
    for i, text in enumerate(TEXTS[:4]):
        assert torch.equal(got.pcm(i), Synthesizer(voice).synthesize(text, options)[0]), f"context {i}"


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_batched_equals_alone_on_the_voices_device_and_dtype(device, dtype, tmp_path_factory):
    """The LM (and its cache) on ``device`` in ``dtype``, verification on the host: still the
    offline audio for every context of a batch."""
    folder = build_tiny_voice(tmp_path_factory.mktemp("voices") / "v", layout="coarse")
    voice = Voice.load(folder, device, dtype)
    weights = next(voice.target.model.parameters())
    assert weights.device.type == device and str(weights.dtype) == f"torch.{dtype}"
    assert voice.target.stack.pool.k.device.type == device and voice.target.stack.pool.k.dtype == weights.dtype
    options = SynthesisOptions(DecodeConfig(voice.sampling, seed=5, gamma=0))
    got, worker, _ = _run_worker(voice, TEXTS[:3], options)
    assert max(worker.batch_sizes) == 3
    for i, text in enumerate(TEXTS[:3]):
        assert torch.equal(got.pcm(i), Synthesizer(voice).synthesize(text, options)[0])


@pytest.mark.slow
def test_a_saturated_worker_decodes_plainly_and_the_audio_stays_each_contexts_own(tiny_voice):
    """More contexts ready than a tick steps: their passes go plain (a draft would widen the pass
    every neighbour waits for), whatever γ they asked for; once the tick has room, they draft
    again. The tokens, and so the audio, are what each gives alone."""
    drafted = SynthesisOptions(DecodeConfig(SamplingConfig(temperature=0), seed=2, gamma=3), drafter="draft-model")
    got, worker, jobs = _run_worker(tiny_voice, TEXTS, drafted, tick_contexts=2)
    gammas = [g for job in jobs for g in job.stream.stats.decode.gammas]
    assert 0 in gammas and 3 in gammas  # plain while five waited for two places, drafting at the end
    assert max(worker.batch_sizes) == 2
    for i, text in enumerate(TEXTS):
        assert torch.equal(got.pcm(i), Synthesizer(tiny_voice).synthesize(text, drafted)[0]), i


@pytest.mark.slow
@pytest.mark.parametrize("spec_contexts", [0, 2, 3])
def test_past_the_speculation_cap_every_pass_is_plain_and_the_audio_stays_each_contexts_own(tiny_voice, spec_contexts):
    """More contexts in a tick than ``spec_contexts``: every pass is plain (vLLM's
    speculative_disable_by_batch_size), drafting resumes once few enough are left; the audio is
    what each context gives alone."""
    drafted = SynthesisOptions(DecodeConfig(SamplingConfig(temperature=0), seed=2, gamma=3), drafter="draft-model")
    got, worker, jobs = _run_worker(tiny_voice, TEXTS[:3], drafted, spec_contexts=spec_contexts)
    gammas = [g for job in jobs for g in job.stream.stats.decode.gammas]
    plain = gammas.count(0)  # besides the cap's passes, at most a context's last step (nothing left to draft)
    assert (plain == len(gammas), plain > 3, plain <= 3) == (spec_contexts == 0, spec_contexts < 3, spec_contexts == 3)
    assert max(worker.batch_sizes) == 3
    for i, text in enumerate(TEXTS[:3]):
        assert torch.equal(got.pcm(i), Synthesizer(tiny_voice).synthesize(text, drafted)[0]), i


@pytest.mark.slow
def test_past_the_tick_cap_newcomers_start_a_prefill_budget_a_tick_with_their_own_audio(coarse_voice, monkeypatch):
    """Issue 37, item 3: with a backlog (more contexts ready than a tick steps), newcomers' prompts
    are prefilled a budget's worth a tick, the rest parked at their prefill (their places in the
    tick go to others); each context's audio is still its offline audio. Without a backlog a burst
    starts in one padded pass, budget or not."""
    from voicespec.engine.step_lm import Prefill

    calls: list[tuple[int, bool]] = []  # (prompts, whether the worker had a backlog)
    worker: list[DecodeWorker] = []
    run = Prefill.run.__func__
    monkeypatch.setattr(Prefill, "run", classmethod(
        lambda cls, works: calls.append((len(works), worker[0].saturated)) or run(cls, works)))
    options = SynthesisOptions(DecodeConfig(coarse_voice.sampling, seed=4, gamma=0))
    got, _, _ = _run_worker(coarse_voice, TEXTS, options, tick_contexts=3, tick_prefill=1, started=worker.append)
    assert any(backlog for _, backlog in calls)
    assert all(n == 1 for n, backlog in calls if backlog)  # one prompt a tick while five wait for three places
    for i, text in enumerate(TEXTS):
        assert torch.equal(got.pcm(i), Synthesizer(coarse_voice).synthesize(text, options)[0]), i
    for cap, budget, most in ((3, None, 3), (None, 1, len(TEXTS))):  # no budget; no backlog
        calls.clear()
        worker.clear()
        _run_worker(coarse_voice, TEXTS, options, tick_contexts=cap, tick_prefill=budget, started=worker.append)
        assert max(n for n, _ in calls) == most, (cap, budget)


def test_the_prefill_budget_admits_the_newest_newcomers_and_never_holds_back_a_playing_stream():
    from voicespec.engine.layout import Prompt
    from voicespec.engine.step_lm import Pass, Prefill
    from voicespec.serve.scheduler import admit, fair_share

    now = 50.0
    prompt = Prompt(torch.zeros(9, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))

    def job(name: str, waited: float, work=None, ahead: float | None = None) -> Job:
        j = Job(None, name, object(), None, None, t_waiting=now - waited)
        j.work = work if work is not None else Prefill(None, prompt)
        if ahead is not None:  # its client is playing, this far ahead
            j.play_end = now + ahead
        return j

    old, mid, new = job("old", 0.3), job("mid", 0.2), job("new", 0.1)
    stepping = job("stepping", 5.0, Pass.__new__(Pass), ahead=0.2)
    next_sentence = job("next", 5.0, ahead=0.5)  # a playing stream at its next sentence's prefill
    batch = [old, stepping, mid, new, next_sentence]
    assert admit(batch, None, now) == (batch, None) and admit(batch, 3, now) == (batch, 0)
    assert [j.ctx for j in admit(batch, 2, now)[0]] == ["stepping", "mid", "new", "next"]  # the newest two
    assert [j.ctx for j in admit(batch, 1, now)[0]] == ["stepping", "new", "next"]
    assert [j.ctx for j in admit(batch, 0, now)[0]] == ["stepping", "next"]  # the tick's budget spent
    # Choosing the tick's jobs past its cap: newcomers past the budget give their places to the next.
    fresh = [Job(None, f"n{i}", object(), None, None, t_waiting=now - 0.1 * i) for i in range(4)]  # not started yet
    assert [j.ctx for j in fair_share([*fresh, stepping, next_sentence], 3, now, admissions=1)] == ["n0", "stepping", "next"]
    assert [j.ctx for j in fair_share([*fresh, stepping, next_sentence], 3, now)] == ["n0", "n1", "n2"]


@pytest.mark.slow
@pytest.mark.parametrize("limit", [1, 2, None])
def test_past_the_decoding_limit_newcomers_wait_for_a_place_and_keep_their_own_audio(coarse_voice, limit):
    """``--max-decoding-contexts``: five contexts at once, at most ``limit`` under way; the others
    wait and start, in the order they came, as one ends (no tick steps more than the limit, and
    with one place the contexts' audio does not interleave at all); each one's audio is still its
    offline audio. Without a limit all five share the ticks (the control)."""
    options = SynthesisOptions(DecodeConfig(coarse_voice.sampling, seed=8, gamma=0))
    got, worker, _ = _run_worker(coarse_voice, TEXTS, options, decoding_contexts=limit)
    assert max(worker.batch_sizes) == (limit or len(TEXTS))
    if limit is not None:  # started first come, first served (last come, the five would start reversed)
        first = [got.order.index(i) for i in range(len(TEXTS))]  # where each context's first item came
        assert first == sorted(first)
    runs = [ctx for k, ctx in enumerate(got.order) if k == 0 or got.order[k - 1] != ctx]
    assert (runs == list(range(len(TEXTS)))) == (limit == 1)  # one place: one context after another
    for i, text in enumerate(TEXTS):
        assert torch.equal(got.pcm(i), Synthesizer(coarse_voice).synthesize(text, options)[0]), i


def test_the_decoding_limit_holds_newcomers_fairly_and_never_a_stream_under_way():
    """A freed place goes to the longest wait, less a second for each context the newcomer's
    connection has under way (so a busy connection cannot take every place, and its newcomer
    still comes up as it waits). A context let in is never held again and holds its place: its
    next sentence, its text after a pause, its first prefill put off by a tick's budget. One
    waiting for text holds its place while its client still plays, and gives it back once its
    client has heard everything."""
    from voicespec.engine.layout import Prompt
    from voicespec.engine.step_lm import Pass, Prefill
    from voicespec.serve.scheduler import hold_newcomers

    now = 10.0
    prompt = Prompt(torch.zeros(9, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))
    busy, quiet, other, back = object(), object(), object(), object()

    def job(name: str, session, waited: float, heard_until: float | None = None, parked: bool = True) -> Job:
        """``heard_until``: when its client's audio runs out (None: nothing heard yet)."""
        j = Job(None, name, session, None, None, t_waiting=now - waited)
        j.work = Prefill(None, prompt) if parked else Pass.__new__(Pass)
        if heard_until is not None:  # let in once, and spoke
            j.t_first_audio, j.play_end, j.let_in = now - 20, heard_until, True
        return j

    going = [job(f"b{i}", busy, 5.0, now + 1.0, parked=False) for i in range(2)]
    next_sentence = job("next", busy, 5.0, now + 1.0)  # playing, parked at its next sentence's prefill
    resumed = job("resumed", back, 0.5, now - 2.0)  # heard everything, then more text: a newcomer's wait, never held
    paused = job("paused", quiet, 9.0, now + 1.0, parked=False)  # waits for text, its client still playing: holds its place
    heard = job("heard", quiet, 9.0, now - 1.0, parked=False)  # waits for text, its client heard it all: holds none
    for j in (paused, heard):
        j.starved_at = j.input_version
    parked = job("parked", object(), 0.2)  # let in, but parked at its prefill by a tick's budget: no audio yet
    parked.let_in = True
    assert resumed.admitting and not resumed.starting and not next_sentence.admitting
    assert parked.admitting and not parked.starting
    early_busy, later_quiet, latest = job("early-busy", busy, 3.0), job("later-quiet", quiet, 2.0), job("latest", other, 0.5)
    under_way = [*going, next_sentence, resumed, parked]
    ready = [*under_way, early_busy, later_quiet, latest]
    jobs = [*ready, paused, heard]  # six under way: busy's three, resumed, parked, paused

    def kept(limit, max_waiting=None):
        chosen, held, free, refused = hold_newcomers(ready, jobs, limit, now, max_waiting)
        assert not set(refused) & set(chosen)
        return ([j.ctx for j in chosen if j not in under_way], held, free, *([[j.ctx for j in refused]] if refused else []))

    assert kept(None) == (["early-busy", "later-quiet", "latest"], 0, None)
    assert kept(10) == (["early-busy", "later-quiet", "latest"], 0, 1)  # a place left over
    assert kept(9) == (["early-busy", "later-quiet", "latest"], 0, 0)
    assert kept(8) == (["later-quiet", "latest"], 1, 0)  # busy's newcomer: 3 s of wait, less 3 for its three under way
    assert kept(7) == (["later-quiet"], 2, 0)  # 2 s less 1 (paused holds quiet's place) before other's 0.5
    assert kept(6) == ([], 3, 0) == kept(1)  # full, or past full: only the streams under way go on
    # a bounded queue drops its tail: the newcomers past max_waiting, last in the order, are turned away
    assert kept(7, 1) == (["later-quiet"], 1, 0, ["early-busy"]) and kept(7, 0) == (["later-quiet"], 0, 0, ["latest", "early-busy"])
    assert kept(7, 2) == kept(7) and kept(9, 0) == kept(9)  # room for them, or places for all: nobody is turned away
    assert [j.ctx for j in hold_newcomers(ready, jobs, 1, now)[0]] == [j.ctx for j in under_way]
    early_busy.t_waiting = now - 5.0  # waited long enough to go before the quiet connection's
    assert kept(7) == (["early-busy"], 2, 0)
    assert hold_newcomers([latest], [latest], 1, now, 0) == ([latest], 0, 0, [])  # alone: it starts
    assert hold_newcomers([], [], 2, now) == ([], 0, 2, [])


@pytest.mark.slow
def test_speculating_and_plain_contexts_share_a_batch(tiny_voice):
    """Blocks of different lengths (a draft of 3 beside plain steps) padded into one pass."""
    plain = SynthesisOptions(DecodeConfig(SamplingConfig(temperature=0), seed=2, gamma=0))
    drafted = replace(plain, decode=replace(plain.decode, gamma=3), drafter="draft-model")
    got = Collector(2)
    worker = DecodeWorker(queue_limit=4, deliver=got)
    for i, options in enumerate((plain, drafted)):
        stream = IncrementalStream(tiny_voice, TEXTS[1], options)
        stream.close()
        worker.add(Job(stream, i, None, Credits(), None))
    worker.start()
    try:
        assert got.done.acquire(timeout=120) and got.done.acquire(timeout=120)
    finally:
        worker.stop()
    assert max(worker.batch_sizes) == 2
    for i, options in enumerate((plain, drafted)):
        assert torch.equal(got.pcm(i), Synthesizer(tiny_voice).synthesize(TEXTS[1], options)[0])


def test_ended_and_cancelled_contexts_give_their_cache_rows_back(coarse_voice):
    """Context 0 never reads (its credits run out mid-sentence, so it holds its row), context 1
    ends; cancelling 0 frees its row on the worker's next pass over the jobs."""
    pool = coarse_voice.target.stack.pool
    options = SynthesisOptions(DecodeConfig(coarse_voice.sampling, seed=1, gamma=0))
    got = Collector(2)
    got.hold = {0}
    worker = DecodeWorker(queue_limit=2, deliver=got)
    streams = [IncrementalStream(coarse_voice, text, options) for text in (TEXTS[1], TEXTS[2])]
    for i, stream in enumerate(streams):
        stream.close()
        worker.add(Job(stream, i, None, Credits(), None))
    worker.start()
    try:
        assert got.done.acquire(timeout=120)  # context 1 finished
        # context 0: stalled once its credits ran out (the audio thread may deliver up to two
        # ticks late, so the model thread can be that far past the limit)
        assert pool.in_use == 1 and 2 <= len(got.items[0]) <= 4
        streams[0].cancel()
        worker.wake()
        for _ in range(500):
            if pool.in_use == 0:
                break
            threading.Event().wait(0.01)
        assert pool.in_use == 0
    finally:
        worker.stop()


def test_a_tick_past_its_cap_is_shared_between_connections_not_contexts():
    """Issue 39, defect 9: fairness per connection. A connection with eight contexts and one with
    a single context, four contexts a tick: the single one steps every tick, the eight take turns,
    least recently stepped first, and none waits more than its share."""
    from voicespec.serve.scheduler import Job, fair_share

    many, one = object(), object()
    jobs = [Job(None, f"m{i}", many, None, None, t_waiting=0.0) for i in range(8)] + \
        [Job(None, "solo", one, None, None, t_waiting=0.0)]  # equal slack: the least recently stepped first
    assert fair_share(jobs, None) == jobs and fair_share(jobs, 9) == jobs  # under the cap: everyone
    stepped: list[list[str]] = []
    for tick in range(6):
        chosen = fair_share(jobs, 4)
        for job in chosen:
            job.last_tick = tick
        stepped.append([job.ctx for job in chosen])
    assert all(len(t) == 4 and "solo" in t for t in stepped)
    counts = {f"m{i}": sum(f"m{i}" in t for t in stepped) for i in range(8)}
    assert set(counts.values()) <= {2, 3} and sum(counts.values()) == 18  # 3 a tick, rotated evenly
    # more connections than the cap: each waits its turn, the least recently stepped first
    solos = [Job(None, f"s{i}", object(), None, None, t_waiting=0.0) for i in range(5)]
    first = fair_share(solos, 2)
    for job in first:
        job.last_tick = 0
    second = fair_share(solos, 2)
    assert not set(first) & set(second)


def test_past_its_cap_a_tick_serves_the_least_slack_first():
    """Newcomers one after another (a burst does not share the ticks evenly until every one of
    them waits for the whole burst), the newest first (adaptive LIFO: a backlog does not hold a
    new session's first audio), and a stream about to run dry before one with audio to spare;
    one context per connection a round."""
    from voicespec.serve.scheduler import Job, fair_share

    now = 100.0
    newcomers = [Job(None, f"n{i}", object(), None, None, t_waiting=now - 0.1 * i) for i in range(6)]
    assert [j.ctx for j in fair_share(newcomers, 3, now)] == ["n0", "n1", "n2"]  # the newest
    # A stream 0.15 s dry among newcomers that waited 0.1, 0.2 and 0.3 s: as many newcomers go ahead of
    # it as their waits give (two), but they are the two newest.
    late = Job(None, "late", object(), None, None, t_waiting=0.0)
    late.play_end = now - 0.15
    assert [j.ctx for j in fair_share([newcomers[3], late, *newcomers[1:3]], 3, now)] == ["n1", "n2", "late"]
    dry, ahead = (Job(None, name, object(), None, None, t_waiting=0.0) for name in ("dry", "ahead"))
    dry.play_end, ahead.play_end = now - 0.1, now + 2.0  # its client ran dry 0.1 s ago; 2 s of audio to spare
    assert dry.slack_s(now) == pytest.approx(-0.1) and ahead.slack_s(now) == pytest.approx(2.0)
    paused = Job(None, "paused", object(), None, None, t_waiting=now - 0.05)
    paused.play_end = now - 30  # its text stopped for half a minute, then came again: a newcomer's wait, not 30 s late
    assert paused.slack_s(now) == pytest.approx(-0.05)
    assert [j.ctx for j in fair_share([ahead, dry, newcomers[0]], 2, now)] == ["dry", "n0"]
    busy = object()  # one connection's many urgent contexts still take one place a round
    crowd = [Job(None, f"c{i}", busy, None, None, t_waiting=now - 9) for i in range(4)]
    assert [j.ctx for j in fair_share(crowd + [ahead], 2, now)] == ["c0", "ahead"]


@pytest.mark.slow
def test_a_grouped_voice_batches_with_each_contexts_offline_audio(tmp_path_factory):
    """Two frames a step (issue 36): contexts of a grouped voice share ticks, speculating or not,
    and each one's audio is what it synthesizes alone."""
    voice = Voice.load(build_tiny_voice(tmp_path_factory.mktemp("voices") / "grouped", layout="grouped"))
    assert voice.target.layout.frames_per_step == 2
    for options in (SynthesisOptions(DecodeConfig(voice.sampling, seed=4, gamma=0)),
                    SynthesisOptions(DecodeConfig(voice.sampling, seed=4, gamma=2), drafter="draft-model")):
        got, worker, _ = _run_worker(voice, TEXTS, options)
        assert max(worker.batch_sizes) > 1
        for i, text in enumerate(TEXTS):
            assert torch.equal(got.pcm(i), Synthesizer(voice).synthesize(text, options)[0]), i
