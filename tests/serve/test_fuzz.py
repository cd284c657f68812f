"""Hostile input, bounded for CI: every JSON value in every field of every message type gets a
documented error, never an unhandled exception (the live-server flood is in test_server.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from voicespec.bench.hostile import hostile_messages
from voicespec.serve import protocol as P

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(sorted(P.MESSAGE_FIELDS)) | JSON, fields=st.dictionaries(
    st.sampled_from(sorted({f for spec in P.MESSAGE_FIELDS.values() for f in spec} | {"extra"})), JSON, max_size=6))
@pytest.mark.slow
def test_any_json_in_any_field_parses_or_is_a_protocol_error(kind, fields):
    try:
        P.parse_client_message(json.dumps({"type": kind, **fields}))
    except P.ProtocolError as e:
        assert e.code in P.ERROR_CODES and e.message


@pytest.mark.slow
def test_the_generated_corpus_parses_or_is_a_protocol_error():
    for raw in hostile_messages(20_000, seed=7):
        try:
            P.parse_client_message(raw)
        except P.ProtocolError as e:
            assert e.code in P.ERROR_CODES
