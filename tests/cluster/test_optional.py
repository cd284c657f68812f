"""Ray stays optional: the plain server, the batch writer and the command line never import it."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_core_does_not_import_ray():
    code = ("import sys, voicespec.cli, voicespec.batch, voicespec.serve.server, voicespec.api; "
            "voicespec.cli.build_parser(); print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
