"""Protocol v1: message validation and typed messages, error messages, the binary audio frame."""

from __future__ import annotations

import json

import numpy as np
import pytest

from voicespec.serve import protocol as P


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
    for tree in ([2, 2, 1], "2,2,1", [[3], [2, 1, 0]], "3/2,1,0", "dynamic:20:5:3"):  # per depth, per node, dynamic
        assert parse({"type": "start", "tree": tree}) == P.Start(tree=tree)
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
        ({"type": "text", "context_id": "a", "text": "hi", "volume": "x"}, P.BAD_MESSAGE, "unknown field"),
        ({"type": "text", "context_id": "a", "text": "hi", "voice": 3}, P.BAD_MESSAGE, "'voice' must be a string"),
        ({"type": "start", "speed": 0.1}, P.BAD_OPTION, "speed must be"),
        ({"type": "start", "word_timestamps": "yes"}, P.BAD_MESSAGE, "true or false"),
        ({"type": "start", "encoding": "mulaw", "sample_rate": 16000}, P.BAD_OPTION, "carries sample_rate 8000 only"),
        ({"type": "start", "encoding": "opus", "sample_rate": 22050}, P.BAD_OPTION, "carries sample_rate"),
        ({"type": "start", "strict": True, "colour": "blue"}, P.BAD_MESSAGE, "strict"),
        ({"type": "start", "seed": "1"}, P.BAD_MESSAGE, "'seed' must be an integer"),
        ({"type": "start", "seed": True}, P.BAD_MESSAGE, "'seed' must be an integer"),
        ({"type": "start", "top_k": 2.5}, P.BAD_MESSAGE, "'top_k' must be an integer"),
        ({"type": "start", "gamma": -1}, P.BAD_MESSAGE, "gamma"),
        ({"type": "start", "gamma": "fast"}, P.BAD_MESSAGE, "gamma"),
        ({"type": "start", "tree": [[3], [2, 1]]}, P.BAD_MESSAGE, "per node depth by depth"),  # 2 counts for 3 nodes
        ({"type": "start", "tree": "3/2,x"}, P.BAD_MESSAGE, "'tree' must be"),
        ({"type": "start", "tree": {"depth": 2}}, P.BAD_MESSAGE, "'tree' must be"),
        ({"type": "start", "sample_rate": 44000}, P.BAD_OPTION, "sample_rate must be one of"),
        ({"type": "start", "encoding": "mp3"}, P.BAD_OPTION, "encoding"),
        ({"type": "start", "audio_transport": "carrier-pigeon"}, P.BAD_OPTION, "audio_transport"),
        ({"type": "start", "latency_budget_ms": 0}, P.BAD_OPTION, "latency_budget_ms must be in (0, 60000]"),
        ({"type": "start", "pacing_lead_ms": 1e300}, P.BAD_OPTION, "pacing_lead_ms must be in"),
        ({"type": "start", "latency_budget_ms": 50, "gamma": 3}, P.BAD_OPTION, "gamma"),
        ({"type": "flush", "context_id": "a", "flush_id": [1]}, P.BAD_MESSAGE, "flush_id"),
        ({"type": "stats", "underruns": "many"}, P.BAD_MESSAGE, "underruns"),
        # issue 17's defects, each of which crashed the dispatch or the metrics before
        ({"type": []}, P.UNKNOWN_TYPE, "unknown message type []"),  # 1: unhashable type
        ({"type": {}}, P.UNKNOWN_TYPE, "unknown message type {}"),
        ({"type": [[[["start"]]]]}, P.UNKNOWN_TYPE, "unknown message type"),
        ({"type": "stats", "underruns": -1}, P.BAD_MESSAGE, "underruns must be in [0"),  # 2: negative counter
        ({"type": "stats", "underrun_ms": -5}, P.BAD_MESSAGE, "underrun_ms"),
        ({"type": "stats", "underrun_ms": 1e300}, P.BAD_MESSAGE, "underrun_ms"),
        ('{"type": "flush", "context_id": "a", "flush_id": ' + "1" * 4301 + "}", P.BAD_JSON, "not valid JSON"),  # 3
        ({"type": "text", "context_id": "a\n", "text": "hi"}, P.BAD_MESSAGE, "context_id must be"),  # 5: "$" took it
        ({"type": "text", "context_id": "x" * 64 + "\n", "text": "hi"}, P.BAD_MESSAGE, "context_id must be"),
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
        value = opt.choices[-1] if opt.choices else 3 if opt.type is int else 0.5
        msg = P.parse_client_message(json.dumps({"type": "start", opt.name: value}))
        assert msg.sampling_overrides() == {opt.name: value}
        with pytest.raises(P.ProtocolError, match=opt.name):
            P.parse_client_message(json.dumps({"type": "start", opt.name: 1.5 if opt.type is str else "high"}))
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




def test_context_id_from_a_bad_message_is_not_echoed_when_invalid():
    with pytest.raises(P.ProtocolError) as e:
        parse({"type": "text", "context_id": "a\n", "text": 5})
    assert e.value.context_id is None


def test_v1_1_start_fields_and_per_context_options():
    start = parse({"type": "start", "speed": 1.25, "word_timestamps": True, "phoneme_timestamps": True,
                   "encoding": "mulaw"})
    assert (start.speed, start.word_timestamps, start.phoneme_timestamps, start.encoding) == (1.25, True, True, "mulaw")
    assert parse({"type": "start", "encoding": "opus", "sample_rate": 24000}).encoding == "opus"
    text = parse({"type": "text", "context_id": "a", "text": "Hi.", "voice": "v2", "speed": 0.8, "seed": 4,
                  "temperature": 0.5})
    assert text == P.Text("a", "Hi.", {"voice": "v2", "speed": 0.8, "seed": 4, "temperature": 0.5})


def test_strict_false_ignores_unknown_fields_and_says_which():
    start = parse({"type": "start", "strict": False, "model_id": "eleven_turbo", "voice": "default"})
    assert start.ignored == ("model_id",) and start.voice == "default" and not start.strict
    with pytest.raises(P.ProtocolError, match="model_id"):  # strict by default
        parse({"type": "start", "model_id": "eleven_turbo"})
    msg = json.dumps({"type": "text", "context_id": "a", "text": "Hi.", "try_trigger_generation": True})
    assert P.parse_client_message(msg, strict=False) == P.Text("a", "Hi.")
    with pytest.raises(P.ProtocolError, match="try_trigger_generation"):
        P.parse_client_message(msg)
    with pytest.raises(P.ProtocolError, match="'text' must be a string"):  # known fields are still checked
        P.parse_client_message(json.dumps({"type": "text", "context_id": "a", "text": 3, "x": 1}), strict=False)


@pytest.mark.parametrize("encoding", ["mulaw", "alaw", "opus"])
def test_byte_encodings_frame_round_trip(encoding):
    payload = bytes(range(37))
    back = P.decode_frame(P.encode_frame("ctx", 2, payload, encoding), encoding)
    assert back == P.AudioFrame("ctx", 2, 37, payload)
