"""`voicespec evaluate` and the sample writer end to end on a tiny aligned voice and recognizer."""

from __future__ import annotations

import json

import pytest
import soundfile as sf

from voicespec.cli import main
from voicespec.eval.judge import corpus_error_rates
from voicespec.pipeline.tiny import build_tiny_voice
from voicespec.eval.recognizer import CtcAsr
from voicespec.pipeline.voice import Voice
from voicespec.eval.voice_eval import write_voice_samples


@pytest.mark.slow
def test_evaluate_reports_every_figure_and_exactness(tmp_path, capsys, speech_corpus, tiny_asr_config):
    speech_corpus(tmp_path / "data")
    CtcAsr(tiny_asr_config).save(tmp_path / "asr")
    voice = build_tiny_voice(tmp_path / "voice", layout="aligned")
    out = tmp_path / "report.json"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello.\n\nOne more.\n")
    assert main(["evaluate", "--voice", str(voice), "--asr", str(tmp_path / "asr"), "--data", str(tmp_path / "data"),
                 "--n", "1", "--unseen", "1", "--drafter", "draft-model", "--out", str(out),
                 "--samples", str(tmp_path / "s"), "--prompts", str(prompts), "--lossy-top-k", "3", "--seeds", "2"]) == 0
    report = json.loads(out.read_text())
    assert report["judges"]["pocketsphinx"].startswith("pocketsphinx") and set(report["judges"]) == {
        "pocketsphinx", "whisper", "dnsmos"}
    assert report["seeds"] == [0, 1] and report["heldout"]["seeds"] == [0, 1]
    assert "LOSSY top-3" in report["lossy"]
    for key, seeds in (("sampled_lossy", 2), ("greedy_lossy", 1)):  # judged beside the exact rows, with their MCD and RTF
        r = report["heldout"][key]
        assert len(r["examples"]) == seeds and r["mcd_dtw_db"] > 0 and r["rtf_median"] > 0
    for section in ("heldout", "unseen_words"):
        r = report[section]
        for key in ("teacher", "resynth", "greedy_plain"):
            # one utterance: the examples are every judged sentence, and the figures are theirs
            for prefix in ("", "whisper_"):
                pairs = [(e["ref"], e["hyp"]) for e in r[key][f"{prefix}examples"]]
                assert len(pairs) == 1 and pairs[0][0]
                assert r[key][f"{prefix}wer"] == round(corpus_error_rates(pairs)["wer"], 4)
                assert r[key][f"{prefix}cer"] == round(corpus_error_rates(pairs)["cer"], 4)
            assert r[key]["inrepo_cer"] > 0.5  # the in-repo recognizer is untrained: it gets most characters wrong
            assert 1 <= r[key]["dnsmos_ovrl"] <= 5 and "per_seed" not in r[key]
            low, high = r[key]["ci95"]["dnsmos_ovrl"]
            assert low == high == r[key]["dnsmos_ovrl"]  # one sentence: every bootstrap draw is that sentence
        for key in ("sampled_plain", "sampled_spec"):  # two seeds: pooled, and each seed's own figures
            seeds = r[key]["per_seed"]
            assert set(seeds) == {"0", "1"} and len(r[key]["examples"]) == 2
            assert r[key]["dnsmos_ovrl"] == pytest.approx((seeds["0"]["dnsmos_ovrl"] + seeds["1"]["dnsmos_ovrl"]) / 2, abs=1e-3)
            assert min(s["wer"] for s in seeds.values()) - 1e-3 <= r[key]["wer"] <= max(s["wer"] for s in seeds.values()) + 1e-3
        assert r["sampled_spec"]["mcd_dtw_db"] > 0 and r["sampled_plain"]["rtf_median"] > 0
        assert r["greedy_spec_equals_plain"] is True and r["utterances"] == 1
        # the invariant coupling: the speculative row is the plain row's audio, judged once
        assert r["sampled_spec_equals_plain"] is True and r["sampled_mismatches"] == 0
        figures = [k for k in r["sampled_plain"] if k.startswith(("wer", "cer", "whisper_", "dnsmos_", "closed_"))]
        assert len(figures) >= 6 and all(r["sampled_spec"][k] == r["sampled_plain"][k] for k in figures)
        assert r["clips"]["in_rows"] == 3 + 2 * 3 + 1 and r["clips"]["judged"] <= r["clips"]["in_rows"] - 2
    # the teacher speaks the unseen-word sentence: the judge hears more of it than of the random
    # codec's resynthesis (WER can exceed 1 on word salad: its language model inserts words)
    unseen = report["unseen_words"]
    assert all("closed_wer" in unseen[k] and "closed_cer" in unseen[k] for k in ("teacher", "resynth", "sampled_plain"))
    # the closed-set judge (the sentence's own words) hears the teacher's rare words; not the random codec's
    assert unseen["teacher"]["closed_wer"] < min(0.5, unseen["teacher"]["wer"], unseen["resynth"]["closed_wer"])
    assert "closed_wer" not in report["heldout"]["teacher"]
    assert unseen["teacher"]["cer"] < 0.95 and unseen["teacher"]["cer"] < unseen["resynth"]["cer"]
    printed = capsys.readouterr().out
    assert printed.count("greedy speculative == plain on every sentence: True") == 2
    assert printed.count("sampled speculative == plain for every sentence and seed (invariant coupling): True") == 2
    assert "| row | PocketSphinx WER | Whisper WER | DNSMOS OVRL | SIG | P.808 |" in printed
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["voice-00.wav", "voice-01.wav", "voice-mels.png"]


@pytest.mark.slow
def test_samples_are_written_with_a_mel_comparison(tmp_path, speech_corpus):
    speech_corpus(tmp_path / "data")
    voice = Voice.load(build_tiny_voice(tmp_path / "voice", layout="aligned"))
    paths = write_voice_samples(voice, ["Hello.", "Two words."], tmp_path / "data", tmp_path / "samples")
    wavs = [p for p in paths if p.suffix == ".wav"]
    assert len(wavs) == 2 and (tmp_path / "samples" / "voice-mels.png").stat().st_size > 1000
    for w in wavs:
        audio, sr = sf.read(str(w))
        assert sr == voice.codec.sample_rate and len(audio) > 0


def test_speculative_rows_speculate_even_when_the_voice_decodes_plainly():
    from dataclasses import replace

    from voicespec.pipeline.voice import Voice, load_voice
    from voicespec.eval.voice_eval import speculative_default

    voice = load_voice(None)
    assert voice.config.default_drafter == "feature"  # measured faster on 2 CPU cores (README)
    assert speculative_default(voice) == "feature"
    plain = Voice(replace(voice.config, default_drafter="none"), voice.codec, voice.target, voice.draft_dirs, voice.duration)
    assert speculative_default(plain) == sorted(voice.draft_dirs)[0]  # the first shipped drafter


@pytest.mark.slow
def test_evaluate_judges_a_voice_through_another_codec_and_checks_its_judges(tmp_path, speech_corpus, capsys):
    """`--codec`: a decoder retrained on the same frozen codes is judged on the voice's own tokens."""
    from voicespec.codec.model import Codec

    speech_corpus(tmp_path / "data")
    voice = build_tiny_voice(tmp_path / "voice", layout="aligned")
    other = Codec.random(Codec.from_folder(voice / "codec").config, seed=5)
    other.save(tmp_path / "other")
    base = ["evaluate", "--voice", str(voice), "--data", str(tmp_path / "data"), "--n", "1", "--unseen", "0",
            "--seeds", "1", "--judges", "dnsmos"]
    reports = []
    for extra in ([], ["--codec", str(tmp_path / "other")]):
        assert main([*base, *extra, "--out", str(tmp_path / "r.json")]) == 0
        reports.append(json.loads((tmp_path / "r.json").read_text()))
    assert all(set(r["judges"]) == {"dnsmos"} and "wer" not in r["heldout"]["teacher"] for r in reports)
    assert reports[0]["heldout"]["teacher"]["dnsmos_ovrl"] == reports[1]["heldout"]["teacher"]["dnsmos_ovrl"]
    assert reports[0]["heldout"]["resynth"]["dnsmos_ovrl"] != reports[1]["heldout"]["resynth"]["dnsmos_ovrl"]
    capsys.readouterr()
    assert main([*base[:-1], "whisper,mos", "--out", str(tmp_path / "r.json")]) == 2
    assert "judges must be a comma-separated subset of pocketsphinx,whisper,dnsmos" in capsys.readouterr().err


def test_a_clip_is_judged_once_per_judge_and_measured_once_per_teacher_clip():
    """``Heard``: the same samples at the same rate reach a judge once, whichever row holds
    them; MCD-DTW through one partial per sentence reaches each (teacher, clip) pair once, and a
    clip equal to another sentence's is measured again against its own teacher."""
    import functools

    import torch

    from voicespec.eval.voice_eval import Heard

    calls: list[tuple] = []

    def judge(pcm, rate):
        calls.append(("judge", float(pcm.sum()), rate))
        return float(pcm.sum())

    def distance(teacher, pcm, rate):
        calls.append(("distance", float(teacher.sum()), float(pcm.sum())))
        return float((teacher - pcm).abs().sum())

    heard, clip, other = Heard(), torch.ones(8), torch.zeros(8)
    assert [heard(judge, clip, 16000), heard(judge, clip.clone(), 16000), heard(judge, other, 16000)] == [8.0, 8.0, 0.0]
    assert heard(judge, clip, 8000) == 8.0 and len(calls) == 3  # another rate is another clip
    first, second = (functools.partial(distance, t) for t in (torch.zeros(8), torch.full((8,), 2.0)))
    assert [heard(first, clip, 16000), heard(first, clip.clone(), 16000), heard(second, clip, 16000)] == [8.0, 8.0, 8.0]
    assert [c[0] for c in calls].count("distance") == 2 and heard.clips == 3
