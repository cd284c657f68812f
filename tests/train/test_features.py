"""The draft-heads recipe end to end on a tiny coarse-first voice, bounded by steps: the target's own
samples (resumed, not redone), the unrolled distillation for both kinds (resumed from its
checkpoint), export, shipping into the voice, and the shipped heads drafting through the real
registry with greedy output equal to plain decoding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from voicespec.cli import main
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.lm.draft_heads import DraftHeads
from voicespec.pipeline.tiny import build_tiny_voice
from voicespec.pipeline.voice import Voice
from voicespec.train.configs import LMTrainConfig
from voicespec.train.data import split_of
from voicespec.train.features import (
    SAMPLES, Features, corpus_examples, distill_loss, prepared_examples, sample_corpus, ship_heads, train_heads,
)


def _prepared(run: Path, voice: Voice) -> None:
    texts = ["a cat sat.", "we go home.", "blue sky.", "one two.", "ab a.", "it is."]
    examples = [{"id": f"u{i}", "ids": voice.tokenizer.encode(t), "split": "heldout" if i < 2 else "train"}
                for i, t in enumerate(texts)]
    run.mkdir(parents=True)
    torch.save({"examples": examples}, run / "prepared.pt")


@pytest.mark.slow
def test_samples_heads_resume_ship_and_draft(tmp_path):
    voice_dir = build_tiny_voice(tmp_path / "voice", layout="coarse")
    voice = Voice.load(voice_dir)
    _prepared(tmp_path / "run", voice)
    out = tmp_path / "feat"
    quiet = {"log": lambda *a, **k: None}
    examples = prepared_examples(tmp_path / "run")
    samples = sample_corpus(voice_dir, examples, out, 4, batch=3, **quiet)
    assert len(samples) == 4 and [s["split"] for s in samples] == ["heldout", "heldout", "train", "train"]
    assert all(s["steps"].ndim == 1 and s["steps"][-1] == voice.target.layout.eos_id for s in samples)
    before = (out / SAMPLES).stat().st_mtime_ns
    assert len(sample_corpus(voice_dir, examples, out, 4, batch=3, **quiet)) == 4  # resumed: nothing redone
    assert (out / SAMPLES).stat().st_mtime_ns == before
    assert not any(s["greedy"] for s in samples)
    # Every other training utterance greedy (held-out ones stay sampled): those are the same whatever
    # the seed, the sampled ones are not.
    mixed = [sample_corpus(voice_dir, examples, tmp_path / f"mixed{seed}", 4, batch=3, seed=seed, greedy_every=2, **quiet)
             for seed in (0, 100)]
    assert [s["greedy"] for s in mixed[0]] == [False, False, True, False]
    assert torch.equal(mixed[0][2]["steps"], mixed[1][2]["steps"])
    assert not all(torch.equal(mixed[0][i]["steps"], mixed[1][i]["steps"]) for i in (0, 1, 3))
    with pytest.raises(ValueError, match="greedy_every must be an integer >= 0"):
        sample_corpus(voice_dir, examples, tmp_path / "bad", 4, greedy_every=-1, **quiet)
    # A resume that would mix other prompts or another greedy schedule into the samples is refused.
    for other in ({"greedy_every": 0}, {"greedy_every": 3}):
        with pytest.raises(ValueError, match="holds samples of other prompts or another --greedy-every"):
            sample_corpus(voice_dir, examples, tmp_path / "mixed0", 4, batch=3, **other, **quiet)
    with pytest.raises(ValueError, match="holds samples of other prompts"):
        sample_corpus(voice_dir, examples[1:], out, 4, batch=3, **quiet)

    for kind, depth in (("feature", 3), ("medusa", 2)):
        config = LMTrainConfig(minutes=5, max_steps=2, eval_every_steps=1, log_every_steps=1, device="cpu", batch_steps=200)
        folder = train_heads(out, voice_dir / "target", out / f"{kind}_run", kind, depth, 32, 0.8, 5, config, **quiet)
        resumed = train_heads(out, voice_dir / "target", out / f"{kind}_run", kind, depth, 32, 0.8, 5,
                              LMTrainConfig(minutes=5, max_steps=3, eval_every_steps=1, log_every_steps=1, device="cpu",
                                            batch_steps=200), **quiet)
        assert resumed == folder
        info = json.loads((folder / "config.json").read_text())["voicespec_info"]
        assert info["steps"] == 3 and len(info["heldout_acceptance"]["sampling"]) == depth
        ship_heads(folder, voice_dir / "drafters" / kind, f"voicespec train features --kind {kind}")
        shipped_card = (voice_dir / "drafters" / kind / "MODEL_CARD.md").read_text()
        assert "## Held-out metrics" in shipped_card
        assert shipped_card.startswith(f"# tiny-coarse {kind} draft heads\n")  # the voice it ships in
        with pytest.raises(ValueError, match="drafters/KIND"):  # not into a voice: refused before anything is written
            ship_heads(folder, tmp_path / "loose" / kind, "voicespec train features")
        assert not (tmp_path / "loose").exists()

    # More distillation from the shipped heads, in a fresh run folder: the first record is their own
    # held-out acceptance (the baseline), the export says where it started, and a misfit is refused.
    shipped = voice_dir / "drafters" / "feature"
    lines = []
    config = LMTrainConfig(minutes=5, max_steps=1, eval_every_steps=1, log_every_steps=1, device="cpu", batch_steps=200)
    more = train_heads(out, voice_dir / "target", out / "more_run", "feature", 3, 32, 0.8, 5, config, log=lines.append,
                       init=shipped)
    first = json.loads(lines[1])
    assert first["step"] == 0 and first["init"] == str(shipped)
    assert first["heldout"] == json.loads((shipped / "config.json").read_text())["voicespec_info"]["heldout_acceptance"]
    assert json.loads((more / "config.json").read_text())["voicespec_info"]["init"] == str(shipped)
    with pytest.raises(ValueError, match="cannot continue as feature heads of width 64"):
        train_heads(out, voice_dir / "target", out / "misfit_run", "feature", 3, 64, 0.8, 5, config, init=shipped, **quiet)
    # The CLI checks --init and --greedy-weight before sampling anything, and --corpus-seed is not --run's.
    cli = ["train", "features", "--voice", str(voice_dir), "--out", str(tmp_path / "cli")]
    for bad in (["--init", str(shipped), "--width", "64"], ["--init", str(tmp_path / "none")],
                ["--greedy-weight", "inf"], ["--greedy-weight", "-1"], ["--greedy-every", "-2"], ["--batch", "0"],
                ["--run", str(tmp_path / "run"), "--corpus-seed", "3"]):
        assert main(cli + bad) == 2, bad
    assert not (tmp_path / "cli").exists()

    # The greedy term: w · -log q(argmax p) on top of the KL, linear in w; recorded in the export.
    heads, target = DraftHeads.from_folder(str(shipped)), voice.target.model
    feats, idx = Features(target, samples, torch.device("cpu")), torch.arange(len(samples))
    kl, half, full = (distill_loss(heads, target, feats, idx, 3, 0.8, 5, w)[0].item() for w in (0.0, 0.5, 1.0))
    assert half > kl and full - kl == pytest.approx(2 * (half - kl), rel=1e-4)
    greedy = train_heads(out, voice_dir / "target", out / "greedy_run", "feature", 3, 32, 0.8, 5, config, init=shipped,
                         greedy_weight=0.5, **quiet)
    assert json.loads((greedy / "config.json").read_text())["voicespec_info"]["greedy_weight"] == 0.5
    with pytest.raises(ValueError, match="greedy_weight must be a finite number >= 0"):
        train_heads(out, voice_dir / "target", out / "bad_run", "feature", 3, 32, 0.8, 5, config, greedy_weight=-1, **quiet)

    voice = Voice.load(voice_dir)
    assert {"feature", "medusa", "auto"} <= set(voice.drafter_names)
    prompt = voice.prompt(voice.tokenizer.encode("a cat sat."))
    greedy = DecodeConfig(SamplingConfig(temperature=0), gamma=0, max_steps=prompt.track.shape[0] + 1)
    plain = SpecDecoder(voice.target).generate(prompt, greedy).run()
    for name, extra in (("feature", {"gamma": 3}), ("medusa", {"gamma": 2}), ("feature", {"tree": (2, 1)}),
                        ("auto", {"gamma": "auto"})):
        config = DecodeConfig(greedy.sampling, max_steps=greedy.max_steps, **extra)
        assert torch.equal(SpecDecoder(voice.target, voice.drafter(name)).generate(prompt, config).run(), plain), name


def test_corpus_prompts_need_no_teacher(tmp_path):
    """Prompts from the corpus grammar through the voice's front end: deterministic by seed,
    split by utterance id like the teacher corpus, the held-out ones first."""
    voice = Voice.load(build_tiny_voice(tmp_path / "voice", layout="coarse"))
    examples = corpus_examples(voice, 120, seed=3)
    assert examples == corpus_examples(voice, 120, seed=3) and examples != corpus_examples(voice, 120, seed=4)
    splits = [e["split"] for e in examples]
    assert "heldout" in splits and "train" in splits
    assert splits == sorted(splits)  # "heldout" < "train": held-out first
    assert all(e["split"] == split_of(e["id"].split(".")[0]) and e["ids"] for e in examples)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["coarse", "grouped"])
def test_the_heads_learn_from_the_features_the_target_computes_while_decoding(tmp_path, layout):
    """Teacher-forced over a sample, :class:`Features` holds the hidden states and input embeddings
    the target's own session computes for those steps (a grouped step reading its first frame's
    track row), so heads trained on them meet at run time what they learned from."""
    voice_dir = build_tiny_voice(tmp_path / "voice", layout=layout)
    voice = Voice.load(voice_dir)
    examples = corpus_examples(voice, 3, seed=1)
    samples = sample_corpus(voice_dir, examples, tmp_path / "feat", 2, log=lambda *a, **k: None)
    feats = Features(voice.target.model, samples, torch.device("cpu"))
    for b, s in enumerate(samples):
        prompt = voice.prompt(s["ids"])
        session = voice.target.start(prompt)
        steps = s["steps"].long()[:, None]
        inputs = torch.cat([prompt.steps[-1:], steps[:-1]])
        embeds = session.embed_at(inputs, 0)[0]
        session.forward(inputs)
        L = inputs.shape[0]
        assert torch.allclose(feats.e[b, :L].float(), embeds, atol=2e-3)
        assert torch.allclose(feats.f[b, 1:L + 1].float(), session.hidden, atol=2e-3)
        session.close()
