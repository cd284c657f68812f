"""``voicespec synth --ray``: on a local Ray with 2 CPUs, the same files byte for byte as the local
batch writer, the same journal rule for --resume, failures recorded per item."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")

from voicespec.cli import main  # noqa: E402

# One Ray cluster at a time: under pytest-xdist both modules run on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

LINES = [
    {"id": "a", "text": "Hello there. How are you?"},
    {"id": "b", "text": "The train leaves at seven.", "seed": 3},
    {"id": "c", "text": "Quick test.", "temperature": 0.5},
    {"id": "bad", "text": "x", "top_k": "many"},
    {"id": "d", "text": "Hello there, again."},
    {"id": "e", "text": "こんにちは"},
]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def synth(tmp_path, name, *extra):
    src = tmp_path / "items.jsonl"
    src.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    out = tmp_path / name
    code = main(["synth", str(src), "-o", str(out), "--max-steps", "30", *extra])
    return code, out


def test_ray_synth_equals_local_synth_byte_for_byte(tmp_path, tiny_voice_dir, local_ray):
    voice = ["--voice", str(tiny_voice_dir)]
    code_local, local = synth(tmp_path, "local", *voice)
    code_ray, remote = synth(tmp_path, "ray", *voice, "--ray", "--ray-workers", "2")
    assert code_local == code_ray == 1  # the bad lines fail in both
    files = sorted(p.name for p in local.glob("*.wav"))
    assert files == ["a.wav", "b.wav", "c.wav", "d.wav"] and sorted(p.name for p in remote.glob("*.wav")) == files
    for name in files:
        assert (local / name).read_bytes() == (remote / name).read_bytes(), name
    journal = [json.loads(line) for line in (remote / "progress.jsonl").read_text().splitlines()]
    assert {r["id"]: r["status"] for r in journal} == {"a": "ok", "b": "ok", "c": "ok", "d": "ok", "bad": "failed",
                                                       "e": "failed"}
    summary = json.loads((remote / "summary.json").read_text())
    assert [r["line"] for r in summary["records"]] == [1, 2, 3, 4, 5, 6]  # input order, whatever finished first
    assert "English" in next(r["error"] for r in summary["failures"] if r["id"] == "e")

    (remote / "b.wav").unlink()  # a lost file is made again on --resume; the rest are skipped
    code, remote = synth(tmp_path, "ray", *voice, "--ray", "--resume")
    summary = json.loads((remote / "summary.json").read_text())
    assert {r["id"]: r["status"] for r in summary["records"] if "id" in r} == {
        "a": "skipped", "b": "ok", "c": "skipped", "d": "skipped", "bad": "failed", "e": "failed"}
    assert (remote / "b.wav").read_bytes() == (local / "b.wav").read_bytes()


def test_default_synth_and_synth_ray_give_the_same_files_on_the_shipped_voice(tmp_path, local_ray):
    """The default voice sampling (T 0.7: it decodes greedily unless asked; the adaptive γ, torch's
    threads as each side sets them): every file the same byte for byte."""
    src = tmp_path / "lines.txt"
    src.write_text("The quick brown fox jumps over the lazy dog.\nPlease call me back when you get this.\n")
    local, remote = tmp_path / "local", tmp_path / "ray"
    sampled = ["--gamma", "auto", "--temperature", "0.7"]
    assert main(["synth", str(src), "-o", str(local), *sampled]) == 0
    assert main(["synth", str(src), "-o", str(remote), *sampled, "--ray", "--ray-workers", "2"]) == 0
    files = sorted(p.name for p in local.glob("*.wav"))
    assert len(files) == 2 and files == sorted(p.name for p in remote.glob("*.wav"))
    for name in files:
        assert (local / name).read_bytes() == (remote / name).read_bytes(), name
