"""The codec LM and draft recipes end to end on tiny settings: prepare, train, resume, export, load.
Every run is bounded by ``max_steps`` (``minutes`` is far beyond what those steps take)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from voicespec.codec.model import Codec
from voicespec.lm.codec_lm import CodecLM
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.frontend.duration import frame_track
from voicespec.engine.drafters import ModelDrafter
from voicespec.lm.loading import load_step_lm
from voicespec.pipeline.tiny import TINY_CODEC, tiny_codec_lm
from voicespec.eval.recognizer import AsrConfig, CtcAsr
from voicespec.train.configs import DurationTrainConfig
from voicespec.train.duration import read_items, train_duration
from voicespec.pipeline.synthesis import Synthesizer
from voicespec.train import lm as lm_recipe
from voicespec.train.configs import LMTrainConfig
from voicespec.train.lm import default_target_config, prepare, train_draft, train_target
from voicespec.train.ship import judge_section, ship_voice
from voicespec.pipeline.drafters import early_exit_names
from voicespec.pipeline.voice import Voice

QUIET = dict(log=lambda s: None)


def _setup(tmp_path, speech_corpus):
    speech_corpus(tmp_path / "data")
    codec = Codec.random(TINY_CODEC, seed=0)
    codec.save(tmp_path / "codec")
    asr = CtcAsr(AsrConfig(sample_rate=codec.sample_rate, hop_length=codec.hop_length, n_fft=2 * codec.hop_length,
                           conv_channels=8, conv_layers=1, hidden=8, layers=1))
    asr.save(tmp_path / "asr")
    model_config = default_target_config(codec, asr.tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)
    config = LMTrainConfig(minutes=5.0, max_steps=3, batch_steps=120, warmup_steps=2, eval_every_steps=2,
                           log_every_steps=1, checkpoint_every_s=0.2)
    return codec, model_config, config


@pytest.mark.slow
def test_target_and_draft_recipes_run_resume_export_and_decode(tmp_path, speech_corpus):
    codec, model_config, config = _setup(tmp_path, speech_corpus)
    run = tmp_path / "run"
    folder = train_target(tmp_path / "data", tmp_path / "codec", tmp_path / "asr", run, config, model_config, **QUIET)

    items = [json.loads(line) for line in (run / "durations.jsonl").read_text().splitlines()]
    prepared = torch.load(run / "prepared.pt", weights_only=False)["examples"]
    assert len(items) == len(prepared) == 6 and {i["split"] for i in items} == {"train", "heldout"}
    for item, ex in zip(items, prepared):
        assert len(item["durations"]) == len(item["ids"]) and sum(item["durations"]) == ex["codes"].shape[1]

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "text_gain_nats" in r.get("heldout", {})] == [2]
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 3
    logs: list[str] = []
    train_target(tmp_path / "data", tmp_path / "codec", tmp_path / "asr", run, replace(config, max_steps=5),
                 log=logs.append)
    assert any(line.startswith("resumed at step 3 ") for line in logs)  # resumed, not restarted
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 5

    target = load_step_lm(str(folder))
    info = target.model.config.voicespec_info
    assert info["recipe"] == "voicespec train lm" and "ce_wrong_text" in info["heldout_metrics"]
    assert info["steps"] == 5  # the resumed run re-exported the target
    assert target.model.aligned

    draft_folder = train_draft(run, folder, tmp_path / "draft", 1, config, **QUIET)
    draft = CodecLM.from_folder(str(draft_folder))
    assert draft.config.num_hidden_layers == 1 and draft.config.voicespec_info["steps"] == 3
    assert "acceptance_per_codebook" in draft.config.voicespec_info["heldout_metrics"]

    track = frame_track(items[0]["ids"], items[0]["durations"], model_config.track_positions)
    prompt = target.layout.prompt(items[0]["ids"], track=track)
    greedy = SamplingConfig(temperature=0)
    plain = SpecDecoder(target, None, DecodeConfig(greedy, gamma=0, max_steps=200)).generate(prompt).run()
    spec = SpecDecoder(target, ModelDrafter(load_step_lm(str(draft_folder))), DecodeConfig(greedy, gamma=3, max_steps=200))
    assert plain.shape[1] == track.shape[0]
    assert torch.equal(spec.generate(prompt).run(), plain)

    # The parts assemble into a voice that loads and speaks, every part with its card.
    train_items, heldout_items = read_items(run / "durations.jsonl")
    duration = train_duration(train_items, heldout_items, tmp_path / "dur", DurationTrainConfig(max_steps=2), **QUIET)
    dest = tmp_path / "voice"
    codec.save(dest / "codec")
    commands = {k: f"voicespec train {k} ..." for k in ("lm", "draft", "duration", "asr")}
    ship_voice(folder, draft_folder, duration, tmp_path / "asr", dest, commands, {"temperature": 0.8}, {"max_n": 3}, {})
    for part in ("target", "drafters/distilled", "duration", "asr"):
        assert "## Held-out metrics" in (dest / part / "MODEL_CARD.md").read_text()
    voice = Voice.load(dest)
    assert voice.config.default_drafter == "distilled"
    assert voice.drafter_names == ["none", "ngram", "auto", *early_exit_names(voice.target), "distilled"]
    pcm, stats = Synthesizer(voice).synthesize("ab a.")
    assert pcm.numel() == stats.frames * codec.hop_length > 0


def test_a_new_codec_reuses_the_alignments_and_reencodes_the_codes(tmp_path, monkeypatch, speech_corpus):
    codec, model_config, config = _setup(tmp_path, speech_corpus)
    run = tmp_path / "run"
    run.mkdir()
    first = prepare(tmp_path / "data", codec, tmp_path / "asr", run, log=lambda s: None)
    other = Codec.random(TINY_CODEC, seed=1)
    with torch.no_grad():  # untrained codebooks are all zeros: every code would be 0 for both codecs
        for layer in other.model.quantizer.vq.layers:
            layer._codebook.embed.normal_()

    def no_alignment(*args, **kwargs):
        raise AssertionError("the alignments were cached")

    monkeypatch.setattr(lm_recipe, "align", no_alignment)
    second = prepare(tmp_path / "data", other, tmp_path / "asr", run, log=lambda s: None)
    assert [e.durations for e in second] == [e.durations for e in first]
    assert any(not torch.equal(a.codes, b.codes) for a, b in zip(first, second))
    for e, u in zip(second, lm_recipe.load_utterances(tmp_path / "data", codec.sample_rate, "train",
                                                      lm_recipe.load_asr(tmp_path / "asr").tokenizer,
                                                      codec.hop_length)):
        assert torch.equal(e.codes.long(), other.encode(u.pcm))

    monkeypatch.setattr(other, "encode", lambda pcm: pytest.fail("the codes were cached for this codec"))
    third = prepare(tmp_path / "data", other, tmp_path / "asr", run, log=lambda s: None)
    assert all(torch.equal(a.codes, b.codes) for a, b in zip(second, third))


def test_a_step_budget_stops_training_before_the_time_budget(tmp_path, speech_corpus):
    codec, model_config, config = _setup(tmp_path, speech_corpus)
    config = replace(config, max_steps=4)
    train_target(tmp_path / "data", tmp_path / "codec", tmp_path / "asr", tmp_path / "run", config, model_config, **QUIET)
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["step"] == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_runs_export_models_that_load_on_the_cpu(tmp_path, speech_corpus):
    codec, model_config, config = _setup(tmp_path, speech_corpus)
    config = replace(config, device="cuda")
    folder = train_target(tmp_path / "data", tmp_path / "codec", tmp_path / "asr", tmp_path / "run", config,
                          model_config, **QUIET)
    draft = train_draft(tmp_path / "run", folder, tmp_path / "draft", 1, config, **QUIET)
    for f in (folder, draft):
        model = CodecLM.from_folder(str(f))
        assert "CUDA" in model.config.voicespec_info["hardware"] and model.device.type == "cpu"


def _phoneme_corpus(folder, sr=24000):
    """A corpus whose manifest carries teacher alignments, as `voicespec train data` writes them:
    Piper-style symbols (here: our own phonemes' characters) with samples at 22.05 kHz."""
    import math

    import soundfile as sf

    from voicespec.frontend.phonemes import phonemize

    texts = ["a cat.", "the dog!", "hello there.", "no way?", "a red hat.", "we sat."]
    (folder / "wav").mkdir(parents=True)
    lines = []
    for i, text in enumerate(texts):
        n = int(sr * (0.6 + 0.1 * i))
        t = torch.arange(n) / sr
        x = 0.3 * torch.sin(2 * math.pi * (120 + 40 * i) * t)
        sf.write(str(folder / "wav" / f"u{i}.wav"), x.numpy(), sr)
        symbols = ["^", *"".join(phonemize(text)), "$"]
        total = round(n * 22050 / sr)
        samples = [total // len(symbols)] * len(symbols)
        samples[-1] += total - sum(samples)
        lines.append(json.dumps({"id": f"u{i}", "text": text, "split": "heldout" if i == 0 else "train",
                                 "wav": f"wav/u{i}.wav", "seconds": n / sr, "samples": n, "sample_rate": sr,
                                 "alignment": {"sample_rate": 22050, "phonemes": symbols, "samples": samples}}))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_phoneme_recipe_coarse_first_end_to_end(tmp_path):
    """No recognizer: phoneme units, teacher durations, a coarse-first target, its draft, a
    duration predictor over phonemes, shipped as a voice that speaks unseen words."""
    from voicespec.frontend.phonemes import PhonemeTokenizer

    _phoneme_corpus(tmp_path / "data")
    codec = Codec.random(TINY_CODEC, seed=0)
    codec.save(tmp_path / "codec")
    tok = PhonemeTokenizer()
    model_config = default_target_config(codec, tok.vocab_size, hidden_size=32, num_hidden_layers=2, fine_width=32,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)
    config = LMTrainConfig(minutes=5.0, max_steps=4, batch_steps=200, warmup_steps=2, eval_every_steps=2,
                           log_every_steps=1)
    run = tmp_path / "run"
    folder = train_target(tmp_path / "data", tmp_path / "codec", None, run, config, model_config, **QUIET)
    prepared = torch.load(run / "prepared.pt", weights_only=False)
    assert prepared["tokenizer"] == tok.to_dict() and min(prepared["agreement"].values()) == 1.0
    for ex in prepared["examples"]:
        assert sum(ex["durations"]) == ex["codes"].shape[1] and tok.is_speakable(ex["ids"])
    target = load_step_lm(str(folder))
    info = target.model.config.voicespec_info
    assert target.layout.kind == "coarse" and info["units"].startswith("phonemes") and info["asr"] is None
    metrics = info["heldout_metrics"]
    assert len(metrics["per_codebook"]) == codec.n_codebooks
    assert abs(metrics["frame_nll"] - sum(metrics["per_codebook"])) < 1e-2

    draft_folder = train_draft(run, folder, tmp_path / "draft", 1, config, **QUIET)
    assert len(CodecLM.from_folder(str(draft_folder)).config.voicespec_info["heldout_metrics"]
               ["acceptance_per_codebook"]) == 1  # one token per step
    train_items, heldout_items = read_items(run / "durations.jsonl")
    from voicespec.frontend.duration import DurationConfig

    duration = train_duration(train_items, heldout_items, tmp_path / "dur", DurationTrainConfig(max_steps=2),
                              DurationConfig(units=tok.vocab_size - 1), **QUIET)
    dest = tmp_path / "voice"
    codec.save(dest / "codec")
    CtcAsr(AsrConfig(sample_rate=codec.sample_rate, hop_length=codec.hop_length, n_fft=2 * codec.hop_length,
                     conv_channels=8, conv_layers=1, hidden=8, layers=1)).save(tmp_path / "asr")
    commands = {k: f"voicespec train {k} ..." for k in ("lm", "draft", "duration", "asr")}
    rows = {k: {"wer": 0.5, "cer": 0.25} for k in ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain")}
    report = {"judge": "pocketsphinx en-us", "heldout": {"utterances": 2, **rows}, "unseen_words": {"utterances": 1, **rows}}
    ship_voice(folder, draft_folder, duration, tmp_path / "asr", dest, commands, {"temperature": 0.8}, {}, {},
               evaluation=report)
    target_card = (dest / "target" / "MODEL_CARD.md").read_text()
    assert "coarse-first" in target_card and "unseen-word sentences (1): PocketSphinx WER / CER" in target_card
    assert "| codec resynthesis | 0.500 / 0.250 | 0.500 / 0.250 |" in target_card
    assert "Piper's alignment" in (dest / "duration" / "MODEL_CARD.md").read_text()
    voice = Voice.load(dest)
    assert voice.tokenizer.kind == "phonemes"
    synth = Synthesizer(voice)
    pcm, stats = synth.synthesize("Okafor saw a lighthouse.")
    assert pcm.numel() == stats.frames * codec.hop_length > 0
    greedy = DecodeConfig(SamplingConfig(temperature=0), gamma=0)
    from voicespec.pipeline.synthesis import SynthesisOptions

    def frames(options: SynthesisOptions) -> torch.Tensor:
        stream = synth.stream("a cat.", options)
        list(stream)
        return torch.cat(stream.frames, 1)

    plain = frames(SynthesisOptions(greedy, drafter="none"))
    assert plain.shape[0] == codec.n_codebooks and plain.shape[1] > 0
    assert torch.equal(frames(SynthesisOptions(replace(greedy, gamma=3), drafter="distilled")), plain)


@pytest.mark.slow
def test_a_grouped_target_trains_exports_and_speaks_its_tracks_frames(tmp_path, speech_corpus):
    """Two frames a step: the recipe trains the backbone on every other frame's coarse code and
    the fine stage on the rest (a short last step's missing slots left out), reports a loss per
    slot and per frame, exports a folder that declares its layout, and a distilled draft
    speculates on it with plain decoding's frames, as many as the track."""
    codec, model_config, config = _setup(tmp_path, speech_corpus)
    model_config = replace(model_config, frames_per_step=2)
    run = tmp_path / "run"
    folder = train_target(tmp_path / "data", tmp_path / "codec", tmp_path / "asr", run, config, model_config, **QUIET)
    target = load_step_lm(str(folder))
    assert target.layout.frames_per_step == 2 and target.model.fine.slots == 2 * codec.n_codebooks
    metrics = target.model.config.voicespec_info["heldout_metrics"]
    assert len(metrics["per_codebook"]) == 2 * codec.n_codebooks and metrics["frame_nll"] > 0
    draft = load_step_lm(str(train_draft(run, folder, tmp_path / "draft", 1, config, **QUIET)))
    assert draft.layout == target.layout
    greedy = SamplingConfig(temperature=0)
    items = [json.loads(line) for line in (run / "durations.jsonl").read_text().splitlines()]
    for item in items[:4]:
        track = frame_track(item["ids"], item["durations"], model_config.track_positions)
        prompt = target.layout.prompt(item["ids"], track=track)
        plain = SpecDecoder(target, None, DecodeConfig(greedy, gamma=0, max_steps=400)).generate(prompt).run()
        spec = SpecDecoder(target, ModelDrafter(draft), DecodeConfig(greedy, gamma=3, max_steps=400)).generate(prompt).run()
        assert plain.shape[1] == track.shape[0] and torch.equal(spec, plain)


def test_the_fine_loss_of_a_grouped_step_leaves_out_a_short_last_steps_missing_slots():
    """A sequence of 3 frames, two a step: the second step's second frame does not exist, so the
    slots that would hold it have no loss, and the per-slot counts say so."""
    from voicespec.train.lm import Example, batch_outputs, ce_per_codebook, slot_counts, to_sequence

    lm = tiny_codec_lm(seed=1, n_codebooks=2, codebook_size=8, coarse_first=True, track_positions=8, frames_per_step=2,
                       text_vocab=16).model
    ex = Example("a", [1, 2], torch.randint(0, 8, (2, 3)), [2, 1], "train")
    seq = to_sequence(ex, lm.config.layout, 8)
    assert seq.targets[:, 0].tolist() == [*ex.codes[0, ::2].tolist(), lm.config.layout.eos_id]
    assert slot_counts(lm, [seq]).tolist() == [3, 2, 1, 1]  # 3 steps (EOS too); slot 1: 2 frames; 2, 3: 1
    per_slot = ce_per_codebook(batch_outputs(lm, [seq]), [seq], lm)
    shorter = Example("a", [1, 2], ex.codes[:, :2], [1, 1], "train")  # step 1 alone: causal, so the same states
    seq2 = to_sequence(shorter, lm.config.layout, 8)
    seq2.track[:1] = seq.track[:1]
    alone = ce_per_codebook(batch_outputs(lm, [seq2]), [seq2], lm)
    assert torch.allclose(per_slot[2:], alone[2:], atol=1e-6) and not torch.allclose(per_slot[1], alone[1])


def test_the_cards_judge_table_names_every_judge_the_report_has():
    """A report of today's `voicespec evaluate` (the judges it ran, pooled seeds) fills a column per
    judge and set; a row a judge did not score shows a dash, not a number or a KeyError."""
    rows = {k: {"wer": 0.5, "cer": 0.25, "whisper_wer": 0.125, "dnsmos_ovrl": 2.75}
            for k in ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain")}
    del rows["greedy_plain"]["dnsmos_ovrl"]
    report = {"judges": {"pocketsphinx": "PocketSphinx", "whisper": "Whisper tiny.en", "dnsmos": "DNSMOS"},
              "seeds": [0, 1, 2], "heldout": {"utterances": 30, **rows}, "unseen_words": {"utterances": 25, **rows}}
    table = judge_section(report)
    assert "PocketSphinx; Whisper tiny.en; DNSMOS" in table and "seeds [0, 1, 2] pooled" in table
    assert ("| held-out sentences (30): PocketSphinx WER / CER | held-out sentences (30): Whisper WER | "
            "held-out sentences (30): DNSMOS OVRL | unseen-word sentences (25): PocketSphinx WER / CER |") in table
    assert "| codec resynthesis | 0.500 / 0.250 | 0.125 | 2.750 | 0.500 / 0.250 | 0.125 | 2.750 |" in table
    assert "| generated, greedy | 0.500 / 0.250 | 0.125 | – | 0.500 / 0.250 | 0.125 | – |" in table
    # Judged without PocketSphinx (`--judges whisper,dnsmos`): its rows hold no `wer`.
    bare = {k: {"whisper_wer": 0.125, "dnsmos_ovrl": 2.75} for k in rows}
    table = judge_section({"judges": {"whisper": "W", "dnsmos": "D"}, "heldout": {"utterances": 3, **bare}})
    assert "PocketSphinx" not in table and "| teacher (Piper) | 0.125 | 2.750 |" in table
