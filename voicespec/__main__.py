"""``python -m voicespec`` is the ``voicespec`` command."""

import sys

from voicespec.cli import main

sys.exit(main())
