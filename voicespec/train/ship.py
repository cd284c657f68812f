"""Assemble the default voice folder from finished runs, with a model card per part written from
what each checkpoint records about itself: ``voicespec train ship``."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from voicespec.lm.codec_lm import CodecLM
from voicespec.frontend.duration import load_duration
from voicespec.frontend.phonemes import PhonemeTokenizer
from voicespec.frontend.text import CharTokenizer
from voicespec.pipeline.voice import BASE_VOICE, Voice, VoiceConfig
from voicespec.eval.recognizer import load_asr
from voicespec.train.card import DATA_NOTE
from voicespec.train.lm import INFO_KEY
from voicespec.train.configs import DRAFT_NAME
from voicespec.train.fine import FINE_STAGE_FILE



def _table(d: dict[str, Any]) -> str:
    rows = "\n".join(f"| {k} | {json.dumps(v) if isinstance(v, (dict, list)) else v} |" for k, v in d.items())
    return f"| field | value |\n| --- | --- |\n{rows}"


def card(title: str, summary: str, training: dict[str, Any], metrics: dict[str, Any], command: str) -> str:
    return f"""# {title}

{summary}

## Training

- Data: {DATA_NOTE}
- Recipe: `{command}`

{_table(training)}

## Held-out metrics

{_table(metrics)}

## License

Weights: Apache-2.0, like the code. Training audio: synthetic, from a voice trained on a CC0 dataset.
"""


def _lm_card(model: CodecLM, title: str, summary: str, command: str) -> str:
    info = dict(getattr(model.config, INFO_KEY, {}))
    metrics = info.pop("heldout_metrics", {})
    return card(title, summary, info, metrics, command)


# A judge's figures on the card: the report's keys, and the column's title.
JUDGE_COLUMNS = {"pocketsphinx": (("wer", "cer"), "PocketSphinx WER / CER"), "whisper": (("whisper_wer",), "Whisper WER"),
                 "dnsmos": (("dnsmos_ovrl",), "DNSMOS OVRL")}


def judge_section(report: dict[str, Any]) -> str:
    """The independent judges' table from a ``voicespec evaluate`` report, for the target's card: a
    column per judge the report names (an older report names none: PocketSphinx judged it), a dash
    where a row has no figure."""
    names = {"teacher": "teacher (Piper)", "resynth": "codec resynthesis", "sampled_plain": "generated, sampling",
             "sampled_spec": "generated, sampling, speculative", "greedy_plain": "generated, greedy"}
    sets = [(k, t) for k, t in (("heldout", "held-out sentences"), ("unseen_words", "unseen-word sentences"))
            if k in report]
    judges = [j for j in report.get("judges", {"pocketsphinx": report.get("judge")}) if j in JUDGE_COLUMNS]

    def cell(x: dict[str, Any], judge: str) -> str:
        keys = JUDGE_COLUMNS[judge][0]
        if any(k not in x for k in keys):
            return "–"
        closed = f" (closed set: {x['closed_wer']:.3f})" if judge == "pocketsphinx" and "closed_wer" in x else ""
        return " / ".join(f"{x[k]:.3f}" for k in keys) + closed

    columns = [f"{t} ({report[k]['utterances']}): {JUDGE_COLUMNS[j][1]}" for k, t in sets for j in judges]
    rows = [f"| {names[r]} | " + " | ".join(cell(report[k].get(r, {}), j) for k, _ in sets for j in judges) + " |"
            for r in names]
    described = "; ".join(str(v) for v in report["judges"].values()) if "judges" in report else report.get("judge", "PocketSphinx")
    seeds = f"seeds {report['seeds']} pooled" if "seeds" in report else f"seed {report.get('seed')}"
    return (f"\n## Intelligibility and naturalness, judged by models we did not train\n\n{described}; "
            f"sampling {json.dumps(report.get('sampling', {}))}, {seeds}; `voicespec evaluate` "
            "(corpus-level rates; conventions in `voicespec/eval/judge.py`).\n\n"
            + "\n".join(["| audio | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns), *rows]) + "\n")


def _ship_part(model, folder: Path, title: str, summary: str, command: str) -> None:
    """Save a part whose config records its provenance in ``extra``, with its model card."""
    model.save(folder)
    extra = model.config.extra
    (folder / "MODEL_CARD.md").write_text(card(title, summary, extra.get("training", {}),
                                               extra.get("heldout_metrics", {}), command))


FINE_STAGE_NOTE = (f"\n## Fine stage\n\nThe held-out metrics above are the target's as trained. Its fine stage was then "
                   f"replaced by one that reads no previous frame (`{FINE_STAGE_FILE}`: its recipe, and its held-out "
                   "distance to the stage it replaced), so the fine slots of the shipped target score somewhat worse "
                   "than listed; the judges below heard the shipped one.\n")


def _phonemes(lm: CodecLM) -> bool:
    """Whether the target reads phonemes (else characters), as its training recorded."""
    return getattr(lm.config, INFO_KEY, {}).get("units", "").startswith("phonemes")


def ship_target(target: Path, dest: Path, title: str, command: str, evaluation: dict[str, Any] | None = None) -> CodecLM:
    """The exported target ``target`` saved as ``dest/target`` with its model card: its layout
    described from its config, the judges' table from ``evaluation`` (a ``voicespec evaluate`` report)."""
    lm = CodecLM.from_folder(str(target))
    lm.save(dest / "target")
    if (target / FINE_STAGE_FILE).is_file():  # the recipe of a fine stage swapped in after training
        shutil.copy(target / FINE_STAGE_FILE, dest / "target" / FINE_STAGE_FILE)
    c = lm.config
    unit = "phoneme" if _phonemes(lm) else "character"
    G = c.frames_per_step
    grouped = (f"in the grouped coarse-first layout, {G} frames a step: the backbone reads and predicts codebook 0 of "
               f"each step's first frame (one token per {20 * G} ms) and a fine stage (an MLP per slot, width {c.fine_width}) "
               f"adds the step's other {G * c.n_codebooks - 1} codes, slot by slot, from the backbone's hidden state and "
               "the codes before them")
    layout = (grouped if G > 1 else
              f"in the coarse-first layout: the backbone reads and predicts codebook 0 (one token per 20 ms frame) and "
              f"a fine stage (an MLP per codebook, width {c.fine_width}) adds codebooks 1..{c.n_codebooks - 1} of each "
              "verified frame from the backbone's hidden state, the frame's coarse code and the previous frame"
              ) if c.coarse_first else f"in the delay layout (delays {c.delays}: one step per 20 ms frame)"
    (dest / "target" / "MODEL_CARD.md").write_text(_lm_card(
        lm, title,
        f"A {lm.n_params() / 1e6:.1f} M-parameter Llama backbone ({c.num_hidden_layers} layers x {c.hidden_size}) "
        f"that speaks the codec's {c.n_codebooks} x {c.codebook_size} codes {layout}. Each step is conditioned on the "
        f"text ({unit}s) as a prefix and on a frame-aligned {unit} track ({c.track_positions} position buckets) from "
        "the duration predictor; the utterance ends exactly where the track does. `ce_wrong_text` is the held-out loss "
        "with another sentence's text: the gap to `ce` is what the text is worth to the model; `frame_nll` (nats per "
        "frame, all codebooks) compares layouts.", command) + (FINE_STAGE_NOTE if (target / FINE_STAGE_FILE).is_file() else "")
        + (judge_section(evaluation) if evaluation else ""))
    return lm


def ship_voice(target: Path, draft: Path, duration: Path, asr: Path, dest: Path, commands: dict[str, str],
               sampling: dict[str, Any], ngram: dict[str, int], info: dict[str, Any],
               default_drafter: str = DRAFT_NAME, codec_chunk_frames: int = 1, codec_chunk_max_frames: int | None = None,
               evaluation: dict[str, Any] | None = None) -> Path:
    """Copy the exported parts into ``dest`` (which already holds ``codec/``) and write
    ``voice.json`` and the cards; the result loads as a :class:`Voice`."""
    phonemes = _phonemes(ship_target(target, dest, "voicespec-tiny target (codec LM)", commands["lm"], evaluation))
    dm = CodecLM.from_folder(str(draft))
    dm.save(dest / "drafters" / DRAFT_NAME)
    (dest / "drafters" / DRAFT_NAME / "MODEL_CARD.md").write_text(_lm_card(
        dm, "voicespec-tiny draft model",
        f"The target's first {dm.config.num_hidden_layers} layer(s) with its embeddings, track and heads, distilled "
        "on the target's full output distributions (KL(p || q)). `acceptance_per_codebook` is 1 - TV(p, q) on "
        "held-out teacher-forced steps: the per-token acceptance speculative sampling gets at temperature 1.",
        commands["draft"]))
    timing = ("Phonemes → frames (50 Hz) per phoneme; trained on the teacher's own per-symbol durations (Piper's "
              "alignment) transferred onto gruut's phonemes (voicespec.train.phone_align). At run time it is the only "
              "source of timing; the phonemizer is gruut (MIT), nothing GPL." if phonemes else
              "Characters → frames (50 Hz) per character; trained on CTC forced alignments of the teacher corpus made "
              "with the shipped recognizer. At run time it is the only source of timing: no phonemizer, nothing GPL.")
    _ship_part(load_duration(duration), dest / "duration", "voicespec-tiny duration predictor", timing,
               commands["duration"])
    _ship_part(load_asr(asr), dest / "asr", "voicespec-tiny CTC recognizer",
               "A small character CTC recognizer (log-mel → convs → BiGRU), trained on the teacher corpus. Used for "
               "forced alignment (training durations) and for character error rates in `voicespec evaluate`. Not a "
               "general ASR: it has only heard one synthetic voice.", commands["asr"])
    tokenizer = PhonemeTokenizer() if phonemes else CharTokenizer()
    config = VoiceConfig(name=BASE_VOICE, tokenizer=tokenizer.to_dict(), sampling=sampling, ngram=ngram,
                         default_drafter=default_drafter, duration="duration", info=info,
                         codec_chunk_frames=codec_chunk_frames, codec_chunk_max_frames=codec_chunk_max_frames)
    Voice.write_config(dest, config)
    Voice.load(dest)  # the parts must fit together
    return dest


def run_ship(args: argparse.Namespace) -> int:
    dest = ship_voice(Path(args.target), Path(args.draft), Path(args.duration), Path(args.asr), Path(args.dest),
                      json.loads(args.commands), json.loads(args.sampling), json.loads(args.ngram), json.loads(args.info), args.default_drafter,
                      args.codec_chunk_frames, args.codec_chunk_max_frames,
                      json.loads(Path(args.evaluation).read_text()) if args.evaluation else None)
    print(f"shipped voice {dest}")
    return 0
