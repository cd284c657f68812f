"""Where the data folders are: shipped voices, the player's static files, samples.

The voices and the player are package data (inside ``voicespec/``), so an installed wheel finds
them wherever it lives; ``samples/`` (listen-ready audio, bench prompts) exists only in a checkout.
One definition, so no module reaches for another's ``__file__`` (or imports the CLI) to find them.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent  # a checkout's root (samples/, .git); nothing here is needed installed
SHIPPED_VOICES_DIR = PACKAGE_DIR / "voices"  # voices shipped with the package; voicespec-tiny-g2 is the default
STATIC_DIR = PACKAGE_DIR / "serve" / "static"  # the browser player and the protocol document
SAMPLES_DIR = REPO_ROOT / "samples"


def voices_dirs() -> list[Path]:
    """Where voices are looked up by name, first match wins: the folders in ``$VOICESPEC_VOICES``
    (``os.pathsep``-separated), then the shipped ones."""
    extra = [Path(p).expanduser() for p in os.environ.get("VOICESPEC_VOICES", "").split(os.pathsep) if p]
    return [*extra, SHIPPED_VOICES_DIR]
