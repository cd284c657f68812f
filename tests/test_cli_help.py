"""``--help``: every option says its default and what it does; the audio formats agree; a client
with no server to talk to is told how to start one."""

from __future__ import annotations

import argparse
import errno
import socket

import pytest

from voicespec.cli import args as A
from voicespec.cli import build_parser, main
from voicespec.cli.commands import connect_hint, is_connect_error

# The subcommands whose options are defined in voicespec/cli/__init__.py and args.py (the training,
# evaluation and bench recipes define their own).
OWN_COMMANDS = ("demo", "say", "synth", "generate", "serve", "stress", "client", "tiny")


def subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for every subcommand, nested ones too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from subparsers(sub, (*path, name))


def options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def rendered(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An option's entry in ``--help``, as one line."""
    return " ".join(parser._get_formatter()._format_action(action).split())


def test_every_option_of_every_command_shows_its_default():
    checked = 0
    for path, parser in subparsers(build_parser()):
        for action in options(parser):
            d = action.default
            if not action.option_strings or d is None or d is False or d is argparse.SUPPRESS or d == []:
                continue
            assert "(default" in rendered(parser, action), (path, action.option_strings)
            checked += 1
    assert checked > 100


def test_every_option_of_these_commands_says_what_it_does():
    commands = dict(subparsers(build_parser()))
    for name in OWN_COMMANDS:
        for action in options(commands[(name,)]):
            assert action.help and action.help.strip(), (name, action.option_strings or action.dest)


@pytest.mark.parametrize("argv,entry", [
    (["say"], "--max-steps MAX_STEPS decode steps at most per sentence (a runaway guard) (default: 2000)"),
    (["say"], "--speed SPEED speaking speed, 0.5 to 2 times the voice's own pace; other than 1 only for a voice "
              "with a duration predictor (default: 1.0)"),
    (["say"], "--gamma GAMMA draft length per step (an integer >= 0), or 'auto' for the adaptive controller (default: auto)"),
    (["synth"], "--gamma GAMMA draft length per step (an integer >= 0), or 'auto' for the adaptive controller (default: 4)"),
    (["synth"], "--format {wav,flac,ogg,mp3} audio format of every file (default: wav)"),
    (["serve"], "--host HOST address to listen on (0.0.0.0: every interface) (default: 127.0.0.1)"),
    (["client"], "--url URL server WebSocket URL (default: ws://127.0.0.1:8765/v1/stream)"),
    (["train", "codec"], "--batch-size BATCH_SIZE (default: 8)"),  # no help text of its own: still its default
])
def test_help_shows_defaults(argv, entry, capsys):
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--help"])
    assert exit.value.code == 0
    assert entry in " ".join(capsys.readouterr().out.split())


def test_every_command_has_a_help_page(capsys):
    for path, _ in subparsers(build_parser()):
        with pytest.raises(SystemExit) as exit:
            main([*path, "--help"])
        assert exit.value.code == 0, path
        assert capsys.readouterr().out.startswith("usage: voicespec " + " ".join(path))


def test_the_cli_knows_the_audio_formats_the_audio_module_writes():
    from voicespec.audio import FILE_FORMATS

    assert A.AUDIO_FORMATS == tuple(ext[1:] for ext in FILE_FORMATS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_client_with_no_server_is_told_to_start_one(tmp_path, capsys):
    url = f"ws://127.0.0.1:{free_port()}/v1/stream"
    assert main(["client", "hi", "-o", str(tmp_path / "x.wav"), "--url", url, "--wait-s", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"voicespec: error: could not connect to {url} (connection refused): is `voicespec serve` running there? "
        "Start one with `voicespec serve`, or pass --url")
    assert not list(tmp_path.iterdir())


def test_connect_errors_and_their_hints():
    url = "ws://h:1/v1/stream"
    several = OSError("Multiple exceptions: [Errno 111] Connect call failed ('::1', 1), [Errno 111] Connect call failed")
    assert is_connect_error(several) and "(connection refused)" in connect_hint(url, several)
    assert "(timed out)" in connect_hint(url, TimeoutError())
    unreachable = OSError(errno.ENETUNREACH, "Network is unreachable")
    assert is_connect_error(unreachable) and "(Network is unreachable): is `voicespec serve`" in connect_hint(url, unreachable)
    unknown = socket.gaierror(-2, "Name or service not known")
    assert connect_hint(url, unknown) == f"could not connect to {url} (unknown host: Name or service not known): check the host in --url"
    assert not is_connect_error(PermissionError(errno.EACCES, "Permission denied"))  # writing the output
    assert not is_connect_error(ConnectionResetError(errno.ECONNRESET, "reset"))  # connected, then lost
