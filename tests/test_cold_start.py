"""What a cold ``voicespec say`` loads.

Every CLI call pays its imports: ``transformers`` alone was ~3 s of a cold ``say`` on a busy
2-core machine, for classes the shipped voice no longer uses. The heavy optional libraries stay
out of the speaking path (``transformers`` for Hugging Face checkpoints and as the test oracle; the
judges; plotting; Ray; the server's stack).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Imported by nothing that speaks with a shipped voice.
NOT_FOR_SAY = ("transformers", "matplotlib", "ray", "scipy", "sklearn", "pandas", "librosa", "onnxruntime",
               "faster_whisper", "ctranslate2", "piper", "websockets", "prometheus_client", "av", "pocketsphinx",
               "sympy")  # torch's symbolic shapes: 0.7 s that an nn.Linear built in the first decode used to import
# Registered to load on first use, and not used for normalized text: gruut's date parser (~0.3 s).
NOT_LOADED = ("dateparser.date",)

PROBE = """
import json, sys
from voicespec.cli import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _say(*args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, "say", *args], capture_output=True, text=True, timeout=300, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_say_with_the_shipped_voice_imports_no_heavy_library(tmp_path):
    probe = _say("Hello there.", "-o", str(tmp_path / "a.wav"))
    assert probe["status"] == 0 and (tmp_path / "a.wav").stat().st_size > 10_000
    assert "torch" in probe["modules"]  # the probe sees what was imported
    top = {m.split(".")[0] for m in probe["modules"]}
    assert [m for m in NOT_FOR_SAY if m in top] == []
    assert "gruut" in top and [m for m in NOT_LOADED if m in probe["modules"]] == []
