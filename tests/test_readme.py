"""The README's commands run as written: every ``voicespec`` command line in a ``sh`` block is a
valid command line, and the Quickstart (shell and Python, a server started for its client lines)
runs for real in a scratch folder."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf

from voicespec.cli import build_parser
from voicespec.cli.args import CliError
from voicespec.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
DOCS = [p.read_text() for p in sorted((REPO_ROOT / "docs").glob("*.md"))]  # the guide's details and recipes
BIN = Path(sys.executable).parent
DEFAULT_URL = "ws://127.0.0.1:8765/v1/stream"


def blocks(lang: str, text: str = README) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[list[str]]:
    """The ``voicespec`` invocations of a shell block: continuations joined, comments dropped,
    split at pipes, ``&&``, ``&``, ``;`` and redirections as a shell would."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.commenters, lexer.whitespace_split = "#", True
        words, cmd = list(lexer), []
        for w in words + [";"]:
            if w in ("|", "||", "&&", "&", ";", ">", ">>", "<"):
                if cmd[:1] == ["voicespec"]:
                    out.append(cmd[1:])
                cmd = [] if w not in (">", ">>", "<") else ["<redirect>"]
            else:
                cmd.append(w)
    return out


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_every_voicespec_command_line_in_the_readme_and_docs_parses():
    found = [c for text in (README, *DOCS) for b in blocks("sh", text) for c in commands(b)]
    assert len(found) >= 40 and DOCS  # the README's examples, the docs' recipes (training included)
    parser = build_parser()
    for argv in found:
        try:
            parser.parse_args(argv)
        except (SystemExit, CliError):
            pytest.fail(f"README command does not parse: voicespec {shlex.join(argv)}")


@pytest.fixture(scope="module")
def server_urls():
    """``voicespec serve`` on free ports: its WebSocket URL and its OpenAI base URL."""
    proc = subprocess.Popen([str(BIN / "voicespec"), "serve", "--port", "0", "--openai-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t, line = time.monotonic() + 120, ""
        while "serving voice" not in line:
            assert time.monotonic() < t and proc.poll() is None, line
            line = proc.stdout.readline()
        yield re.search(r"WebSocket (ws://\S+)", line).group(1), re.search(r"OpenAI (http://\S+)", line).group(1)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_the_quickstart_runs(tmp_path, server_urls):
    server_url = server_urls[0]
    shell, api, client = blocks("sh", section("Quickstart"))[0], *blocks("python", section("Quickstart"))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for line in shell.splitlines():
        if line.startswith("voicespec serve"):
            continue  # the fixture's server stands in for it (on a free port)
        if line.startswith("voicespec client"):
            line = line.replace("voicespec client", f"voicespec client --url {server_url}", 1)
        out = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, (line, out.stderr[-2000:])
    for name in ("hello.wav", "stdin.mp3", "slow.flac", "out/000001.ogg", "out/000002.ogg", "morning.wav"):
        audio, rate = sf.read(tmp_path / name)
        assert len(audio) / rate > 0.2, name
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        exec(compile(api, "README:api", "exec"), {})
        exec(compile(client.replace(DEFAULT_URL, server_url), "README:client", "exec"), {})
    finally:
        os.chdir(cwd)
    assert sf.info(str(tmp_path / "smith.wav")).duration > 0.5


@pytest.mark.slow
def test_the_openai_example_runs(tmp_path, server_urls):
    pytest.importorskip("openai")
    example = blocks("python", section("Front doors"))[0]
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        exec(compile(example.replace("http://127.0.0.1:8766/v1", server_urls[1]), "README:openai", "exec"), {})
    finally:
        os.chdir(cwd)
    assert sf.info(str(tmp_path / "hello.mp3")).duration > 0.5
