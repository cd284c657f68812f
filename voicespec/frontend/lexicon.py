"""Pronunciations a user gives: IPA strings mapped onto a voice's phoneme units, and lexicons
(word → pronunciation) as JSON or W3C PLS files, per voice and per request.

An IPA string is read left to right, longest unit first. Stress marks (``ˈ``, ``ˌ``) stand
before a syllable in IPA and on the vowel in our units, so a mark is carried to the next vowel;
length marks (``ː``) and syllable dots are dropped (the units do not keep them); a tie bar is
optional (``tʃ`` is ``t͡ʃ``). A symbol the voice has no unit for is an error naming its position.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from voicespec.frontend.phonemes import STRESS
from voicespec.frontend.text import TextError

Lexicon = Mapping[str, tuple[str, ...]]  # lower-case word -> the voice's units
DROPPED = {"ː", "ˑ", ".", " ", "‿"}
TIE = "\u0361"
PLS_NS = "{http://www.w3.org/2005/01/pronunciation-lexicon}"
MAX_LEXICON_WORDS = 10_000


class LexiconError(TextError):
    """A pronunciation or lexicon that cannot be used with this voice."""


def units_of_ipa(ipa: str, units: tuple[str, ...]) -> tuple[str, ...]:
    """``ipa`` as the voice's units; TextError names the first symbol it has none for."""
    known = {u.replace(TIE, ""): u for u in units if u.strip()}
    longest = max(map(len, known))
    out: list[str] = []
    stress, i = "", 0
    text = ipa.strip()
    while i < len(text):
        c = text[i]
        if c in STRESS:
            stress, i = c, i + 1
            continue
        if c in DROPPED or c == TIE:
            i += 1
            continue
        for n in range(min(longest, len(text) - i), 0, -1):
            piece = text[i:i + n].replace(TIE, "")
            if piece in known:
                unit = known[piece]
                if stress and (stress + unit) in units:  # a vowel takes the stress the syllable carried
                    unit, stress = stress + unit, ""
                out.append(unit)
                i += n
                break
        else:
            raise LexiconError(f"pronunciation {ipa!r}: no unit of this voice for {c!r} at position {i + 1}")
    if not out:
        raise LexiconError(f"pronunciation {ipa!r} has no phonemes")
    return tuple(out)


def lexicon_of(entries: Mapping[str, str], units: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``{word: ipa}`` as a lexicon for a voice with ``units``; TextError names a bad entry."""
    if not isinstance(entries, Mapping) or len(entries) > MAX_LEXICON_WORDS:
        raise LexiconError(f"a lexicon is an object of at most {MAX_LEXICON_WORDS} words, each mapped to an IPA string")
    out = {}
    for word, ipa in entries.items():
        if not isinstance(word, str) or not isinstance(ipa, str) or not word.strip() or len(word) > 100:
            raise LexiconError(f"lexicon entry {word!r}: a word (1-100 characters) mapped to an IPA string")
        out[word.strip().lower()] = units_of_ipa(ipa, units)
    return out


def read_lexicon(path: str | Path) -> dict[str, str]:
    """A lexicon file: JSON ``{"word": "ipa", ...}`` or a PLS document (``.pls``/``.xml``, IPA)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".pls", ".xml"):
        return parse_pls(text)
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as e:
        raise LexiconError(f"{path}: not JSON ({e})") from None
    if not isinstance(entries, dict):
        raise LexiconError(f"{path}: a lexicon is a JSON object of word -> IPA")
    return entries


def parse_pls(text: str) -> dict[str, str]:
    """The IPA pronunciations of a W3C Pronunciation Lexicon Specification document."""
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise LexiconError("a PLS lexicon may not declare a DOCTYPE or entities")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise LexiconError(f"malformed PLS lexicon: {e}") from None
    alphabet = root.get("alphabet", "ipa")
    if alphabet.lower() != "ipa":
        raise LexiconError(f"PLS alphabet {alphabet!r} is not supported (only ipa)")
    out = {}
    for lexeme in root.iter(f"{PLS_NS}lexeme"):
        phoneme = lexeme.find(f"{PLS_NS}phoneme")
        alias = lexeme.find(f"{PLS_NS}alias")
        if phoneme is None or not (phoneme.text or "").strip():
            if alias is not None:
                continue  # an alias rewrites text; only pronunciations are taken here
            raise LexiconError("a PLS lexeme needs a <phoneme>")
        for grapheme in lexeme.iter(f"{PLS_NS}grapheme"):
            if (grapheme.text or "").strip():
                out[grapheme.text.strip()] = phoneme.text.strip()
    return out
