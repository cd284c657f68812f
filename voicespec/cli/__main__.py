from voicespec.cli import entry

entry()
