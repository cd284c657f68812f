"""Offline batch synthesis: thousands of lines to audio files, resumable, never a truncated file.

Every output file is written atomically (temporary file + rename). Each finished item, written
or failed, is appended to ``progress.jsonl`` at once, so a killed run loses at most the item in
flight, and ``--resume`` skips every id journalled as written whose file exists (failed ones are
tried again). A bad line is recorded and the run goes on.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from tqdm import tqdm

from voicespec.audio import write_audio_atomic
from voicespec.checks import is_int
from voicespec.options import SAMPLING_OPTIONS, check_speed, sampling_overrides
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ITEM_KEYS = {"id", "text", "voice", "seed", "speed", *(o.name for o in SAMPLING_OPTIONS)}
PROGRESS = "progress.jsonl"
SUMMARY = "summary.json"


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    index: int  # line number (1-based): the default seed offset, stable across resumes
    voice: str | None = None
    seed: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    speed: float | None = None  # None: the run's


@dataclass(frozen=True)
class BadLine:
    line: int
    error: str
    id: str | None = None  # when the line has a valid one: its options are what is wrong


def parse_line(line: str, index: int, jsonl: bool) -> Item | BadLine | None:
    """One input line; None for blank lines."""
    if not line.strip():
        return None
    if not jsonl:
        return Item(id=f"{index:06d}", text=line.strip(), index=index)
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        return BadLine(index, f"invalid JSON: {e.msg}")
    if not isinstance(obj, dict):
        return BadLine(index, "each JSONL line must be an object")
    unknown = set(obj) - ITEM_KEYS
    if unknown:
        return BadLine(index, f"unknown field(s): {', '.join(sorted(unknown))}")
    item_id, text = obj.get("id"), obj.get("text")
    if not isinstance(item_id, str) or not ID_RE.match(item_id):
        return BadLine(index, f"'id' must be a string of letters, digits, '.', '_' or '-' (got {item_id!r})")
    if not isinstance(text, str):
        return BadLine(index, "'text' must be a string")
    seed = obj.get("seed")
    if seed is not None and not is_int(seed):
        return BadLine(index, "'seed' must be an integer", item_id)
    voice = obj.get("voice")
    if voice is not None and not isinstance(voice, str):
        return BadLine(index, "'voice' must be a string (a voice name or folder)", item_id)
    try:
        sampling = sampling_overrides(obj)
        speed = None if obj.get("speed") is None else check_speed(obj["speed"])
    except ValueError as e:
        return BadLine(index, str(e), item_id)
    return Item(item_id, text, index, voice, seed, sampling, speed)


# Control bytes no text line holds (a tab may): a binary file's, or a corrupt one's.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _raw_lines(f: BinaryIO) -> Iterator[bytes]:
    """A file's lines as bytes, split as text mode splits them (universal newlines: LF, CRLF and
    CR end a line), so line numbers are those an editor shows."""
    for chunk in f:
        body = chunk[:-2] if chunk.endswith(b"\r\n") else chunk[:-1] if chunk.endswith(b"\n") else chunk
        yield from body.split(b"\r")


def text_line(raw: bytes, index: int) -> str | BadLine:
    """A line's text; a bad line if it is not UTF-8 or holds control bytes (NUL, ESC, ...): such a
    line is binary data or text in another encoding, and spoken it is babble (issue 39)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return BadLine(index, f"line is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})")
    m = _CONTROL.search(line)
    if m is not None:
        offset = len(line[:m.start()].encode())
        return BadLine(index, f"line holds a control character, not text (byte 0x{ord(m.group()):02x} at offset "
                              f"{offset})")
    return line


def read_items(path: Path) -> list[Item | BadLine]:
    """Every line's item, or its bad line (with why), in order; blank lines left out."""
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    out: list[Item | BadLine] = []
    seen: set[str] = set()
    with path.open("rb") as f:
        for index, raw in enumerate(_raw_lines(f), 1):
            line = text_line(raw, index)
            parsed = line if isinstance(line, BadLine) else parse_line(line, index, jsonl)
            if isinstance(parsed, Item):
                if parsed.id in seen:
                    parsed = BadLine(index, f"duplicate id {parsed.id!r}")
                else:
                    seen.add(parsed.id)
            if parsed is not None:
                out.append(parsed)
    return out


def _load_progress(path: Path) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(rec, dict) and isinstance(rec.get("id"), str):  # bad lines have none
                records[rec["id"]] = rec  # the last record of an id wins
    return records


def _done(previous: dict[str, dict[str, Any]], item_id: str, target: Path) -> bool:
    """Whether a resumed run may skip an item: journalled as written to this very file, which exists."""
    rec = previous.get(item_id)
    return rec is not None and rec.get("status") == "ok" and rec.get("file") == target.name and target.is_file()


@dataclass
class BatchConfig:
    out_dir: Path
    options: SynthesisOptions
    fmt: str = "wav"
    resume: bool = False
    progress_bar: bool | None = None  # None: when stderr is a terminal
    report_every: int = 100  # without a bar: one progress line on stderr per this many items (0: none)


def synthesizers(default: str | None, device: str = "cpu", dtype: str = "float32") -> Callable[[str | None], Synthesizer]:
    """``synthesizer_for(name)``: one loaded voice per name (None: ``default``), loaded on first use;
    its items may be of any length (a chapter on one line is spoken piece by piece: locally and on
    Ray alike, :class:`voicespec.api.LongTextSynthesizer`)."""
    from voicespec.api import LongTextSynthesizer
    from voicespec.pipeline.voice import load_voice

    voices: dict[str | None, Synthesizer] = {}

    def synthesizer_for(name: str | None) -> Synthesizer:
        key = name or default
        if key not in voices:
            voices[key] = LongTextSynthesizer(load_voice(key, device, dtype))
        return voices[key]

    return synthesizer_for


def open_journal(config: BatchConfig) -> dict[str, dict[str, Any]]:
    """Make the output folder; the journal of the run being resumed (or none: it is cleared)."""
    config.out_dir.mkdir(parents=True, exist_ok=True)
    journal_path = config.out_dir / PROGRESS
    if config.resume:
        return _load_progress(journal_path)
    journal_path.unlink(missing_ok=True)
    return {}


def settled(item: Item | BadLine, config: BatchConfig, previous: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The record of an item that needs no synthesis (a bad line: failed; done before, on --resume:
    skipped), or None: synthesize it (to :func:`target_of`)."""
    if isinstance(item, BadLine):
        named = {"id": item.id} if item.id is not None else {}
        return {**named, "line": item.line, "status": "failed", "error": item.error}
    if config.resume and _done(previous, item.id, target_of(item, config)):
        return dict(previous[item.id], status="skipped")
    return None


def target_of(item: Item, config: BatchConfig) -> Path:
    return config.out_dir / f"{item.id}.{config.fmt}"


def finish(records: list[dict[str, Any]], config: BatchConfig, wall_s: float) -> dict[str, Any]:
    """Write and return the summary, records in input order."""
    summary = _summarize(sorted(records, key=lambda r: r["line"]), wall_s)
    (config.out_dir / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def run_batch(
    items: list[Item | BadLine], config: BatchConfig, synthesizer_for: Callable[[str | None], Synthesizer]
) -> dict[str, Any]:
    """Synthesize every item; return (and write) the summary."""
    out = config.out_dir
    previous = open_journal(config)
    journal_path = out / PROGRESS
    records: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    bar_on = sys.stderr.isatty() if config.progress_bar is None else config.progress_bar
    with journal_path.open("a") as journal, tqdm(items, unit="utt", disable=not bar_on) as bar:
        failed = 0
        for n, item in enumerate(bar, 1):
            rec = _run_item(item, out, config, previous, synthesizer_for)
            records.append(rec)
            failed += rec["status"] == "failed"
            if rec["status"] != "skipped":  # journalled at once, failures too: a resume retries those
                journal.write(json.dumps(rec) + "\n")
                journal.flush()
            if not bar_on and config.report_every and n % config.report_every == 0 and n < len(items):
                print(f"synth: {n}/{len(items)} items, {failed} failed", file=sys.stderr, flush=True)
    return finish(records, config, time.perf_counter() - t_start)


def _run_item(item: Item | BadLine, out: Path, config: BatchConfig, previous: dict[str, dict[str, Any]],
              synthesizer_for) -> dict[str, Any]:
    """One input line's record: failed (a bad line), skipped (done before, on --resume) or synthesized."""
    rec = settled(item, config, previous)
    return rec if rec is not None else synthesize_item(item, target_of(item, config), config.options, synthesizer_for)


def synthesize_item(item: Item, target: Path, base: SynthesisOptions, synthesizer_for) -> dict[str, Any]:
    """Synthesize one item to ``target`` (atomically); its journal record, ``failed`` with the
    reason if it could not be made. Seeded by its line: the same file whoever runs it."""
    rec: dict[str, Any] = {"id": item.id, "line": item.index}
    t0 = time.perf_counter()
    try:
        synth = synthesizer_for(item.voice)
        sampling = replace(base.decode.sampling, **item.sampling) if item.sampling else base.decode.sampling
        seed = item.seed if item.seed is not None else (base.decode.seed or 0) + item.index
        speed = base.speed if item.speed is None else item.speed
        options = replace(base, decode=replace(base.decode, sampling=sampling, seed=seed), speed=speed)
        pcm, stats = synth.synthesize(item.text, options)
        write_audio_atomic(target, pcm, stats.sample_rate)
    except (ValueError, TypeError, FileNotFoundError, OSError, RuntimeError) as e:
        rec.update(status="failed", error=str(e), wall_s=time.perf_counter() - t0)
        return rec
    d = stats.decode
    rec.update(
        status="ok", file=target.name, seed=seed, audio_s=round(stats.audio_s, 4), wall_s=round(stats.wall_s, 4),
        rtf=round(stats.rtf, 4), acceptance_rate=round(d.acceptance_rate, 4),
        mean_accepted_length=round(d.mean_accepted_length, 4), sentences=stats.sentences,
    )
    return rec


def _summarize(records: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    done = [r for r in records if r.get("status") == "ok"]
    audio = sum(r["audio_s"] for r in done)
    busy = sum(r["wall_s"] for r in done)
    return {
        "items": len(records),
        "ok": len(done),
        "skipped": sum(r.get("status") == "skipped" for r in records),
        "failed": sum(r.get("status") == "failed" for r in records),
        "audio_s": round(audio, 3),
        "wall_s": round(wall_s, 3),
        "rtf": round(busy / audio, 4) if audio else None,
        "failures": [r for r in records if r.get("status") == "failed"],
        "records": records,
    }


def failure_lines(summary: dict[str, Any], summary_path: Path | str, limit: int = 20) -> list[str]:
    """The failed items, one line each (id or line number, and why), for the screen: at most
    ``limit`` of them, then a pointer to the summary that lists them all; no lines if none failed."""
    failures = summary["failures"]
    if not failures:
        return []
    lines = [f"{len(failures)} failed:"]
    for rec in failures[:limit]:
        where = f"{rec['id']} (line {rec['line']})" if "id" in rec else f"line {rec['line']}"
        lines.append(f"  {where}: {rec.get('error', 'unknown error')}")
    if len(failures) > limit:
        lines.append(f"  ... and {len(failures) - limit} more (see {summary_path})")
    return lines
