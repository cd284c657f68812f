"""Bad input fails early with an error that names the problem."""

from __future__ import annotations

import functools

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig

from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.pipeline.drafters import build_drafter
from voicespec.engine.layout import DelayLayout, FlatLayout, Prompt, layout_from_dict
from voicespec.engine.step_lm import HFCausalLM
from voicespec.lm.loading import LAYOUT_KEY, load_step_lm
from voicespec.pipeline.tiny import TEXT_VOCAB, tiny_codec_lm, tiny_flat, tiny_flat_layout


@functools.cache
def flat():
    return tiny_flat(seed=0)


@functools.cache
def codec():
    return tiny_codec_lm(seed=0, n_codebooks=3, codebook_size=8)


# --- prompts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("empty", [[], (), torch.empty(0, dtype=torch.long)])
def test_empty_prompt_flat(empty):
    with pytest.raises(ValueError, match="empty prompt"):
        flat().layout.prompt(empty)


@pytest.mark.parametrize("empty", [[], torch.empty(0, dtype=torch.long)])
def test_empty_prompt_delay(empty):
    with pytest.raises(ValueError, match="empty prompt"):
        codec().layout.prompt(empty)


def test_prompt_with_wrong_group_count_flat():
    prompt = Prompt(torch.empty(0, dtype=torch.long), torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"prompt steps must be \[P >= 1, 1\], got \(3, 2\)"):
        SpecDecoder(flat()).generate(prompt)


def test_prompt_with_wrong_group_count_delay():
    prompt = Prompt(torch.tensor([1, 2]), torch.full((1, 2), codec().layout.bos_id))
    with pytest.raises(ValueError, match=r"prompt steps must be \[P >= 1, 3\], got \(1, 2\)"):
        SpecDecoder(codec()).generate(prompt)


def test_prompt_without_steps():
    prompt = Prompt(torch.empty(0, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="prompt steps must be"):
        SpecDecoder(flat()).generate(prompt)


def test_flat_layout_rejects_a_text_prefix():
    prompt = Prompt(torch.tensor([3, 4]), torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="flat layouts take their text ids as prompt steps"):
        SpecDecoder(flat()).generate(prompt)


@pytest.mark.parametrize("bad", [[TEXT_VOCAB], [1, 2, 99], [-1]])
def test_codec_lm_text_ids_out_of_range(bad):
    with pytest.raises(ValueError, match=rf"text ids must lie in \[0, {TEXT_VOCAB}\)"):
        SpecDecoder(codec()).generate(codec().layout.prompt(bad))


@pytest.mark.parametrize("bad", [[10_000], [-1]])
def test_flat_prompt_ids_out_of_vocabulary(bad):
    with pytest.raises(ValueError, match="vocab"):
        SpecDecoder(flat()).generate(flat().layout.prompt(bad))


# --- decode / sampling configuration -----------------------------------------------------------


@pytest.mark.parametrize("gamma", [-1, -5, "fast", 2.0, None])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma must be an integer >= 0 or 'auto'"):
        DecodeConfig(gamma=gamma)


def test_good_gammas_are_accepted():
    assert DecodeConfig(gamma=0).gamma == 0
    assert DecodeConfig(gamma="auto").gamma == "auto"


@pytest.mark.parametrize("max_steps", [0, -3])
def test_bad_max_steps(max_steps):
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        DecodeConfig(max_steps=max_steps)


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"temperature": -0.5}, "temperature must be >= 0"),
        ({"temperature": float("nan")}, "temperature must be >= 0"),
        ({"top_k": -1}, "top_k must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_p": float("nan")}, r"top_p must be in \(0, 1\]"),
        ({"repetition_penalty": 0.5}, "repetition_penalty must be >= 1"),
        ({"repetition_window": -2}, "repetition_window must be >= 0"),
    ],
)
def test_bad_sampling_config(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        SamplingConfig(**kwargs)


# --- drafters ----------------------------------------------------------------------------------


def test_unknown_drafter_name():
    with pytest.raises(ValueError, match=r"unknown drafter 'nope' for voice 'v'; choose one of: none, ngram, a, b"):
        build_drafter("nope", {"b": "x", "a": "y"}, owner="voice 'v'")


def test_draft_model_needs_a_path(tmp_path):
    from voicespec.cli import main

    assert main(["generate", "--model", str(tmp_path), "--text-ids", "1", "--drafter", "draft-model"]) == 2


def test_draft_model_with_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        build_drafter("draft-model", {"draft-model": str(tmp_path / "nowhere")})


def test_ngram_bad_orders():
    with pytest.raises(ValueError, match="need 1 <= min_n <= max_n"):
        NGramDrafter(max_n=2, min_n=3)
    with pytest.raises(ValueError, match="need 1 <= min_n <= max_n"):
        NGramDrafter(max_n=2, min_n=0)


@pytest.mark.parametrize(
    "target,draft",
    [
        (lambda: tiny_flat(codebook_size=8), lambda: tiny_flat(codebook_size=16, n_layers=1)),
        (lambda: tiny_flat(n_codebooks=2), lambda: tiny_flat(n_codebooks=3, n_layers=1)),
        (lambda: tiny_flat(), lambda: tiny_codec_lm(n_layers=1)),
        (lambda: tiny_codec_lm(), lambda: tiny_flat(n_layers=1)),
        (lambda: tiny_codec_lm(delays=[0, 1, 2]), lambda: tiny_codec_lm(delays=[0, 0, 0], n_layers=1)),
        (lambda: tiny_codec_lm(codebook_size=8), lambda: tiny_codec_lm(codebook_size=16, n_layers=1)),
    ],
    ids=["flat-C8-vs-C16", "flat-K2-vs-K3", "flat-vs-delay", "delay-vs-flat", "delays-differ", "delay-C8-vs-C16"],
)
def test_mismatched_draft_and_target_vocabularies(target, draft):
    with pytest.raises(ValueError, match="does not match the target's vocabulary/layout"):
        SpecDecoder(target(), ModelDrafter(draft()))


def test_ngram_drafter_works_with_any_layout():
    SpecDecoder(flat(), NGramDrafter())
    SpecDecoder(codec(), NGramDrafter())


# --- layouts -----------------------------------------------------------------------------------


def _flat(**kw):
    base = dict(n_codebooks=2, codebook_size=8, audio_offset=10, vocab_size=26, start_id=0, eos_id=1, pad_id=2)
    base.update(kw)
    return FlatLayout(**base)


def test_valid_flat_layout():
    assert _flat().vocab_size == 26


@pytest.mark.parametrize("name", ["start_id", "eos_id", "pad_id"])
@pytest.mark.parametrize("value", [10, 17, 25])
def test_flat_specials_inside_audio_range(name, value):
    with pytest.raises(ValueError, match=rf"{name}={value} must be a non-audio id inside the vocabulary"):
        _flat(**{name: value})


@pytest.mark.parametrize("name", ["start_id", "eos_id", "pad_id"])
@pytest.mark.parametrize("value", [-1, 26, 100])
def test_flat_specials_outside_vocabulary(name, value):
    with pytest.raises(ValueError, match=rf"{name}={value} must be a non-audio id inside the vocabulary"):
        _flat(**{name: value, "vocab_size": 26})


def test_flat_audio_ids_beyond_vocabulary():
    with pytest.raises(ValueError, match="audio ids end at 26 but vocab_size is 25"):
        _flat(vocab_size=25)


@pytest.mark.parametrize("kw", [{"n_codebooks": 0}, {"codebook_size": 0}])
def test_flat_nonpositive_sizes(kw):
    with pytest.raises(ValueError, match="n_codebooks and codebook_size must be positive"):
        _flat(**kw)


@pytest.mark.parametrize("delays", [(1, 0, 0), (2, 1, 0), (0, -1, 1)])
def test_delay_first_delay_nonzero_or_negative(delays):
    with pytest.raises(ValueError, match="codebook 0 must have delay 0"):
        DelayLayout(3, 8, delays)


@pytest.mark.parametrize("delays", [(0, 1), (0, 1, 2, 3), ()])
def test_delay_wrong_number_of_delays(delays):
    with pytest.raises(ValueError, match=rf"need 3 delays, got {len(delays)}"):
        DelayLayout(3, 8, delays)


@pytest.mark.parametrize("kw", [{"n_codebooks": 0, "delays": ()}, {"codebook_size": 0}])
def test_delay_nonpositive_sizes(kw):
    args = {"n_codebooks": 3, "codebook_size": 8, "delays": (0, 1, 2)}
    args.update(kw)
    with pytest.raises(ValueError, match="n_codebooks and codebook_size must be positive"):
        DelayLayout(**args)


def test_layout_from_dict_unknown_kind():
    with pytest.raises(ValueError, match="unknown token layout kind 'interleaved'"):
        layout_from_dict({"kind": "interleaved", "n_codebooks": 2})
    with pytest.raises(ValueError, match="unknown token layout kind None"):
        layout_from_dict({"n_codebooks": 2})


def test_layout_vocab_must_match_the_model():
    other = tiny_flat_layout(codebook_size=16)
    with pytest.raises(ValueError, match=rf"layout vocab_size {other.vocab_size} != model vocabulary"):
        HFCausalLM(flat().model, other)


# --- loading -----------------------------------------------------------------------------------


def test_load_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        load_step_lm(str(tmp_path / "missing"))


def test_load_missing_relative_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        load_step_lm("./missing")


def test_load_folder_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"not a model folder \(no config.json\)"):
        load_step_lm(str(tmp_path))


def test_load_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_step_lm(str(tmp_path))


@pytest.fixture(scope="module")
def folder_without_layout(tmp_path_factory):
    path = tmp_path_factory.mktemp("no_layout")
    model = tiny_flat(seed=3).model
    delattr(model.config, LAYOUT_KEY)
    model.save_pretrained(path)
    return str(path)


def test_load_causal_lm_without_stored_layout(folder_without_layout):
    with pytest.raises(ValueError, match=rf"config has no '{LAYOUT_KEY}'; pass the token layout explicitly"):
        load_step_lm(folder_without_layout)


def test_load_causal_lm_with_a_delay_layout(folder_without_layout):
    with pytest.raises(ValueError, match="a plain causal LM decodes in the flat layout"):
        load_step_lm(folder_without_layout, layout=DelayLayout.musicgen(2, 8).to_dict())


def test_load_causal_lm_with_a_mismatched_layout(folder_without_layout):
    wrong = tiny_flat_layout(codebook_size=16)
    with pytest.raises(ValueError, match="layout vocab_size .* != model vocabulary"):
        load_step_lm(folder_without_layout, layout=wrong)


def test_hub_ids_with_a_namespace_reach_transformers(monkeypatch, tmp_path):
    """No network: stub AutoConfig so that reaching it is the observable."""
    import voicespec.lm.loading as loading

    class Reached(Exception):
        pass

    def fake_from_pretrained(path, *a, **kw):
        raise Reached(path)

    monkeypatch.chdir(tmp_path)  # make sure no such local folder exists
    monkeypatch.setattr(loading.AutoConfig, "from_pretrained", fake_from_pretrained)
    with pytest.raises(Reached):
        load_step_lm("some-org/some-tts-model")
