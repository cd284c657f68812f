"""The server's Prometheus metrics: one registry per server, rendered and parsed back."""

from __future__ import annotations

import pytest

from voicespec.serve.metrics import ServerMetrics


def test_server_metrics_render_prometheus_text(parse_exposition):
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

