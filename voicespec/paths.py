"""Where the repository's data folders are: shipped voices, the player's static files, samples.

One definition, so no module reaches for another's ``__file__`` (or imports the CLI) to find them.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO_ROOT / "models"  # shipped voices; the first is the default
STATIC_DIR = REPO_ROOT / "stream"  # the browser player and the protocol document
SAMPLES_DIR = REPO_ROOT / "samples"
