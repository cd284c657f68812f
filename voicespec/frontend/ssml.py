"""SSML, the subset a TTS user reaches for: ``<speak>``, ``<p>``, ``<s>``, ``<break>``,
``<say-as>``, ``<sub>``, ``<phoneme>`` and ``<prosody rate>``; any other tag is skipped (its text
is still spoken) and listed, as unknown fields are with ``strict: false``.

:func:`parse` turns markup into runs of plain text, each with its speaking rate and the
pronunciations its ``<phoneme>`` words carry, and the silences between them (pure: no voice
needed); :func:`script` reads the runs with a voice's front end into a :class:`Script`, what a
:class:`~voicespec.pipeline.synthesis.SynthesisStream` speaks: sentences, exact silences before
sentences, per-sentence rates and pronunciations. A ``<phoneme>`` word is said as its ``ph``
wherever it stands: it is spoken through a placeholder word only that element uses.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field

from voicespec.frontend.lexicon import units_of_ipa
from voicespec.frontend.text import FrontEnd, TextError, digits_to_words, number_to_words, ordinal_words, year_words

BREAK_STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.4, "strong": 0.7, "x-strong": 1.0}
RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
MAX_BREAK_S = 10.0  # one <break> (as SSML engines cap it)
MAX_PAUSE_S = 60.0  # all of a document's breaks together
LETTERS = {"a": "ay", "b": "bee", "c": "see", "d": "dee", "e": "ee", "f": "eff", "g": "gee", "h": "aitch",
           "i": "eye", "j": "jay", "k": "kay", "l": "el", "m": "em", "n": "en", "o": "oh", "p": "pee", "q": "cue",
           "r": "ar", "s": "ess", "t": "tee", "u": "you", "v": "vee", "w": "double you", "x": "ex", "y": "why",
           "z": "zee"}
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
PLACEHOLDER = "vsph"  # + letters: a word gruut reads as one token, unlike any English word


class SSMLError(TextError):
    """Markup that cannot be read: malformed XML (with its line and column), a bad attribute."""


@dataclass
class Run:
    """Plain text spoken at ``rate`` (relative to the request's speed); ``phonemes``: the IPA of
    each placeholder word in it."""

    text: str = ""
    rate: float = 1.0
    phonemes: dict[str, str] = field(default_factory=dict)
    spoken: dict[str, str] = field(default_factory=dict)  # each placeholder's own words


@dataclass(frozen=True)
class Break:
    seconds: float


@dataclass
class Script:
    """A marked-up text as a stream speaks it. ``pauses[i]``: seconds of silence before sentence
    ``i`` (``len(sentences)``: after the last); ``speeds[i]``: sentence ``i``'s rate relative to
    the request's; ``lexicons[i]``: the pronunciations its words were read with; ``spoken``: each
    placeholder's own words, for timestamps; ``ignored``: the tags skipped."""

    sentences: list[tuple[str, list[int]]] = field(default_factory=list)
    pauses: dict[int, float] = field(default_factory=dict)
    speeds: dict[int, float] = field(default_factory=dict)
    lexicons: dict[int, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    spoken: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()


def is_ssml(text: str) -> bool:
    """Whether ``text`` is an SSML document (its root a ``<speak>`` element)."""
    return bool(re.match(r"\s*(<\?xml[^>]*\?>\s*)?<speak[\s>/]", text))


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _seconds(value: str, what: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*", value)
    if not m:
        raise SSMLError(f"{what}: a time such as 500ms or 1.5s, got {value!r}")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def _rate(value: str) -> float:
    v = value.strip().lower()
    if v in RATES:
        return RATES[v]
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(%?)", v)
    if not m or float(m.group(1)) <= 0:
        raise SSMLError(f"<prosody rate>: x-slow, slow, medium, fast, x-fast, a percentage or a number > 0, got {value!r}")
    return float(m.group(1)) / (100 if m.group(2) else 1)


def say_as(text: str, interpret: str, fmt: str | None) -> str:
    """The words ``<say-as interpret-as=...>`` stands for."""
    t = text.strip()
    digits = re.sub(r"[,\s]", "", t)
    if interpret in ("characters", "spell-out", "verbatim"):
        return " ".join(LETTERS.get(c.lower()) or (digits_to_words(c) if c.isdigit() else c) for c in t if not c.isspace())
    if interpret == "cardinal" and re.fullmatch(r"-?\d+", digits):
        return number_to_words(int(digits))
    if interpret == "ordinal" and re.fullmatch(r"\d+(st|nd|rd|th)?", digits, re.I):
        return ordinal_words(re.sub(r"\D", "", digits))
    if interpret == "digits":
        return " ".join(digits_to_words(c) for c in t if c.isdigit())
    if interpret == "telephone":
        groups = [g for g in re.split(r"[^\d]+", t) if g]
        return ", ".join(" ".join(digits_to_words(c) for c in g) for g in groups)
    if interpret == "date":
        return _date(t, (fmt or "mdy").lower())
    return t  # time and the rest: the front end reads them as written ("2:30 pm")


def _date(text: str, fmt: str) -> str:
    parts = [p for p in re.split(r"[/\-.\s]+", text) if p]
    if len(parts) != len(fmt) or not all(p.isdigit() for p in parts) or set(fmt) - set("dmy"):
        raise SSMLError(f"<say-as interpret-as='date' format={fmt!r}>: {text!r} is not a date in that format")
    value = dict(zip(fmt, map(int, parts)))
    words = []
    if "m" in value:
        if not 1 <= value["m"] <= 12:
            raise SSMLError(f"<say-as interpret-as='date'>: no month {value['m']} in {text!r}")
        words.append(MONTHS[value["m"] - 1])
    if "d" in value:
        words.append(ordinal_words(value["d"]))
    if "y" in value:
        words.append(("," if words else "") + " " + year_words(value["y"]))
    return " ".join(words).replace(" ,", ",").strip()


class _Reader:
    """Walks the element tree into runs and breaks."""

    def __init__(self) -> None:
        self.out: list[Run | Break] = [Run()]
        self.ignored: list[str] = []
        self.pause_s = 0.0
        self.placeholders = 0

    @property
    def run(self) -> Run:
        return self.out[-1]  # type: ignore[return-value]

    def boundary(self, rate: float) -> None:
        """End the run here (a sentence ends); the next one speaks at ``rate``."""
        if self.run.text.strip() or self.run.phonemes:
            self.out.append(Run(rate=rate))
        else:
            self.run.rate = rate

    def text(self, text: str | None, rate: float) -> None:
        if text:
            if self.run.rate != rate:
                self.boundary(rate)
            self.run.text += text

    def element(self, el: ET.Element, rate: float) -> None:
        tag = _local(el.tag)
        if tag == "break":
            seconds = _seconds(el.get("time"), "<break time>") if el.get("time") is not None else \
                BREAK_STRENGTHS.get(el.get("strength", "medium"))
            if seconds is None:
                raise SSMLError(f"<break strength>: one of {', '.join(BREAK_STRENGTHS)}, got {el.get('strength')!r}")
            if seconds > MAX_BREAK_S:
                raise SSMLError(f"<break>: at most {MAX_BREAK_S:g} s, got {seconds:g} s")
            self.pause_s += seconds
            if self.pause_s > MAX_PAUSE_S:
                raise SSMLError(f"the document's breaks add up to more than {MAX_PAUSE_S:g} s")
            self.out.append(Break(seconds))
            self.out.append(Run(rate=rate))
        elif tag in ("say-as", "sub", "phoneme"):
            content = "".join(el.itertext())
            if tag == "say-as":
                interpret = el.get("interpret-as")
                if not interpret:
                    raise SSMLError("<say-as> needs interpret-as")
                self.text(" " + say_as(content, interpret.lower(), el.get("format")) + " ", rate)
            elif tag == "sub":
                if el.get("alias") is None:
                    raise SSMLError("<sub> needs alias")
                self.text(" " + el.get("alias") + " ", rate)
            else:
                alphabet, ph = el.get("alphabet", "ipa").lower(), el.get("ph")
                if alphabet not in ("ipa", "x-ipa") or not ph:
                    raise SSMLError(f"<phoneme> needs ph, in the ipa alphabet (got alphabet {alphabet!r})")
                word = PLACEHOLDER + _letters(self.placeholders)
                self.placeholders += 1
                self.text(f" {word} ", rate)
                self.run.phonemes[word] = ph
                self.run.spoken[word] = content.strip() or word
        else:
            inner = rate
            if tag in ("p", "s"):
                self.boundary(rate)
            elif tag == "prosody":
                inner = rate * _rate(el.get("rate")) if el.get("rate") is not None else rate
                for name in el.attrib:
                    if name != "rate":
                        self.ignored.append(f"prosody {name}")
            elif tag != "speak":
                self.ignored.append(tag)
            self.text(el.text, inner)
            for child in el:
                self.element(child, inner)
                self.text(child.tail, inner)
            if tag in ("p", "s"):
                self.boundary(rate)
            return
        # a leaf handled above: what follows it is read by the parent (its tail)


def _letters(n: int) -> str:
    out = ""
    while True:
        n, r = divmod(n, 26)
        out = chr(ord("a") + r) + out
        if n == 0:
            return out
        n -= 1


def parse(markup: str) -> tuple[list[Run | Break], tuple[str, ...]]:
    """Runs and breaks of an SSML document, and the tags it skipped. SSMLError for markup that
    is not well-formed (its line and column), a root that is not ``<speak>``, or a bad attribute."""
    if re.search(r"<!(DOCTYPE|ENTITY)", markup, re.I):
        raise SSMLError("SSML may not declare a DOCTYPE or entities")
    try:
        root = ET.fromstring(markup)
    except ET.ParseError as e:
        line, column = e.position
        raise SSMLError(f"malformed SSML at line {line}, column {column + 1}: {str(e).split(':')[0]}") from None
    if _local(root.tag) != "speak":
        raise SSMLError(f"the root element of SSML must be <speak>, got <{_local(root.tag)}>")
    reader = _Reader()
    reader.element(root, 1.0)
    pieces = [p for p in reader.out if isinstance(p, Break) or p.text.strip()]
    return pieces, tuple(dict.fromkeys(reader.ignored))


def script(frontend: FrontEnd, markup: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> Script:
    """The :class:`Script` of an SSML document read by ``frontend`` (``lexicon``: pronunciations
    for every word, the voice's and the request's). TextError if nothing in it is speakable."""
    pieces, ignored = parse(markup)
    out = Script(ignored=ignored)
    units = getattr(frontend.tokenizer, "units", None)
    for piece in pieces:
        if isinstance(piece, Break):
            i = len(out.sentences)
            out.pauses[i] = out.pauses.get(i, 0.0) + piece.seconds
            continue
        words = dict(lexicon or {})
        if piece.phonemes:
            if units is None:
                raise SSMLError("this voice reads letters, not phonemes: <phoneme> needs a phoneme voice")
            words.update({w: units_of_ipa(ph, units) for w, ph in piece.phonemes.items()})
            out.spoken.update(piece.spoken)
        try:
            sentences = frontend.sentences(piece.text, words or None)
        except TextError as e:
            if "nothing this voice can speak" not in str(e):
                raise
            continue
        for sentence in sentences:
            i = len(out.sentences)
            out.sentences.append(sentence)
            if piece.rate != 1.0:
                out.speeds[i] = piece.rate
            if words:
                out.lexicons[i] = words
    if not out.sentences:
        raise TextError("the SSML document has nothing this voice can speak")
    return out
