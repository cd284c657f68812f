"""Protocol v1 pure parts: message validation, the audio frame, sentence release, playout, metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voicespec.frontend.incremental import complete_prefix
from voicespec.serve import protocol as P
from voicespec.bench.playout import gaps, playout, playout_timeline
from voicespec.serve.metrics import ServerMetrics, parse_exposition


def parse(obj) -> P.ClientMessage:
    return P.parse_client_message(obj if isinstance(obj, (str, bytes)) else json.dumps(obj))


def test_valid_messages_parse_to_typed_messages():
    start = parse({"type": "start", "sample_rate": 16000, "encoding": "f32le", "audio_transport": "base64",
                   "temperature": 0.5, "top_k": 10, "top_p": 0.9, "repetition_penalty": 1.2, "seed": 3,
                   "latency_budget_ms": 40, "drafter": "ngram", "voice": "default", "pacing_lead_ms": 300})
    assert start == P.Start(voice="default", sample_rate=16000, encoding="f32le", audio_transport="base64",
                            sampling={"temperature": 0.5, "top_k": 10, "top_p": 0.9, "repetition_penalty": 1.2}, seed=3,
                            latency_budget_ms=40, drafter="ngram", pacing_lead_ms=300)
    assert start.sampling_overrides() == {"temperature": 0.5, "top_k": 10, "top_p": 0.9, "repetition_penalty": 1.2}
    assert parse({"type": "start"}) == P.Start()
    assert parse({"type": "start", "gamma": "auto", "seed": None}) == P.Start(gamma="auto")
    assert parse({"type": "text", "context_id": "a-1", "text": "Hi."}) == P.Text("a-1", "Hi.")
    assert parse({"type": "flush", "context_id": "a", "flush_id": 7}) == P.Flush("a", 7)
    assert parse({"type": "flush", "context_id": "a"}) == P.Flush("a", None)
    assert parse({"type": "end", "context_id": "a"}) == P.End("a")
    assert parse({"type": "cancel", "context_id": "a"}) == P.Cancel("a")
    assert parse({"type": "stats", "underruns": 2, "underrun_ms": 35.5}) == P.ClientStats(None, 2, 35.5)


@pytest.mark.parametrize(
    "raw,code,fragment",
    [
        ("{not json", P.BAD_JSON, "not valid JSON"),
        ("[1, 2]", P.BAD_JSON, "JSON object"),
        ("[" * 100000, P.BAD_JSON, "not valid JSON"),  # nesting bomb: a clean error, no crash
        (b"\x00\x01", P.BINARY_UNSUPPORTED, "binary"),
        ({"type": "speak"}, P.UNKNOWN_TYPE, "speak"),
        ({"context_id": "a"}, P.BAD_MESSAGE, "no 'type'"),
        ({"type": "text", "context_id": "a"}, P.BAD_MESSAGE, "needs the field 'text'"),
        ({"type": "text", "text": "hi"}, P.BAD_MESSAGE, "context_id"),
        ({"type": "text", "context_id": "a", "text": 5}, P.BAD_MESSAGE, "'text' must be a string"),
        ({"type": "text", "context_id": 5, "text": "hi"}, P.BAD_MESSAGE, "'context_id' must be a string"),
        ({"type": "text", "context_id": "a b", "text": "hi"}, P.BAD_MESSAGE, "context_id must be"),
        ({"type": "text", "context_id": "x" * 65, "text": "hi"}, P.BAD_MESSAGE, "context_id must be"),
        ({"type": "text", "context_id": "a", "text": "hi", "voice": "x"}, P.BAD_MESSAGE, "unknown field"),
        ({"type": "start", "seed": "1"}, P.BAD_MESSAGE, "'seed' must be an integer"),
        ({"type": "start", "seed": True}, P.BAD_MESSAGE, "'seed' must be an integer"),
        ({"type": "start", "top_k": 2.5}, P.BAD_MESSAGE, "'top_k' must be an integer"),
        ({"type": "start", "gamma": -1}, P.BAD_MESSAGE, "gamma"),
        ({"type": "start", "gamma": "fast"}, P.BAD_MESSAGE, "gamma"),
        ({"type": "start", "sample_rate": 44100}, P.BAD_OPTION, "sample_rate must be one of"),
        ({"type": "start", "encoding": "mp3"}, P.BAD_OPTION, "encoding"),
        ({"type": "start", "audio_transport": "carrier-pigeon"}, P.BAD_OPTION, "audio_transport"),
        ({"type": "start", "latency_budget_ms": 0}, P.BAD_OPTION, "latency_budget_ms must be > 0"),
        ({"type": "start", "latency_budget_ms": 50, "gamma": 3}, P.BAD_OPTION, "gamma"),
        ({"type": "flush", "context_id": "a", "flush_id": [1]}, P.BAD_MESSAGE, "flush_id"),
        ({"type": "stats", "underruns": "many"}, P.BAD_MESSAGE, "underruns"),
    ],
)
def test_invalid_messages_give_a_code_and_a_reason(raw, code, fragment):
    with pytest.raises(P.ProtocolError) as e:
        parse(raw)
    assert e.value.code == code and e.value.code in P.ERROR_CODES
    assert fragment in e.value.message


def test_errors_name_the_context_when_they_can():
    with pytest.raises(P.ProtocolError) as e:
        parse({"type": "text", "context_id": "c1", "text": None})
    assert e.value.context_id == "c1"
    msg = json.loads(P.error_message(P.BAD_TEXT, "nothing speakable", "c1", fatal=False, context_ended=True))
    assert msg == {"type": "error", "code": "bad_text", "message": "nothing speakable", "context_id": "c1",
                   "fatal": False, "context_ended": True}


def test_start_takes_every_sampling_option_and_checks_its_type():
    from voicespec.options import SAMPLING_OPTIONS

    for opt in SAMPLING_OPTIONS:
        value = 3 if opt.type is int else 0.5
        msg = P.parse_client_message(json.dumps({"type": "start", opt.name: value}))
        assert msg.sampling_overrides() == {opt.name: value}
        with pytest.raises(P.ProtocolError, match=opt.name):
            P.parse_client_message(json.dumps({"type": "start", opt.name: "high"}))
    with pytest.raises(P.ProtocolError):
        P.parse_client_message(json.dumps({"type": "start", "top_k": 2.5}))


@pytest.mark.parametrize("cid", ["a", "ab", "abc", "abcd", "ctx-12345", "x" * 64, "é"])
@pytest.mark.parametrize("encoding", ["pcm_s16le", "f32le"])
def test_audio_frame_round_trip_and_alignment(cid, encoding):
    samples = np.linspace(-1, 1, 37, dtype=np.float32)
    payload = samples.astype("<f4").tobytes() if encoding == "f32le" else (samples * 32767).astype("<i2").tobytes()
    frame = P.encode_frame(cid, 5, payload, encoding)
    offset = len(frame) - len(payload)
    assert frame[:3] == b"VS\x01" and offset % 4 == 0  # payload viewable in place as a typed array
    back = P.decode_frame(frame, encoding)
    assert back == P.AudioFrame(cid, 5, 37, payload) and back.payload == payload
    js = json.loads(P.audio_message(cid, 5, payload, encoding))
    assert js["type"] == "audio" and P.decode_audio_message(js, encoding) == back


def test_corrupt_frames_are_rejected():
    frame = P.encode_frame("a", 0, b"\0\0" * 4, "pcm_s16le")
    for bad in (frame[:6], b"XX" + frame[2:], frame[:-1]):
        with pytest.raises(ValueError):
            P.decode_frame(bad, "pcm_s16le")
    with pytest.raises(ValueError):
        P.decode_frame(frame, "f32le")  # 8 bytes are 4 s16 samples, not 4 f32 samples
    with pytest.raises(ValueError):
        P.encode_frame("a", 0, b"\0\0\0", "pcm_s16le")  # half a sample


@pytest.mark.parametrize(
    "buffer,released",
    [
        ("Hello there. Second", "Hello there. "),
        ("Hello there. ", ""),  # the next word has not started: "there." may yet be "there.5"
        ("Hello there.", ""),
        ("A? B! C; D: e", "A? B! C; D: "),
        ("Dr. Smith is here. And", "Dr. Smith is here. "),  # "Dr." is not a sentence end
        ("Pay No. 5 now. Ok", "Pay No. 5 now. "),  # "No. 5" is "number five"
        ("At 5 p.m. Then", "At 5 p.m. "),
        ("at 5 p.m. then", ""),  # lower case after "p.m.": the front end keeps one sentence
        ("e.g. this", ""),
        ("It cost $3. 50 more", "It cost $3. "),
        ("", ""),
    ],
)
def test_complete_prefix_releases_what_the_front_end_would_split(buffer, released):
    assert buffer[: complete_prefix(buffer)] == released


def test_complete_prefix_agrees_with_the_front_end_on_whole_text():
    """Releasing sentences as text streams in gives the front end's split of the whole text."""
    from voicespec.frontend.text import FrontEnd

    fe = FrontEnd()
    text = "Dr. Smith paid $3.50 on May 5th. It is 7:30 a.m. Then No. 5 left! Did it? Yes; quite: so."
    for step in (1, 3, 7):
        buffer, got = "", []
        for i in range(0, len(text), step):
            buffer += text[i: i + step]
            n = complete_prefix(buffer)
            if n:
                got += [s for s, _ in fe.sentences(buffer[:n])]
                buffer = buffer[n:]
        got += [s for s, _ in fe.sentences(buffer)]
        assert got == [s for s, _ in fe.sentences(text)]


def test_playout_counts_underruns_against_real_time():
    sr = 1000
    # 0.1 s chunks every 0.1 s: with 0.2 s prebuffer, playback never starves.
    steady = [(0.1 * i, 100) for i in range(10)]
    p = playout(steady, sr, 0.2)
    assert p["underruns"] == 0 and p["stall_s"] == 0 and p["start_s"] == pytest.approx(0.1)
    assert p["end_s"] == pytest.approx(1.1) and p["audio_s"] == pytest.approx(1.0)
    assert p["min_lead_s"] == pytest.approx(0.1)
    # No prebuffer, a hole after the 3rd chunk: the audio runs out at 0.3 s, the next chunk comes at 0.7 s.
    holey = [(0.0, 100), (0.1, 100), (0.2, 100), (0.7, 100), (0.8, 100)]
    p = playout(holey, sr, 0.0)
    assert p["start_s"] == 0.0 and p["underruns"] == 1 and p["stall_s"] == pytest.approx(0.4)
    assert p["end_s"] == pytest.approx(0.9)
    # A prebuffer that covers the hole removes the underrun.
    assert playout(holey, sr, 0.5)["underruns"] == 0
    # Less audio than the prebuffer: playback starts at the end of the stream.
    p = playout([(0.0, 50), (0.3, 50)], sr, 1.0)
    assert p["start_s"] == 0.3 and p["underruns"] == 0 and p["min_lead_s"] is None
    assert playout([], sr, 0.1)["underruns"] == 0
    assert gaps([0.0, 0.1, 0.35]) == pytest.approx([0.1, 0.25])
    with pytest.raises(ValueError):
        playout(steady, 0, 0.1)


@pytest.mark.parametrize("prebuffer_s", [0.0, 0.05, 0.3, 5.0])
def test_playout_timeline_ends_where_playout_totals_do(prebuffer_s):
    rng, sr = np.random.default_rng(7), 1000
    times = np.cumsum(rng.exponential(0.08, 60))
    arrivals = [(float(t), int(n)) for t, n in zip(times, rng.integers(20, 120, 60))]
    p, points = playout(arrivals, sr, prebuffer_s), playout_timeline(arrivals, sr, prebuffer_s)
    assert [q.t for q in points] == sorted(q.t for q in points) and all(q.t > p["start_s"] for q in points)
    assert sum(q.stalled for q in points) == p["underruns"]
    assert sum(-q.lead_s for q in points if q.stalled) == pytest.approx(p["stall_s"])
    leads = [q.lead_s for q in points if not q.stalled]
    assert min(leads, default=None) == p["min_lead_s"]
    if points:  # the last arrival: the player runs on from it with that lead plus the last chunk
        last = points[-1]
        assert last.t + max(last.lead_s, 0.0) + arrivals[-1][1] / sr == pytest.approx(p["end_s"])
    assert playout_timeline([], sr, 0.1) == []


def test_server_metrics_render_prometheus_text():
    m, other = ServerMetrics(), ServerMetrics()  # one registry per server: no clash in one process
    m.error('a"b')
    m.errors_total.labels('a"b').inc(2)
    m.active_contexts.set(3)
    m.active_contexts.dec()
    for v in (0.01, 0.04, 10):
        m.ttfa.observe(v)
    body, ctype = m.exposition()
    text = body.decode()
    assert ctype.startswith("text/plain") and "version=" in ctype
    assert "# TYPE voicespec_errors_total counter" in text and "# TYPE voicespec_ttfa_seconds histogram" in text
    values = parse_exposition(text)
    assert values['voicespec_errors_total{code="a\\"b"}'] == 3 and values["voicespec_active_contexts"] == 2
    assert values['voicespec_contexts_total{outcome="done"}'] == 0
    assert values['voicespec_ttfa_seconds_bucket{le="0.025"}'] == 1 and values['voicespec_ttfa_seconds_bucket{le="0.05"}'] == 2
    assert values['voicespec_ttfa_seconds_bucket{le="+Inf"}'] == 3 and values["voicespec_ttfa_seconds_count"] == 3
    assert values["voicespec_ttfa_seconds_sum"] == pytest.approx(10.05)
    assert parse_exposition(other.exposition()[0].decode())["voicespec_active_contexts"] == 0
    with pytest.raises(ValueError):
        m.client_underruns.inc(-1)
