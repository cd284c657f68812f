import sys

from voicespec.cli import main

sys.exit(main())
