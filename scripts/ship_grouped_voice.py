"""Ship a second voice that shares the default voice's codec and duration predictor (issue 36).

The grouped voice (two frames a backbone step) differs from the default one only in its target and
its drafters: it speaks the same codec's codes with the same timing. So the shipped folder holds its
target (with a model card written from the checkpoint and the judges' report) and the drafters
named, and its ``voice.json`` points at the default voice's ``codec/`` and ``duration/``: a new
decoder shipped there (``voicespec train ship-codec``) serves both voices, and the package carries
one copy. Reproduces ``voicespec/voices/voicespec-tiny-g2`` from the runs of docs/voice.md:

    python scripts/ship_grouped_voice.py --voice runs/fine-g2/voice --evaluation runs/eval-g2b.json \\
        --command "voicespec train lm ... (the target's recipe)" --decoding greedy --drafter-weights int8 \\
        --dest voicespec/voices/voicespec-tiny-g2
"""

import argparse
import filecmp
import json
import shutil
from pathlib import Path

from voicespec.lm.draft_heads import WEIGHTS
from voicespec.pipeline.drafters import BUILTIN, EARLY_EXIT
from voicespec.pipeline.voice import BASE_VOICE, DECODINGS, PART_FOLDERS, VOICE_FILE, Voice
from voicespec.train.ship import ship_target


def voice_config(voice: Path, sibling: Path, name: str, drafters: list[str]) -> dict:
    """``voice``'s voice.json renamed, its codec and duration the ``sibling``'s (which must be the
    very parts ``voice`` was assembled with, and read the same units)."""
    config, theirs = (json.loads((v / VOICE_FILE).read_text()) for v in (voice, sibling))
    default = config.get("default_drafter", "ngram")
    if default not in drafters and default not in BUILTIN and not default.startswith(EARLY_EXIT):
        raise SystemExit(f"the default drafter {default!r} is not among those shipped ({drafters})")
    if config["tokenizer"] != theirs["tokenizer"]:
        raise SystemExit(f"{voice} and {sibling} read different units: their duration predictor is not shared")
    parts = {key: theirs.get(key) or key for key in PART_FOLDERS}
    for key, part in parts.items():
        mine, shared = voice / (config.get(key) or key), sibling / part
        names = [f.name for f in shared.iterdir() if f.is_file()]
        if sorted(names) != sorted(f.name for f in mine.iterdir() if f.is_file()) or \
                filecmp.cmpfiles(mine, shared, names, shallow=False)[0] != names:
            raise SystemExit(f"{mine} is not {shared}: the voice would speak through other parts than it was made with")
    config.update(name=name, **{key: f"../{sibling.name}/{part}" for key, part in parts.items()})
    config["info"] = {**config.get("info", {}), "codec": f"{sibling.name}'s", "duration": f"{sibling.name}'s"}
    return config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voice", type=Path, required=True, help="the assembled voice folder (its target and drafters)")
    ap.add_argument("--dest", type=Path, required=True, help="the new voice folder, beside the voice it shares parts with")
    ap.add_argument("--name", default="voicespec-tiny-g2")
    ap.add_argument("--shares", default=BASE_VOICE, help="the sibling voice whose codec/ and duration/ it uses")
    ap.add_argument("--drafters", default="feature", help="comma-separated drafters to ship (the rest stay behind)")
    ap.add_argument("--evaluation", type=Path, help="a `voicespec evaluate` report of this voice, for the card")
    ap.add_argument("--command", required=True, help="the command that trained the target, for the card")
    ap.add_argument("--decoding", choices=DECODINGS, help="how it decodes by default (default: as the assembled voice)")
    ap.add_argument("--drafter-weights", choices=WEIGHTS,
                    help="the weights its feature drafters draft from (default: as assembled); int8 drafts faster, "
                         "and a draft's weights never change the output, only how much of it is accepted")
    args = ap.parse_args()

    sibling, drafters = args.dest.parent / args.shares, args.drafters.split(",")
    if not (sibling / VOICE_FILE).is_file():
        raise SystemExit(f"{sibling}: no voice to share parts with beside {args.dest}")
    if args.dest.resolve() == sibling.resolve() or args.voice.resolve().is_relative_to(args.dest.resolve()):
        raise SystemExit(f"{args.dest} holds the voice it would share parts with, or the one it ships")
    config = voice_config(args.voice, sibling, args.name, drafters)
    if args.decoding:
        config["decoding"] = args.decoding
    evaluation = json.loads(args.evaluation.read_text()) if args.evaluation else None
    if args.dest.exists():
        shutil.rmtree(args.dest)
    ship_target(args.voice / "target", args.dest, f"{args.name} target (codec LM, grouped)", args.command, evaluation)
    for name in drafters:
        shutil.copytree(args.voice / "drafters" / name, args.dest / "drafters" / name)
        heads = args.dest / "drafters" / name / "config.json"
        found = json.loads(heads.read_text()) if args.drafter_weights else {}
        if found.get("kind") == "feature":
            heads.write_text(json.dumps({**found, "inference_weights": args.drafter_weights}, indent=2) + "\n")
    (args.dest / VOICE_FILE).write_text(json.dumps(config, indent=2) + "\n")
    Voice.load(args.dest)  # the parts must fit together
    print(f"shipped {args.dest}: codec and duration from {args.shares}")


if __name__ == "__main__":
    main()
