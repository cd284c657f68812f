"""Save/load round trips through HF-style folders (no network), and clear errors for folders that
are missing, incomplete or carry the wrong layout."""

from __future__ import annotations

import json

import pytest
import torch

from voicespec.lm.codec_lm import CodecLM, CodecLMConfig, CodecStepLM
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.pipeline.drafters import build_drafter
from voicespec.engine.layout import DelayLayout, FlatLayout
from voicespec.lm.hf import HFCausalLM
from voicespec.lm.loading import LAYOUT_KEY, load_step_lm, save_model
from voicespec.pipeline.tiny import codec_draft, flat_draft, tiny_codec_lm, tiny_flat, tiny_flat_layout

GREEDY = SamplingConfig(temperature=0)
MAX_STEPS = 24


def decode(target, prompt, drafter=None, gamma=0, sampling=GREEDY, seed=None):
    gen = SpecDecoder(target, drafter, DecodeConfig(sampling, gamma=gamma, max_steps=MAX_STEPS, seed=seed))
    g = gen.generate(prompt)
    frames = g.run()
    return g.generated.clone(), frames


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.fixture(scope="module")
def flat_pair(tmp_path_factory):
    target = tiny_flat(seed=1, min_frames=3)
    path = tmp_path_factory.mktemp("flat")
    save_model(target.model, path)
    return target, str(path)


@pytest.fixture(scope="module")
def codec_pair(tmp_path_factory):
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, delays=[0, 1, 2], min_frames=4)
    path = tmp_path_factory.mktemp("codec")
    save_model(target.model, path)
    return target, str(path)


def test_flat_folder_carries_the_layout(flat_pair):
    target, path = flat_pair
    with open(f"{path}/config.json") as f:
        stored = json.load(f)[LAYOUT_KEY]
    assert stored == target.layout.to_dict()


def test_flat_round_trip(flat_pair):
    target, path = flat_pair
    loaded = load_step_lm(path)
    assert isinstance(loaded, HFCausalLM)
    assert isinstance(loaded.layout, FlatLayout)
    assert loaded.layout == target.layout
    assert_same_weights(loaded.model, target.model)
    prompt = target.layout.prompt([3, 4, 5, 6])
    for drafter, gamma in ((None, 0), (NGramDrafter(), 3)):
        want, want_frames = decode(target, prompt, drafter, gamma)
        got, got_frames = decode(loaded, prompt, drafter, gamma)
        assert torch.equal(got, want), f"γ={gamma}"
        assert torch.equal(got_frames, want_frames)
    # and speculation over the loaded model equals plain decoding of it
    assert torch.equal(decode(loaded, prompt, NGramDrafter(), 3)[0], decode(loaded, prompt)[0])


def test_flat_round_trip_sampling_is_seed_identical(flat_pair):
    target, path = flat_pair
    loaded = load_step_lm(path)
    prompt = target.layout.prompt([7, 8])
    sampling = SamplingConfig(temperature=1.0, top_k=4)
    want, _ = decode(target, prompt, NGramDrafter(), 3, sampling, seed=11)
    got, _ = decode(loaded, prompt, NGramDrafter(), 3, sampling, seed=11)
    assert torch.equal(got, want)


def test_loaded_codec_lm_embeds_codes_like_the_original(codec_pair):
    """Regression: transformers 5.x re-created non-persistent buffers with ``torch.empty_like`` in
    ``from_pretrained``, so per-codebook embedding offsets kept in such a buffer came back as
    uninitialised memory (IndexError, or silently wrong embeddings); kept for our own loader."""
    target, path = codec_pair
    layout = target.layout
    codes = torch.arange(2 * layout.n_codebooks).reshape(1, 2, layout.n_codebooks) % layout.vocab_size
    codes[0, 1] = layout.pad_id
    want = target.model.embed(None, codes)
    for model in (load_step_lm(path).model, CodecLM.from_folder(path)):
        torch.testing.assert_close(model.embed(None, codes), want, rtol=0, atol=0)


def test_codec_round_trip(codec_pair):
    target, path = codec_pair
    loaded = load_step_lm(path)
    assert isinstance(loaded, CodecStepLM)
    assert isinstance(loaded.layout, DelayLayout)
    assert loaded.layout == target.layout
    assert loaded.layout.delays == (0, 1, 2) and loaded.layout.min_frames == 4
    assert_same_weights(loaded.model, target.model)
    prompt = target.layout.prompt([1, 2, 3])
    for drafter, gamma in ((None, 0), (NGramDrafter(), 3)):
        want, want_frames = decode(target, prompt, drafter, gamma)
        got, got_frames = decode(loaded, prompt, drafter, gamma)
        assert torch.equal(got, want), f"γ={gamma}"
        assert torch.equal(got_frames, want_frames)


def test_codec_folder_loads_as_a_codec_lm_without_transformers(codec_pair):
    target, path = codec_pair
    config = CodecLMConfig.read(path)
    assert config.layout == target.layout
    model = CodecLM.from_folder(path)
    assert_same_weights(model, target.model)  # the state dict: persistent tensors only
    assert isinstance(load_step_lm(path), CodecStepLM)


def test_a_loaded_codec_folder_decodes_the_same_frames(codec_pair):
    target, path = codec_pair
    model = CodecLM.from_folder(path)
    prompt = target.layout.prompt([1, 2, 3])
    want, _ = decode(target, prompt)
    got, _ = decode(CodecStepLM(model), prompt)
    assert torch.equal(got, want)


@pytest.mark.parametrize("kind", ["flat", "codec"])
def test_model_drafter_from_a_loaded_folder(kind, flat_pair, codec_pair, tmp_path):
    target, _ = flat_pair if kind == "flat" else codec_pair
    draft = flat_draft(target) if kind == "flat" else codec_draft(target)
    save_model(draft.model, tmp_path)
    drafter = build_drafter("draft-model", {"draft-model": str(tmp_path)})
    assert isinstance(drafter, ModelDrafter)
    assert drafter.layout == target.layout
    assert drafter.lm.model.config.num_hidden_layers == 1
    prompt = target.layout.prompt([3, 4, 5] if kind == "flat" else [1, 2, 3])
    plain, plain_frames = decode(target, prompt)
    gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=3, max_steps=MAX_STEPS)).generate(prompt)
    frames = gen.run()
    assert torch.equal(gen.generated, plain)
    assert torch.equal(frames, plain_frames)
    assert gen.stats.drafted > 0 and gen.stats.accepted > 0  # the loaded drafter really drafted
    # the loaded drafter behaves like the in-memory one
    same = SpecDecoder(target, ModelDrafter(draft), DecodeConfig(GREEDY, gamma=3, max_steps=MAX_STEPS)).generate(prompt)
    same.run()
    assert same.stats.accepted == gen.stats.accepted and same.stats.drafted == gen.stats.drafted


@pytest.fixture(scope="module")
def bare_flat(tmp_path_factory):
    """A plain Llama folder with no stored layout (like a third-party checkpoint)."""
    target = tiny_flat(seed=2, min_frames=2)
    delattr(target.model.config, LAYOUT_KEY)
    path = tmp_path_factory.mktemp("bare")
    save_model(target.model, path)
    with open(path / "config.json") as f:
        assert LAYOUT_KEY not in json.load(f)
    return target, str(path)


@pytest.mark.parametrize("as_dict", [True, False])
def test_explicit_layout_override(bare_flat, as_dict):
    target, path = bare_flat
    layout = target.layout.to_dict() if as_dict else target.layout
    loaded = load_step_lm(path, layout=layout)
    assert isinstance(loaded, HFCausalLM) and loaded.layout == target.layout
    prompt = target.layout.prompt([5, 6, 7])
    want, _ = decode(target, prompt, NGramDrafter(), 3)
    got, _ = decode(loaded, prompt, NGramDrafter(), 3)
    assert torch.equal(got, want)


def test_explicit_layout_overrides_a_stored_one(flat_pair):
    target, path = flat_pair
    other = FlatLayout(**{**{k: v for k, v in target.layout.to_dict().items() if k != "kind"}, "min_frames": 9})
    loaded = load_step_lm(path, layout=other.to_dict())
    assert loaded.layout == other != target.layout


def test_big_folders_are_saved_in_shards_that_load_back_exactly(tmp_path):
    from voicespec.folders import INDEX_NAME, WEIGHTS_NAME
    from voicespec.weights import load_weights, save_folder

    module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
    save_folder(tmp_path, {"kind": "test"}, module, shard_bytes=20_000)
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and not (tmp_path / WEIGHTS_NAME).exists() and (tmp_path / INDEX_NAME).is_file()
    copy = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
    load_weights(tmp_path, copy)
    assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), copy.state_dict().values()))

    save_folder(tmp_path, {"kind": "test"}, module)  # small enough for one file: the old shards go
    assert [p.name for p in tmp_path.glob("*.safetensors")] == [WEIGHTS_NAME] and not (tmp_path / INDEX_NAME).exists()

    save_folder(tmp_path, {"kind": "test"}, module, shard_bytes=20_000)
    shards[-1].write_bytes(shards[-1].read_bytes()[:50])
    with pytest.raises(ValueError, match="corrupt"):
        load_weights(tmp_path, copy)


# --- bad folders -------------------------------------------------------------------------------


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
    save_model(model, path)
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
    import transformers

    class Reached(Exception):
        pass

    def fake_from_pretrained(path, *a, **kw):
        raise Reached(path)

    monkeypatch.chdir(tmp_path)  # make sure no such local folder exists
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", fake_from_pretrained)
    with pytest.raises(Reached):
        load_step_lm("some-org/some-tts-model")


def test_loading_draws_no_initial_weights_and_only_in_its_own_thread(codec_pair):
    """``from_folder`` builds without random initialisation (every weight is loaded), so it consumes
    nothing of the random stream even outside its fork; another thread building meanwhile draws as usual."""
    import threading

    from voicespec.weights import SkippedRandomInit

    target, path = codec_pair
    draws = []
    with SkippedRandomInit():
        torch.manual_seed(5)
        CodecLM(CodecLMConfig.read(path))
        draws.append(torch.rand(1))
        # the mode is per thread: a thread building now initialises as it would without it
        def build():
            torch.manual_seed(1)
            draws.append(torch.nn.Linear(8, 8).weight.clone())
        t = threading.Thread(target=build)
        t.start()
        t.join()
    torch.manual_seed(5)
    assert torch.equal(draws[0], torch.rand(1))  # nothing drawn by the build
    torch.manual_seed(1)
    assert torch.equal(draws[1], torch.nn.Linear(8, 8).weight)
    loaded, saved = CodecLM.from_folder(path).state_dict(), target.model.state_dict()
    assert loaded.keys() == saved.keys() and all(torch.equal(loaded[k], saved[k]) for k in saved)
