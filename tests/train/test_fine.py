"""The fine-stage recipe end to end on a tiny coarse-first voice, bounded by steps: the target's own
samples (reused, not redone), distillation into a stage that reads no previous frame (resumed from
its checkpoint), the voice written with it, and that voice decoding with speculation exactly as
without."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter
from voicespec.pipeline.tiny import build_tiny_voice, codec_draft, tiny_codec_lm
from voicespec.pipeline.voice import Voice
from voicespec.train.fine import SAMPLES, batched_stage, distill_loss, train_fine, write_voice


@pytest.mark.slow
@pytest.mark.parametrize("layout,G", [("coarse", 1), ("grouped", 2)])
def test_sample_distil_resume_and_speak(tmp_path, layout, G):
    voice_dir = build_tiny_voice(tmp_path / "voice", layout=layout)
    out, quiet = tmp_path / "fine", {"log": lambda *a, **k: None}
    dest = train_fine(voice_dir, out, utterances=4, batch=3, max_steps=2, batch_frames=32, eval_every=1, **quiet)
    data = torch.load(out / SAMPLES, weights_only=False)
    K = Voice.load(voice_dir).target.model.config.n_codebooks
    assert data["h"].shape[0] == data["codes"].shape[0] == data["prev"].shape[0] > 0 and data["codes"].shape[1] == K * G
    before = (out / SAMPLES).stat().st_mtime_ns
    assert train_fine(voice_dir, out, utterances=4, batch=3, max_steps=3, batch_frames=32, **quiet) == dest  # resumed
    assert (out / SAMPLES).stat().st_mtime_ns == before
    info = json.loads((dest / "target" / "FINE_STAGE.json").read_text())
    assert info["steps"] == 3 and len(info["heldout"]["kl"]) == K * G - 1

    voice = Voice.load(dest)
    assert voice.target.model.config.fine_reads_prev is False and voice.target.model.fine.prev is None
    assert (dest / "codec").is_dir() and (dest / "voice.json").is_file()
    with pytest.raises(ValueError, match="reads the previous frame"):
        train_fine(dest, tmp_path / "again", utterances=4, max_steps=1, **quiet)
    prompt = voice.prompt(voice.tokenizer.encode("a cat sat."))
    greedy = DecodeConfig(SamplingConfig(temperature=0), gamma=0, max_steps=prompt.track.shape[0] + 1)
    plain = SpecDecoder(voice.target).generate(prompt, greedy).run()
    drafter = ModelDrafter(codec_draft(voice.target))
    for gamma in (1, 3):
        config = DecodeConfig(greedy.sampling, gamma=gamma, max_steps=greedy.max_steps)
        assert torch.equal(SpecDecoder(voice.target, drafter).generate(prompt, config).run(), plain)


def _assert_learns(new, old, h, codes, prev) -> None:
    """30 Adam steps on the KL to ``old`` cut it by at least 30 %."""
    kl0 = distill_loss(new, old, h, codes, prev)[0].sum()
    opt = torch.optim.Adam(new.parameters(), lr=3e-3)
    for _ in range(30):
        loss = distill_loss(new, old, h, codes, prev)[0].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert distill_loss(new, old, h, codes, prev)[0].sum() < 0.7 * kl0


def test_distillation_starts_from_the_old_stage_and_learns_it():
    """The new stage starts as the old one without its previous-frame table (the same logits as
    the old stage with that table zeroed), and the loss falls when it learns the old stage's logits."""
    old = tiny_codec_lm(seed=2, n_codebooks=3, codebook_size=8, coarse_first=True).model.fine.eval()
    new = batched_stage(old)
    h, codes, prev = torch.randn(64, 64), torch.randint(0, 8, (64, 3)), torch.randint(0, 9, (64, 3))
    blind = copy.deepcopy(old)
    with torch.no_grad():
        blind.prev.weight.zero_()
        assert torch.allclose(new.logits(h, codes, prev), blind.logits(h, codes, prev), atol=1e-6)
        assert not torch.allclose(new.logits(h, codes, prev), old.logits(h, codes, prev), atol=1e-3)
    _assert_learns(new, old, h, codes, prev)


def test_a_narrower_stage_starts_from_scratch_learns_the_old_one_and_ships_its_width(tmp_path):
    """``--width``: the new stage has its own width (nothing of the old one's weights fits), learns
    the old stage's logits, and the voice written with it records that width and loads."""
    old = tiny_codec_lm(seed=2, n_codebooks=3, codebook_size=8, coarse_first=True, frames_per_step=2).model.fine.eval()
    new = batched_stage(old, width=16)
    assert new.inp.out_features == 16 and new.G == 2 and new.prev is None
    h, codes, prev = torch.randn(64, 64), torch.randint(0, 8, (64, 6)), torch.randint(0, 9, (64, 3))
    _assert_learns(new, old, h, codes, prev)
    voice_dir = build_tiny_voice(tmp_path / "voice", layout="grouped")
    dest = write_voice(voice_dir, tmp_path / "narrow", batched_stage(Voice.load(voice_dir).target.model.fine, 16), {})
    voice = Voice.load(dest)
    assert voice.target.model.config.fine_width == 16 and voice.target.model.fine.inp.out_features == 16
    prompt = voice.prompt(voice.tokenizer.encode("a cat sat."))
    frames = SpecDecoder(voice.target).generate(prompt, DecodeConfig(voice.sampling, seed=1, max_steps=200)).run()
    assert frames.shape == (voice.target.model.config.n_codebooks, prompt.track.shape[0])
