"""Honest quality numbers for a voice: ``voicespec evaluate``.

Two sentence sets: *held-out* teacher sentences (texts the LM never trained on) and *unseen-word*
sentences made only of words that never occur in training (the training side makes and speaks
them: :func:`voicespec.train.data.spoken_unseen_clips`; the command line hands both sets in).
For each, three judges nobody here trained score (a) the teacher audio, (b) its codec resynthesis
and (c) the voice's own speech, decoded with speculation off and on and greedily (and, with
``--lossy-top-k``, speculatively under the LOSSY top-k acceptance rule, so its quality cost sits
beside the exact rows): PocketSphinx (:mod:`voicespec.eval.judge`) and Whisper tiny.en
(:mod:`voicespec.eval.whisper`) by corpus-level word and character error rates, DNSMOS
(:mod:`voicespec.eval.dnsmos`) by predicted opinion scores. Sampled rows are decoded with several
seeds (one sampled run on 25 sentences moves WER by about 0.05) and pooled; every figure carries a
95 % bootstrap interval over sentences (:mod:`voicespec.eval.bootstrap`).
Given ``--asr``, the in-repo CTC recognizer's CER is reported too (a kinder judge: it was trained on
the teacher). MCD-DTW compares generated and resynthesized speech with the teacher's. Greedy
decoding must give the same frames with and without speculation (checked per sentence), and so must
sampled decoding under the invariant coupling (the default: a seed's tokens do not depend on the
drafter; checked per sentence and seed); under the residual coupling the speculative row is another
draw of the same distribution, and its figures should agree within noise. Each judge hears each
distinct clip once (:class:`Heard`): an exact speculative row is the plain row's audio sample for
sample, so a default evaluation judges a third fewer clips.
"""

from __future__ import annotations

import functools
import hashlib
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch
import torchaudio.functional as AF
import torchaudio.transforms as T

from voicespec.audio import write_audio_atomic
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.eval.clips import heldout_clips
from voicespec.eval.bootstrap import ratio_interval
from voicespec.eval.dnsmos import DNSMOS_KEYS, dnsmos
from voicespec.eval.judge import PocketSphinxJudge, default_judge, score
from voicespec.eval.whisper import WhisperJudge, whisper_judge
from voicespec.eval.quality import cer_report, mcd_dtw
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.pipeline.voice import Voice

ROWS = ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain")


def _generate(synth: Synthesizer, text: str, decode: DecodeConfig, drafter: str) -> tuple[torch.Tensor, Any]:
    stream = synth.stream(text, SynthesisOptions(decode, drafter=drafter))
    chunks = [c.pcm for c in stream]
    return (torch.cat(chunks) if chunks else torch.zeros(0)), stream


def speculative_default(voice: Voice) -> str:
    """The drafter the speculative rows use: the voice's default if it drafts at all, else its
    first shipped drafter, else n-gram (a voice that decodes plainly by default still gets
    its speculation and exactness measured)."""
    if voice.config.default_drafter != "none":
        return voice.config.default_drafter
    models = sorted(voice.draft_dirs)
    return models[0] if models else "ngram"


JUDGES = ("pocketsphinx", "whisper", "dnsmos")
Item = tuple[int, "int | None", str, torch.Tensor, int]  # (sentence, seed or None, text, pcm, rate)


class Heard:
    """What each judge made of each distinct clip of one evaluation, so that a clip two rows share
    (an exact speculative row's audio is its plain row's) is judged once. Safe because every judge
    is a function of the clip alone: Whisper decodes at temperature 0, PocketSphinx normalizes each
    utterance on its own (``full_utt``), DNSMOS has no state; MCD-DTW against a sentence's teacher
    clip is heard through one ``functools.partial`` per sentence, so it is keyed by that clip too."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Callable, int, bytes], Any] = {}  # (judge's call, rate, clip digest) -> its judgement

    def __call__(self, hear: Callable[[torch.Tensor, int], Any], pcm: torch.Tensor, rate: int) -> Any:
        """``hear(pcm, rate)``, or what it said of the same samples before."""
        key = (hear, rate, hashlib.blake2b(pcm.detach().contiguous().numpy().tobytes(), digest_size=16).digest())
        if key not in self._seen:
            self._seen[key] = hear(pcm, rate)
        return self._seen[key]

    @property
    def clips(self) -> int:
        """How many distinct clips were judged."""
        return len({(rate, digest) for _, rate, digest in self._seen})


def _transcripts(judge: Any, items: list[Item], prefix: str, heard: Heard) -> tuple[dict[str, list], dict[str, Any]]:
    """Per-item (numerators, denominators) of a recognizer's WER and CER, and its examples."""
    hyps = [heard(judge.transcribe, pcm, rate) for *_, pcm, rate in items]
    scores = score(zip((text for _, _, text, _, _ in items), hyps), judge.normalize)
    parts = {f"{prefix}wer": [(it["word_errors"], it["words"]) for it in scores.items],
             f"{prefix}cer": [(it["char_errors"], it["chars"]) for it in scores.items]}
    return parts, {f"{prefix}examples": scores.items[:3]}


def judge_row(items: list[Item], judges: Sequence[str], closed_judge: Any = None,
              heard: Heard | None = None) -> dict[str, Any]:
    """Every judge's figures of one row: pooled over sentences and seeds, each with a 95 %
    bootstrap interval over sentences (``ci95``) and, for a row of several seeds, per seed.
    ``heard``: the evaluation's judgements so far (a clip judged before is not judged again)."""
    heard = Heard() if heard is None else heard
    parts: dict[str, list[tuple[float, float]]] = {}
    row: dict[str, Any] = {}
    recognizers = {"pocketsphinx": (default_judge, ""), "whisper": (whisper_judge, "whisper_")}
    for name in judges:
        if name in recognizers:
            make, prefix = recognizers[name]
            p, examples = _transcripts(make(), items, prefix, heard)
            parts.update(p)
            row.update(examples)
        elif name == "dnsmos":
            scores = [heard(dnsmos, pcm, rate) for *_, pcm, rate in items]
            parts.update({f"dnsmos_{k}": [(m[k], 1.0) for m in scores] for k in DNSMOS_KEYS})
        else:
            raise ValueError(f"unknown judge {name!r}; choose from {', '.join(JUDGES)}")
    if closed_judge is not None:
        p, _ = _transcripts(closed_judge, items, "closed_", heard)
        parts.update(p)
    sentences = [it[0] for it in items]
    row["ci95"] = {}
    for key, pairs in parts.items():
        value, low, high = ratio_interval([a for a, _ in pairs], [b for _, b in pairs], sentences)
        row[key] = round(value, 4)
        row["ci95"][key] = [round(low, 4), round(high, 4)]
    seeds = sorted({it[1] for it in items if it[1] is not None})
    if len(seeds) > 1:
        row["per_seed"] = {
            str(seed): {key: round(sum(a for (a, _), it in zip(pairs, items) if it[1] == seed)
                                   / max(sum(b for (_, b), it in zip(pairs, items) if it[1] == seed), 1e-12), 4)
                        for key, pairs in parts.items()}
            for seed in seeds}
    return row


def evaluate_set(voice: Voice, clips: list, drafter: str, seeds: Sequence[int], asr: Any = None, log=print,
                 closed: bool = False, lossy_top_k: int = 0, judges: Sequence[str] = JUDGES) -> dict[str, Any]:
    """Every row of one sentence set, judged by ``judges`` (and by ``asr`` when given); with
    ``closed`` also by a closed-set PocketSphinx over the set's own words (``closed_wer``/``closed_cer``);
    with ``lossy_top_k`` also the rows ``sampled_lossy`` and ``greedy_lossy`` (speculative, LOSSY
    acceptance: the rule pays in greedy decoding, where a top-k draft often is not the argmax).
    The sampled rows are decoded once per seed of ``seeds`` (sentence ``i`` with ``seed + 100 i``)
    and pooled; teacher, resynthesis and greedy rows once. Greedy speculation must give plain
    decoding's frames on every sentence (``greedy_spec_equals_plain``), and so must sampled
    speculation for every seed under the invariant coupling (``sampled_spec_equals_plain``; None
    under the residual one, where it is another draw)."""
    synth = Synthesizer(voice)
    rate = voice.codec.sample_rate
    sampled = DecodeConfig(voice.sampled, gamma="auto")  # how it samples, whatever it does by default
    greedy = DecodeConfig(SamplingConfig(temperature=0), gamma="auto", seed=seeds[0])
    generated = [("sampled_plain", 0, "none", 0, sampled), ("sampled_spec", None, drafter, 0, sampled)]
    if lossy_top_k:
        generated += [("sampled_lossy", None, drafter, lossy_top_k, sampled), ("greedy_lossy", None, drafter, lossy_top_k, greedy)]
    rows: dict[str, list[Item]] = {k: [] for k in (*ROWS, *(g[0] for g in generated))}
    mcd: dict[str, list[float]] = {"resynth": [], **{g[0]: [] for g in generated}}
    rtf: dict[str, list[float]] = {"greedy_plain": [], **{g[0]: [] for g in generated}}
    greedy_mismatches = sampled_mismatches = 0
    invariant = sampled.sampling.coupling == "invariant"
    heard = Heard()  # MCD-DTW included: an exact speculative row's audio is measured once
    for i, (clip_id, text, audio, sr) in enumerate(clips):
        frames: dict[tuple[str, int], list[torch.Tensor]] = {}  # (row, seed) -> the sentence's frames
        x = AF.resample(audio, sr, rate) if sr != rate else audio
        y = voice.codec.decode(voice.codec.encode(x))[: x.shape[0]]
        rows["teacher"].append((i, None, text, x, rate))
        rows["resynth"].append((i, None, text, y, rate))
        against_teacher = functools.partial(mcd_dtw, x)  # one call per sentence: Heard's key
        mcd["resynth"].append(heard(against_teacher, y, rate))
        for key, gamma, name, lossy, base in generated:
            for seed in (seeds[:1] if base is greedy else seeds):
                config = replace(base, seed=seed + 100 * i, sampling=replace(base.sampling, lossy_top_k=lossy))
                pcm, stream = _generate(synth, text, config if gamma is None else replace(config, gamma=gamma), name)
                rows[key].append((i, None if base is greedy else seed, text, pcm, rate))
                mcd[key].append(heard(against_teacher, pcm, rate))
                rtf[key].append(stream.stats.rtf)
                frames[key, seed] = stream.frames
        sampled_same = [_same(frames["sampled_plain", s], frames["sampled_spec", s]) for s in seeds]
        sampled_mismatches += invariant and not all(sampled_same)
        plain_pcm, plain = _generate(synth, text, replace(greedy, gamma=0), "none")
        _, spec = _generate(synth, text, greedy, drafter)
        same = _same(plain.frames, spec.frames)
        greedy_mismatches += not same
        rows["greedy_plain"].append((i, None, text, plain_pcm, rate))
        rtf["greedy_plain"].append(plain.stats.rtf)
        sampled_note = f", sampled (seeds {list(seeds)}): {all(sampled_same)}" if invariant else ""
        log(f"{clip_id}: {text[:50]!r} speculative == plain: greedy {same}{sampled_note}")
    closed_judge = PocketSphinxJudge(vocabulary=[text for _, text, _, _ in clips]) if closed else None
    report: dict[str, Any] = {"utterances": len(clips), "seeds": list(seeds)}
    for key, items in rows.items():
        report[key] = judge_row(items, judges, closed_judge, heard)
        if asr is not None:
            report[key]["inrepo_cer"] = round(cer_report(asr, [(t, p, r) for _, _, t, p, r in items])["cer"], 4)
        if key in mcd:
            report[key]["mcd_dtw_db"] = round(statistics.median(mcd[key]), 2)
        if key in rtf:
            report[key]["rtf_median"] = round(statistics.median(rtf[key]), 3)
        log(f"judged {key}")
    report["greedy_spec_equals_plain"] = greedy_mismatches == 0
    report["greedy_mismatches"] = greedy_mismatches
    report["sampled_spec_equals_plain"] = sampled_mismatches == 0 if invariant else None
    report["sampled_mismatches"] = sampled_mismatches if invariant else None
    report["clips"] = {"in_rows": sum(map(len, rows.values())), "judged": heard.clips}  # each distinct clip judged once
    if "wer" in report["resynth"]:
        report["wer_gap_generated_vs_resynth"] = round(report["sampled_plain"]["wer"] - report["resynth"]["wer"], 4)
    return report


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Two decodes gave the same frames."""
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def evaluate_voice(voice: Voice, heldout: list, unseen: list, drafter: str | None = None,
                   seeds: Sequence[int] = (0, 1, 2), asr_dir: Path | None = None, log=print, lossy_top_k: int = 0,
                   judges: Sequence[str] = JUDGES) -> dict[str, Any]:
    """The report of ``voicespec evaluate``: one section per sentence set. Each set is a list of
    ``(id, text, teacher audio [S], rate)``; ``unseen`` may be empty (no such section)."""
    asr = None
    if asr_dir is not None:
        from voicespec.eval.recognizer import load_asr

        asr = load_asr(asr_dir)
    drafter = drafter or speculative_default(voice)
    names = {"pocketsphinx": PocketSphinxJudge.name, "whisper": WhisperJudge.name,
             "dnsmos": "DNSMOS P.835 + P.808 (speechmos ONNX models)"}
    report: dict[str, Any] = {"voice": voice.name, "codec": voice.codec.config.extra.get("training", {}).get("recipe"),
                              "drafter": drafter, "sampling": voice.config.sampling,
                              "decoding": voice.config.decoding, "seeds": list(seeds),
                              "judges": {j: names[j] for j in judges},
                              "interval": "ci95: percentile bootstrap over sentences (seeds kept together), 2000 draws"}
    if lossy_top_k:
        report["lossy"] = f"sampled_lossy: LOSSY top-{lossy_top_k} acceptance (not the target's distribution)"
    report["heldout"] = evaluate_set(voice, heldout, drafter, seeds, asr, log, lossy_top_k=lossy_top_k, judges=judges)
    if unseen:
        report["unseen_words"] = evaluate_set(voice, unseen, drafter, seeds, asr, log, closed=True,
                                              lossy_top_k=lossy_top_k, judges=judges)
    return report


def write_voice_samples(voice: Voice, prompts: list[str], data_dir: Path | None, out_dir: Path,
                        seed: int = 0) -> list[Path]:
    """``voice-NN.wav`` for each prompt with the voice's default settings, and (given a teacher
    corpus) ``voice-mels.png``: teacher vs codec vs generated mel spectrograms of one held-out
    sentence."""
    out_dir.mkdir(parents=True, exist_ok=True)
    synth = Synthesizer(voice)
    written = []
    for i, text in enumerate(prompts):
        decode = DecodeConfig(voice.sampling, seed=seed + i)
        pcm, _ = _generate(synth, text, decode, voice.config.default_drafter)
        path = out_dir / f"voice-{i:02d}.wav"
        write_audio_atomic(path, pcm, voice.codec.sample_rate)
        written.append(path)
    if data_dir is not None:
        written.append(_mel_figure(voice, synth, data_dir, out_dir / "voice-mels.png", seed))
    return written


def _mel_figure(voice: Voice, synth: Synthesizer, data_dir: Path, png: Path, seed: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (clip_id, text, audio, sr), = heldout_clips(data_dir, 1)
    rate = voice.codec.sample_rate
    x = AF.resample(audio, sr, rate) if sr != rate else audio
    y = voice.codec.decode(voice.codec.encode(x))[: x.shape[0]]
    g, _ = _generate(synth, text, DecodeConfig(voice.sampling, seed=seed), voice.config.default_drafter)
    mel = T.MelSpectrogram(rate, n_fft=1024, hop_length=256, n_mels=80)
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.5))
    for ax, (sig, name) in zip(axes, ((x, "teacher (Piper)"), (y, "codec resynthesis"), (g, "generated (codec LM)"))):
        ax.imshow(torch.log(mel(sig) + 1e-5).numpy(), origin="lower", aspect="auto", cmap="magma")
        ax.set_title(f"{name} — held-out {clip_id}: {text[:70]}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return png
