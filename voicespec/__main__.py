"""``python -m voicespec`` is the ``voicespec`` command."""

from voicespec.cli import entry

entry()
