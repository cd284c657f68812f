"""The built wheel works on its own: installed into a fresh virtualenv (its dependencies borrowed
from this one, offline), ``voicespec say`` speaks with the shipped voice and ``voicespec serve``
serves the player — from the installed package, not from this checkout."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import soundfile as sf

from voicespec.paths import REPO_ROOT

pytestmark = pytest.mark.slow


def sh(*cmd, cwd: Path, timeout: float = 300) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VOICESPEC_VOICES")})
    assert out.returncode == 0, (cmd, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding only the wheel (no network: no build isolation, no dependencies)."""
    root = tmp_path_factory.mktemp("install")
    src = root / "src"  # a copy: building in place would leave build/ in the checkout
    shutil.copytree(REPO_ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "out"))
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", root / "dist", src,
       cwd=root)
    wheel = next((root / "dist").glob("voicespec-*.whl"))
    venv = root / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    sh(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps", "--no-index",
       wheel, cwd=root)
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    # The dependencies from this environment, as plain paths: their .pth files (this checkout's
    # editable install among them) are not processed, so `voicespec` can only come from the wheel.
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def test_the_wheel_ships_the_voice_and_the_player(installed, tmp_path):
    where = sh(installed / "bin" / "python", "-c", "import voicespec, voicespec.paths as p; "
               "print(voicespec.__version__, p.SHIPPED_VOICES_DIR, p.STATIC_DIR)", cwd=tmp_path).split()
    assert where[0] == __import__("voicespec").__version__
    assert all(Path(w).is_relative_to(installed) for w in where[1:]), where
    assert (Path(where[1]) / "voicespec-tiny" / "voice.json").is_file() and (Path(where[2]) / "index.html").is_file()
    grouped = Path(where[1]) / "voicespec-tiny-g2"  # the second voice, the default one's codec its own
    assert (grouped / "voice.json").is_file() and not (grouped / "codec").exists()


def test_installed_say_speaks_with_the_default_voice(installed, tmp_path):
    out = sh(installed / "bin" / "voicespec", "say", "Hello", "-o", "h.wav", cwd=tmp_path)
    audio, rate = sf.read(tmp_path / "h.wav")
    assert rate == 16000 and len(audio) / rate > 0.2 and abs(audio).max() > 0.01
    assert "RTF" in out and "Loading weights" not in out and "Warning" not in out  # quiet loading


def test_installed_grouped_voice_speaks_through_the_default_voices_codec(installed, tmp_path):
    """The second shipped voice keeps no codec of its own: its voice.json names the default voice's,
    a path that must hold inside an installed package too."""
    sh(installed / "bin" / "voicespec", "say", "Hello", "--voice", "voicespec-tiny-g2", "-o", "g.wav", cwd=tmp_path)
    audio, rate = sf.read(tmp_path / "g.wav")
    assert rate == 16000 and len(audio) / rate > 0.2 and abs(audio).max() > 0.01


def test_installed_serve_serves_the_player(installed, tmp_path):
    proc = subprocess.Popen([str(installed / "bin" / "voicespec"), "serve", "--port", "0"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t = time.monotonic() + 120
        line = ""
        while "serving voice" not in line:
            assert time.monotonic() < t and proc.poll() is None, line
            line = proc.stdout.readline()
        base = re.search(r"player (http://\S+/)", line).group(1)
        page = urllib.request.urlopen(base, timeout=10).read().decode()
        protocol = urllib.request.urlopen(base + "protocol", timeout=10).read().decode()
        assert "player.js" in page and "<h1>" in protocol
    finally:
        proc.terminate()
        proc.wait(30)
