"""``voicespec tiny --layout L`` then ``voicespec generate`` on its target: every layout decodes."""

from __future__ import annotations

import json

import pytest

from voicespec.cli import main

ALIGNED = {"aligned", "coarse", "grouped"}  # targets conditioned on a frame-aligned text track


@pytest.mark.parametrize("layout", ["flat", "delay", "aligned", "coarse", "grouped"])
def test_generate_runs_on_the_target_of_every_tiny_layout(layout, tmp_path, capsys):
    voice = tmp_path / layout
    assert main(["tiny", "--layout", layout, "--out", str(voice)]) == 0
    common = ["generate", "--model", str(voice / "target"), "--text-ids", "3,4,5", "--max-steps", "60",
              "--temperature", "0", "--frames-per-id", "5"]
    plain, spec = tmp_path / "plain.json", tmp_path / "spec.json"
    assert main([*common, "--no-spec", "--dump-tokens", str(plain)]) == 0
    assert main([*common, "--drafter", "draft-model", "--draft-model", str(voice / "drafters" / "draft-model"),
                 "--gamma", "3", "--dump-tokens", str(spec)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("wrote voice folder") and all(line.startswith("frames ") for line in lines[1:])
    a, b = json.loads(plain.read_text()), json.loads(spec.read_text())
    assert a["frames"] == b["frames"] and len(a["frames"]) == 4  # lossless: greedy spec equals plain
    frames = len(a["frames"][0])
    assert frames == 15 if layout in ALIGNED else frames > 0  # an aligned target speaks its track: 3 ids x 5 (grouped: 8 steps, the last cut)


def test_generate_on_a_voice_folder_points_at_its_target(tiny_voice_dir, capsys):
    assert main(["generate", "--model", str(tiny_voice_dir), "--text-ids", "3,4,5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"voicespec: error: {tiny_voice_dir} is a voice folder") and f"--model {tiny_voice_dir / 'target'}" in err
