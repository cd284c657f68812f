"""``voicespec demo``: the quick end-to-end demonstration runs and checks its own exactness."""

from __future__ import annotations

import pytest
import soundfile as sf


@pytest.mark.slow
def test_demo_runs_end_to_end_and_checks_exactness(tmp_path, capsys):
    from voicespec.bench.demo import run_demo

    wav = tmp_path / "demo.wav"
    assert run_demo(quick=True, max_steps=24, wav_out=str(wav)) == 0
    out = capsys.readouterr().out
    assert "MISMATCH" not in out and out.count("identical") == 10
    assert sf.info(str(wav)).frames > 0

