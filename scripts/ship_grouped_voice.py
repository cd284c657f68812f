"""Ship a second voice that shares the default voice's codec and duration predictor (issue 36).

The grouped voice (two frames a backbone step) differs from the default one only in its target and
its drafters: it speaks the same codec's codes with the same timing. So the shipped folder holds its
target (with a model card written from the checkpoint and the judges' report) and the drafters
named, and its ``voice.json`` points at the default voice's ``codec/`` and ``duration/``: a new
decoder shipped there (``voicespec train ship-codec``) serves both voices, and the package carries
one copy. Reproduces ``voicespec/voices/voicespec-tiny-g2`` from the runs of docs/voice.md:

    python scripts/ship_grouped_voice.py --voice runs/fine-g2/voice --evaluation runs/eval-g2b.json \\
        --command "voicespec train lm ... (the target's recipe)" --dest voicespec/voices/voicespec-tiny-g2
"""

import argparse
import json
import shutil
from pathlib import Path

from voicespec.pipeline.voice import DEFAULT_VOICE, VOICE_FILE, Voice
from voicespec.train.ship import ship_target


def voice_config(voice: Path, name: str, shares: str, drafters: list[str]) -> dict:
    """``voice``'s voice.json renamed, its codec and duration named in the sibling ``shares``."""
    config = json.loads((voice / VOICE_FILE).read_text())
    if config.get("default_drafter") not in ("none", "ngram", *drafters):
        raise SystemExit(f"the default drafter {config['default_drafter']!r} is not among those shipped ({drafters})")
    config.update(name=name, codec=f"../{shares}/codec", duration=f"../{shares}/duration")
    config["info"] = {**config.get("info", {}), "codec": f"{shares}'s", "duration": f"{shares}'s"}
    return config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voice", type=Path, required=True, help="the assembled voice folder (its target and drafters)")
    ap.add_argument("--dest", type=Path, required=True, help="the new voice folder, beside the voice it shares parts with")
    ap.add_argument("--name", default="voicespec-tiny-g2")
    ap.add_argument("--shares", default=DEFAULT_VOICE, help="the sibling voice whose codec/ and duration/ it uses")
    ap.add_argument("--drafters", default="feature", help="comma-separated drafters to ship (the rest stay behind)")
    ap.add_argument("--evaluation", type=Path, help="a `voicespec evaluate` report of this voice, for the card")
    ap.add_argument("--command", required=True, help="the command that trained the target, for the card")
    args = ap.parse_args()

    sibling, drafters = args.dest.parent / args.shares, args.drafters.split(",")
    if not (sibling / VOICE_FILE).is_file():
        raise SystemExit(f"{sibling}: no voice to share parts with beside {args.dest}")
    if args.dest.resolve() == sibling.resolve():
        raise SystemExit(f"{args.dest} is the voice it would share parts with")
    config = voice_config(args.voice, args.name, args.shares, drafters)
    evaluation = json.loads(args.evaluation.read_text()) if args.evaluation else None
    if args.dest.exists():
        shutil.rmtree(args.dest)
    ship_target(args.voice / "target", args.dest, f"{args.name} target (codec LM, grouped)", args.command, evaluation)
    for name in drafters:
        shutil.copytree(args.voice / "drafters" / name, args.dest / "drafters" / name)
    (args.dest / VOICE_FILE).write_text(json.dumps(config, indent=2) + "\n")
    Voice.load(args.dest)  # the parts must fit together
    print(f"shipped {args.dest}: codec and duration from {args.shares}")


if __name__ == "__main__":
    main()
