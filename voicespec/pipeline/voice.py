"""A voice: everything needed to turn text into audio, as one folder.

```
voice.json      name, tokenizer, text id offset, sampling defaults, sub-folders, provenance
codec/          the codec (config.json + model.safetensors); voice.json's "codec" may name another
                folder, e.g. a sibling voice's ("../voicespec-tiny/codec"), so voices share one decoder
target/         the codec LM
duration/       the duration predictor, for a target conditioned on a frame-aligned text track
drafters/NAME/  draft models shipped with the voice (optional)
```
Loading checks that the parts fit together (codebooks, vocabulary) so a mismatch is one clear
error at start-up, not garbage audio later.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from voicespec.codec.model import Codec
from voicespec.engine.controller import ControllerMemory
from voicespec.engine.drafters import Drafter
from voicespec.frontend.duration import DurationModel, frame_track, load_duration
from voicespec.engine.layout import FlatLayout, Prompt
from voicespec.engine.step_lm import StepLM
from voicespec.codec.stream import CodecStream
from voicespec.lm.loading import load_step_lm
from voicespec.engine.config import SamplingConfig
from voicespec.frontend.lexicon import LexiconError, lexicon_of, read_lexicon
from voicespec.frontend.ssml import Script, is_ssml, script as ssml_script
from voicespec.frontend.text import FrontEnd, tokenizer_from_dict
from voicespec.frame_blocks import FrameBlocks
from voicespec.options import check_device, check_dtype
from voicespec import paths
from voicespec.pipeline.drafters import build_drafter, drafter_names
from voicespec.pipeline.frame_cache import FrameCache

VOICE_FILE = "voice.json"
LEXICON_FILES = ("lexicon.json", "lexicon.pls")  # a voice's own pronunciations, in its folder
# The shipped voices. The base voice (voice v2: one codec frame a backbone step; what `voicespec train ship`
# makes) holds the codec, the duration predictor and the recognizer that the grouped voice uses too. The
# grouped voice (two frames a step) is the default since stop 57: as intelligible and as natural by every
# judge, and about half the CPU a second of audio (docs/voice.md, "The grouped voice becomes the default").
BASE_VOICE = "voicespec-tiny"
DEFAULT_VOICE = "voicespec-tiny-g2"  # used when none is named


@dataclass(frozen=True)
class VoiceConfig:
    name: str
    tokenizer: dict[str, Any]
    text_offset: int = 0  # LM id of tokenizer id 0 (flat layouts share one vocabulary)
    sampling: dict[str, Any] = field(default_factory=dict)  # SamplingConfig defaults that sound best when sampling
    # How the voice decodes by default: "sampled" (with ``sampling``) or "greedy" (argmax; a request
    # that asks for a temperature samples with the rest of ``sampling``). Evaluations and benchmarks
    # sample with ``sampling`` either way (Voice.sampled).
    decoding: str = "sampled"
    ngram: dict[str, int] = field(default_factory=dict)  # NGramDrafter settings tuned for this voice
    default_drafter: str = "ngram"
    max_frames_per_char: int = 25  # runaway guard: no sentence decodes longer than this
    min_max_frames: int = 100
    duration: str | None = None  # folder of the duration predictor (aligned targets), relative to the voice's
    codec: str = "codec"  # folder of the codec, relative to the voice's (a sibling's: voices that share a codec)
    speaking_rate: float = 1.0  # > 1 speaks faster (aligned targets)
    codec_chunk_frames: int = 1  # frames the codec decodes together when streaming: its first block
    # Later blocks double up to this many (None: every block codec_chunk_frames); the fine stage
    # completes frames at the same block ends (see voicespec/frame_blocks.py)
    codec_chunk_max_frames: int | None = None
    info: dict[str, Any] = field(default_factory=dict)  # provenance and metrics for the model card


DECODINGS = ("sampled", "greedy")  # VoiceConfig.decoding
PART_FOLDERS = ("codec", "duration")  # VoiceConfig's keys that name a folder relative to the voice's
DURATIONS_KEPT = 4096  # sentences whose durations a voice remembers


class Voice:
    def __init__(self, config: VoiceConfig, codec: Codec, target: StepLM, draft_dirs: dict[str, Path],
                 duration: DurationModel | None = None, lexicon: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.codec = codec
        self.target = target
        self.draft_dirs = draft_dirs
        self.duration = duration
        self.folder: Path | None = None  # where it was loaded from (Voice.load): what another process loads it by
        # Each sentence's durations, remembered (least recently used out): the server reads them with
        # the text (serve/text_reader.py), so the decode thread's prefill does not run the predictor
        # (~3 ms a sentence); read in another process, they are handed in (remember_durations)
        self._durations: OrderedDict[tuple[tuple[int, ...], float], tuple[int, ...]] = OrderedDict()
        self._durations_lock = threading.Lock()
        self.tokenizer = tokenizer_from_dict(config.tokenizer)
        self.frontend = FrontEnd(self.tokenizer)
        units = getattr(self.tokenizer, "units", None)
        # the voice's own pronunciations (a lexicon file in its folder): word -> its units
        self.lexicon = lexicon_of(lexicon, units) if lexicon and units else {}
        self.tokenizer.encode("hello")  # load the phonemizer's lexicon now, not on the first request
        self._drafters: dict[str, Drafter] = {}
        self._controller_memory: dict[str, ControllerMemory] = {}
        self.frame_cache: FrameCache | None = None  # decoded sentences to replay (pipeline/frame_cache.py); off by default
        layout = target.layout
        if layout.n_codebooks != codec.n_codebooks or layout.codebook_size != codec.codebook_size:
            raise ValueError(
                f"voice {config.name!r}: the LM speaks {layout.n_codebooks}x{layout.codebook_size} codes "
                f"but the codec has {codec.n_codebooks}x{codec.codebook_size}"
            )
        positions = getattr(getattr(target, "model", None), "config", None)
        self.track_positions = getattr(positions, "track_positions", 0)
        if bool(self.track_positions) != (duration is not None):
            need = "needs a duration predictor" if self.track_positions else "has a duration predictor but its target takes no track"
            raise ValueError(f"voice {config.name!r} {need}")
        if config.decoding not in DECODINGS:
            raise ValueError(f"voice {config.name!r}: decoding must be one of {', '.join(DECODINGS)}, got {config.decoding!r}")
        if not config.speaking_rate > 0:
            raise ValueError(f"voice {config.name!r}: speaking_rate must be positive, got {config.speaking_rate}")
        try:
            self.frame_blocks = FrameBlocks(config.codec_chunk_frames, config.codec_chunk_max_frames)
        except ValueError as e:
            raise ValueError(f"voice {config.name!r}: codec_chunk_frames / codec_chunk_max_frames: {e}") from None
        text_vocab = self._text_vocab()
        if config.text_offset + self.tokenizer.vocab_size > text_vocab:
            raise ValueError(f"voice {config.name!r}: tokenizer ids exceed the LM's text vocabulary ({text_vocab})")

    def _text_vocab(self) -> int:
        layout = self.target.layout
        if isinstance(layout, FlatLayout):
            return layout.audio_offset
        return self.target.model.config.text_vocab_size

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def sampling(self) -> SamplingConfig:
        """How the voice decodes when nothing else is asked for (its ``decoding``)."""
        sampled = self.sampled
        return replace(sampled, temperature=0) if self.config.decoding == "greedy" else sampled

    @property
    def sampled(self) -> SamplingConfig:
        """How the voice samples: its sampled rows in ``evaluate``, its sampling mode in ``bench``."""
        return SamplingConfig(**self.config.sampling)

    def durations(self, token_ids: list[int], speed: float = 1.0) -> list[int] | None:
        """Frames per unit an aligned target is conditioned on (``speed`` > 1 speaks faster than
        the voice's own rate); None for a target that times itself."""
        if self.duration is None:
            return None
        key = (tuple(token_ids), speed)
        with self._durations_lock:
            known = self._durations.get(key)
            if known is not None:
                self._durations.move_to_end(key)
                return list(known)
        durations = self.duration.predict(list(token_ids), speed * self.config.speaking_rate)
        self.remember_durations(token_ids, speed, durations)
        return list(durations)

    def remember_durations(self, token_ids: list[int], speed: float, durations: list[int]) -> None:
        """What :meth:`durations` gives for ``token_ids`` at ``speed``, worked out elsewhere (the
        server's front-end process, which loads the same folder): kept for the next ask."""
        key = (tuple(token_ids), speed)
        with self._durations_lock:
            self._durations[key] = tuple(durations)
            self._durations.move_to_end(key)
            while len(self._durations) > DURATIONS_KEPT:
                self._durations.popitem(last=False)

    def prompt(self, token_ids: list[int], durations: list[int] | None = None) -> Prompt:
        """The LM prompt for one sentence; an aligned target also gets its frame-aligned track
        from ``durations`` (default: :meth:`durations` at the voice's own speed)."""
        ids = [self.config.text_offset + i for i in token_ids]
        if self.duration is None:
            return self.target.layout.prompt(ids)
        durations = self.durations(token_ids) if durations is None else durations
        return self.target.layout.prompt(ids, track=frame_track(ids, durations, self.track_positions))

    def codec_stream(self) -> CodecStream:
        """A streaming codec decoder in this voice's blocks (``codec_chunk_frames``, ``codec_chunk_max_frames``)."""
        return self.codec.streaming_decoder(self.frame_blocks)

    def max_frames(self, n_chars: int) -> int:
        return max(self.config.min_max_frames, self.config.max_frames_per_char * n_chars)

    @property
    def drafter_names(self) -> list[str]:
        return drafter_names(self.draft_dirs, self.target)

    def drafter(self, name: str) -> Drafter | None:
        """A drafter by name: ``none``, ``ngram``, ``auto``, ``early-exit-N`` or one shipped with the voice."""
        if name not in self._drafters:
            weights = next(self.target.model.parameters())  # draft models run where the target runs
            with quiet_loading():
                self._drafters[name] = build_drafter(name, self.draft_dirs, self.config.ngram, owner=f"voice {self.name!r}",
                                                     device=weights.device, dtype=weights.dtype, target=self.target,
                                                     resolve=self.drafter)
        return self._drafters[name]

    def script(self, text: str, *, ssml: bool | None = None, lexicon: Mapping[str, str] | None = None) -> Script:
        """What ``text`` asks to be said: its sentences, and for SSML (``ssml``; None: when its root
        is ``<speak>``) its silences, rates and pronunciations. ``lexicon``: the request's own
        pronunciations (word -> IPA), over the voice's. TextError says what is wrong."""
        words = dict(self.lexicon)
        if lexicon:
            units = getattr(self.tokenizer, "units", None)
            if units is None:
                raise LexiconError(f"voice {self.name!r} reads letters, not phonemes: it takes no lexicon")
            words.update(lexicon_of(lexicon, units))
        if ssml or (ssml is None and is_ssml(text)):
            return ssml_script(self.frontend, text, words)
        sentences = self.frontend.sentences(text, words or None)
        return Script(sentences, lexicons={i: words for i in range(len(sentences))} if words else {})

    def check(self, options: Any) -> None:
        """ValueError if this voice cannot do what ``options`` (:class:`SynthesisOptions`) ask: a
        speed or timestamps without a duration predictor, a tree from a drafter that drafts none.
        The one place these rules live: ``say``, the server and every door call it."""
        if self.duration is None and (options.speed != 1.0 or options.timestamps):
            raise ValueError(f"voice {self.name!r} has no duration predictor: it cannot change its speed or "
                             "send timestamps")
        drafter = options.drafter or self.config.default_drafter
        if options.decode.tree is not None and not getattr(self.drafter(drafter), "drafts_trees", False):
            raise ValueError(f"voice {self.name!r} drafts with {drafter!r}, which drafts no trees (the feature "
                             "drafter does)")

    def controller_memory(self, name: str) -> ControllerMemory:
        """What γ's adaptive controller has learnt for drafter ``name`` on this voice, kept across
        requests (acceptance and costs are properties of the drafter and the machine, not of a request)."""
        return self._controller_memory.setdefault(name, ControllerMemory())

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path | None = None, *, device: str = "auto",
                        dtype: str = "float32") -> Voice:
        """A voice by name (``"voicespec-tiny-g2"``, the default; names are looked up as
        :func:`resolve_voice` says) or folder, loaded quietly (no progress bars, no library warnings)."""
        with quiet_loading():
            return cls.load(resolve_voice(name_or_path), device, dtype)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", dtype: str = "float32") -> Voice:
        """The voice in folder ``path``, its LM (target and draft models) on ``device`` in ``dtype``
        and its codec on ``device`` (``auto``: the GPU if there is one)."""
        path = Path(path)
        device = resolve_device(device)
        config = Voice.read_config(path)
        drafters_dir = path / "drafters"
        draft_dirs = {d.name: d for d in sorted(drafters_dir.iterdir()) if d.is_dir()} if drafters_dir.is_dir() else {}
        duration = load_duration(path / config.duration) if config.duration else None
        target = load_step_lm(str(path / "target"), device=device, dtype=getattr(torch, check_dtype(dtype)))
        lexicons = [path / name for name in LEXICON_FILES if (path / name).is_file()]
        lexicon = read_lexicon(lexicons[0]) if lexicons else None
        voice = cls(config, shared_codec(path / config.codec, device), target, draft_dirs, duration, lexicon)
        voice.folder = path.resolve()
        return voice

    @staticmethod
    def read_config(path: str | Path) -> VoiceConfig:
        """The ``voice.json`` of voice folder ``path``: FileNotFoundError if it has none, ValueError
        if it is not a voice config."""
        cfg_file = Path(path) / VOICE_FILE
        if not cfg_file.is_file():
            raise FileNotFoundError(f"{path}: not a voice folder (no {VOICE_FILE})")
        try:
            return VoiceConfig(**json.loads(cfg_file.read_text()))
        except (json.JSONDecodeError, TypeError) as e:
            raise ValueError(f"{cfg_file}: invalid voice config ({e})") from None

    @staticmethod
    def copy_folder(src: str | Path, dest: str | Path, ignore: Callable[[str, list[str]], Iterable[str]] | None = None) -> None:
        """Copy voice folder ``src`` to ``dest`` (``ignore`` as :func:`shutil.copytree`'s); the parts it
        names outside itself (a sibling voice's codec or duration predictor) are named again from
        ``dest``, so the copy loads where it lands."""
        src, dest = Path(src).absolute(), Path(dest)
        config = Voice.read_config(src)
        shutil.copytree(src, dest, ignore=ignore)
        # Judged by the path as written (a symlinked folder inside is still inside).
        outside = {key: os.path.normpath(src / part) for key in PART_FOLDERS
                   if (part := getattr(config, key)) and (os.path.isabs(part) or Path(os.path.normpath(part)).parts[0] == "..")}
        Voice.write_config(dest, replace(config, **{k: Path(os.path.relpath(p, dest.absolute())).as_posix()
                                                     for k, p in outside.items()}))

    @staticmethod
    def write_config(path: str | Path, config: VoiceConfig) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / VOICE_FILE).write_text(json.dumps(config.__dict__, indent=2) + "\n")


_codecs: weakref.WeakValueDictionary[tuple, Codec] = weakref.WeakValueDictionary()
_codecs_lock = threading.Lock()


def shared_codec(folder: Path, device: str) -> Codec:
    """The codec in ``folder`` on ``device``, loaded once for every voice that names it while any
    of them is loaded (the shipped voices share one: a server holding both keeps one copy). A
    codec is only read at run time; its files changed on disk load anew."""
    folder, device = folder.resolve(), resolve_device(device)
    stats = [(f.name, f.stat()) for f in sorted(folder.iterdir()) if f.is_file()] if folder.is_dir() else []
    key = (str(folder), str(torch.device(device)), tuple((n, st.st_ino, st.st_mtime_ns, st.st_size) for n, st in stats))
    with _codecs_lock:
        codec = _codecs.get(key)
        if codec is None:
            codec = _codecs[key] = Codec.from_folder(folder, device)
        return codec


def resolve_voice(spec: str | Path | None, voices_dirs: Sequence[Path] | None = None) -> Path:
    """A voice folder from a path or a name (None or "default": the default voice), names looked up
    in :func:`voicespec.paths.voices_dirs` (``$VOICESPEC_VOICES``, then the shipped voices)."""
    dirs = paths.voices_dirs() if voices_dirs is None else list(voices_dirs)
    spec = None if spec is None else str(spec)
    if spec and (os.sep in spec or spec.startswith(".") or Path(spec).is_dir()):  # a path, not a name
        if not Path(spec).is_dir():
            raise FileNotFoundError(f"{spec}: no such voice folder")
        return Path(spec)
    name = DEFAULT_VOICE if spec in (None, "default") else spec
    for d in dirs:
        if (d / name / VOICE_FILE).is_file():
            return d / name
    known = voice_names(dirs)
    where = ", ".join(str(d) for d in dirs)
    hint = (f"known voices: {', '.join(known)}" if known else
            "no voices are installed: reinstall voicespec (its wheel ships voicespec-tiny-g2 and voicespec-tiny), or point "
            "VOICESPEC_VOICES at a folder of voice folders")
    raise FileNotFoundError(f"unknown voice {name!r}; looked in {where} ({hint}; a voice may also be given as a folder path)")


def voice_names(voices_dirs: Sequence[Path] | None = None) -> list[str]:
    """The voices that can be named, in lookup order, each once."""
    names: list[str] = []
    for d in paths.voices_dirs() if voices_dirs is None else voices_dirs:
        if d.is_dir():
            names += [p.name for p in sorted(d.iterdir()) if (p / VOICE_FILE).is_file() and p.name not in names]
    return names


def load_voice(spec: str | Path | None, device: str = "cpu", dtype: str = "float32") -> Voice:
    """The voice a user named (a folder, a voice name, or None for the default), loaded quietly."""
    with quiet_loading():
        return Voice.load(resolve_voice(spec), device, dtype)


@contextmanager
def quiet_loading() -> Iterator[None]:
    """No deprecation chatter while a voice loads, nor weight-loading bars from ``transformers``
    where it is in use (our own voices never import it, and this does not either); the caller's own
    settings of ``transformers`` and ``warnings`` are back afterwards."""
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:
        bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*weight_norm.*", category=FutureWarning)
            yield
    finally:
        if hf_logging is not None:
            hf_logging.set_verbosity(level)
            if bars:
                hf_logging.enable_progress_bar()


def resolve_device(device: str) -> str:
    """``auto``: the GPU when torch sees one, else the CPU; any other name, checked, as given."""
    if check_device(device) != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"
