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
                 "--samples", str(tmp_path / "s"), "--prompts", str(prompts), "--lossy-top-k", "3"]) == 0
    report = json.loads(out.read_text())
    assert report["judge"].startswith("pocketsphinx")
    assert "LOSSY top-3" in report["lossy"]
    for key in ("sampled_lossy", "greedy_lossy"):  # judged beside the exact rows, with their MCD and RTF
        r = report["heldout"][key]
        assert len(r["examples"]) == 1 and r["mcd_dtw_db"] > 0 and r["rtf_median"] > 0
    for section in ("heldout", "unseen_words"):
        r = report[section]
        for key in ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain"):
            # one utterance: the examples are every judged sentence, and the figures are theirs
            pairs = [(e["ref"], e["hyp"]) for e in r[key]["examples"]]
            assert len(pairs) == 1 and pairs[0][0]
            assert r[key]["wer"] == round(corpus_error_rates(pairs)["wer"], 4)
            assert r[key]["cer"] == round(corpus_error_rates(pairs)["cer"], 4)
            assert r[key]["inrepo_cer"] > 0.5  # the in-repo recognizer is untrained: it gets most characters wrong
        assert r["sampled_spec"]["mcd_dtw_db"] > 0 and r["sampled_plain"]["rtf_median"] > 0
        assert r["greedy_spec_equals_plain"] is True and r["utterances"] == 1
    # the teacher speaks the unseen-word sentence: the judge hears more of it than of the random
    # codec's resynthesis (WER can exceed 1 on word salad: its language model inserts words)
    unseen = report["unseen_words"]
    assert all("closed_wer" in unseen[k] and "closed_cer" in unseen[k] for k in ("teacher", "resynth", "sampled_plain"))
    # the closed-set judge (the sentence's own words) hears the teacher's rare words; not the random codec's
    assert unseen["teacher"]["closed_wer"] < min(0.5, unseen["teacher"]["wer"], unseen["resynth"]["closed_wer"])
    assert "closed_wer" not in report["heldout"]["teacher"]
    assert unseen["teacher"]["cer"] < 0.95 and unseen["teacher"]["cer"] < unseen["resynth"]["cer"]
    assert capsys.readouterr().out.count("greedy speculative == plain on every sentence: True") == 2
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["voice-00.wav", "voice-01.wav", "voice-mels.png"]


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
