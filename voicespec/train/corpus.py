"""A deterministic, license-clean English sentence corpus for the teacher TTS.

Every sentence comes from the template grammar in this file and its word lists (``words.json``),
written for this project (our own text, Apache-2.0 like the rest of the repository): no outside
prose is copied, and the only facts it uses are common first names, surnames, city names and
month/weekday names. Text and order depend only on ``seed`` (Python's ``random.Random``, no
``hash()``), so a corpus can be rebuilt anywhere; ``CORPUS_VERSION`` changes whenever the grammar
(code or word lists) would produce different text.

Sentences are varied on purpose: narrative, dialogue in quotes, questions, exclamations,
commands, lists, very short replies, and numbers written in digits (money, times, dates, years,
counts, percentages, decimals, ordinals, addresses) that ``voicespec.frontend.text`` spells out. Each
``Sentence`` keeps the raw text and the normalized text the model will read
(``normalize(sanitize(raw))``); sentences whose words only differ by punctuation count as
duplicates and are dropped.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterator

from voicespec.frontend.text import DEFAULT_ALPHABET, normalize, sanitize
from voicespec.train import vocab

CORPUS_VERSION = 2  # 2: broad vocabulary (CMUdict, Faker lists) and unseen words held out
MAX_WORDS = 25
MAX_CHARS = 200  # the front end's sentence limit: longer normalized text would be split

# --- vocabulary --------------------------------------------------------------------------------

def _word_lists() -> dict[str, Any]:
    """The grammar's word lists: ``words.json`` next to this module (package data), read once, at
    import. Pairs become tuples below: VERB_PHRASES (base form, past form) and EXPERIENCES (noun,
    past participle); SPEECH_VERBS maps a sentence's final punctuation to the verbs that fit it."""
    with resources.files("voicespec.train").joinpath("words.json").open(encoding="utf-8") as f:
        return json.load(f)


_lists = _word_lists()
FIRST_NAMES: list[str] = _lists["FIRST_NAMES"]
SURNAMES: list[str] = _lists["SURNAMES"]
TITLES: list[str] = _lists["TITLES"]
CITIES: list[str] = _lists["CITIES"]
STREETS: list[str] = _lists["STREETS"]
MONTHS: list[str] = _lists["MONTHS"]
MONTH_ABBR: list[str] = _lists["MONTH_ABBR"]
WEEKDAYS: list[str] = _lists["WEEKDAYS"]
PEOPLE: list[str] = _lists["PEOPLE"]
PRONOUN_SUBJECTS: list[str] = _lists["PRONOUN_SUBJECTS"]
VERB_PHRASES: list[tuple[str, str]] = [tuple(pair) for pair in _lists["VERB_PHRASES"]]
ADVERBIALS: list[str] = _lists["ADVERBIALS"]
WHEN: list[str] = _lists["WHEN"]
CLAUSES: list[str] = _lists["CLAUSES"]
PLACE_NOUNS: list[str] = _lists["PLACE_NOUNS"]
STATE_ADJ: list[str] = _lists["STATE_ADJ"]
COPULAS: list[str] = _lists["COPULAS"]
SMELLS: list[str] = _lists["SMELLS"]
WEATHER: list[str] = _lists["WEATHER"]
THINGS: list[str] = _lists["THINGS"]
PLURALS: list[str] = _lists["PLURALS"]
EVENTS: list[str] = _lists["EVENTS"]
TRANSPORT: list[str] = _lists["TRANSPORT"]
TIME_PHRASES: list[str] = _lists["TIME_PHRASES"]
ITEMS: list[str] = _lists["ITEMS"]
MARKET_ITEMS: list[str] = _lists["MARKET_ITEMS"]
NICE_ADJ: list[str] = _lists["NICE_ADJ"]
NOUNS: list[str] = _lists["NOUNS"]
EXPERIENCES: list[tuple[str, str]] = [tuple(pair) for pair in _lists["EXPERIENCES"]]
SPEECH_VERBS: dict[str, list[str]] = _lists["SPEECH_VERBS"]
SHORT: list[str] = _lists["SHORT"]
GREETINGS: list[str] = _lists["GREETINGS"]
del _lists


# --- helpers -----------------------------------------------------------------------------------

def _cap(s: str) -> str:
    """Capitalize the first letter (after any opening quote)."""
    m = re.search(r"[A-Za-z]", s)
    return s if m is None else s[: m.start()] + s[m.start()].upper() + s[m.start() + 1 :]


def _article(word: str) -> str:
    return ("an " if word[0].lower() in "aeiou" else "a ") + word


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _name(r: random.Random) -> str:
    x = r.random()
    if x < 0.55:
        return r.choice(FIRST_NAMES)
    if x < 0.8:
        return f"{r.choice(TITLES)} {r.choice(SURNAMES)}"
    return f"{r.choice(FIRST_NAMES)} {r.choice(SURNAMES)}"


def _subject(r: random.Random) -> str:
    x = r.random()
    if x < 0.4:
        return _name(r)
    if x < 0.8:
        return r.choice(PEOPLE)
    return r.choice(PRONOUN_SUBJECTS)


def _vp(r: random.Random) -> tuple[str, str]:
    return r.choice(VERB_PHRASES)


def _time(r: random.Random) -> str:
    h, m = r.randint(1, 12), r.choice([0, 5, 10, 15, 20, 25, 30, 40, 45, 50, 55, r.randint(0, 59)])
    return f"{h}:{m:02d}" + (" " + r.choice(["a.m.", "p.m."]) if r.random() < 0.7 else "")


def _money(r: random.Random) -> str:
    x = r.random()
    cur = "$" if x < 0.75 else ("£" if x < 0.88 else "€")
    if r.random() < 0.5:
        return f"{cur}{r.randint(1, 99)}.{r.randint(1, 99):02d}"
    if r.random() < 0.7:
        return f"{cur}{r.randint(1, 500)}"
    return f"{cur}{r.randint(1, 99) * r.choice([100, 250, 1000]):,}"


def _date(r: random.Random, year: bool | None = None) -> str:
    month = r.choice(MONTHS) if r.random() < 0.85 else r.choice(MONTH_ABBR)
    d = f"{month} {_ordinal(r.randint(1, 28 if month.startswith('Feb') else 30))}"
    if year or (year is None and r.random() < 0.5):
        d += f", {r.randint(1850, 2030)}"
    return d


# --- generators, one per kind --------------------------------------------------------------------

def _narrative(r: random.Random) -> str:
    x = r.random()
    if x < 0.55:
        s = f"{_subject(r)} {_vp(r)[1]}"
        if r.random() < 0.7:
            s += " " + r.choice(ADVERBIALS)
        if r.random() < 0.5:
            s += (", " if r.random() < 0.5 else " ") + r.choice(CLAUSES)
        return _cap(s) + "."
    if x < 0.75:
        s = f"The {r.choice(PLACE_NOUNS)} {r.choice(COPULAS)} {r.choice(STATE_ADJ)}"
        if r.random() < 0.5:
            s += " " + r.choice(ADVERBIALS)
        return s + "."
    if x < 0.62:
        return f"{r.choice(WEATHER)}" + (f", and the air smelled of {r.choice(SMELLS)}" if r.random() < 0.5 else f" {r.choice(WHEN)}") + "."
    if x < 0.7:
        return _cap(f"{r.choice(ADVERBIALS)}, {_subject(r)} {_vp(r)[1]}") + "."
    a, b = _vp(r), _vp(r)
    if x < 0.78:
        return _cap(f"{_subject(r)} {a[1]} and {b[1]}") + "."
    if x < 0.88:  # the long ones
        return _cap(f"{_subject(r)} {a[1]} {r.choice(ADVERBIALS)}, {r.choice(CLAUSES)}, and then {b[1]} {r.choice(ADVERBIALS)}") + "."
    if x < 0.94:
        return _cap(f"after {_subject(r)} {a[1]}, {_subject(r)} {b[1]} {r.choice(ADVERBIALS)} {r.choice(CLAUSES)}") + "."
    return _cap(f"{r.choice(WEATHER).lower()} {r.choice(WHEN)}, so {_subject(r)} {a[1]} and {b[1]}") + "."


def _question(r: random.Random) -> str:
    vp = _vp(r)[0]
    forms: list[Callable[[], str]] = [
        lambda: f"Did you {vp}?",
        lambda: f"Did {_subject(r)} {vp} {r.choice(ADVERBIALS)}?",
        lambda: f"Have you ever been to {r.choice(CITIES)}?",
        lambda: f"Where did you put the {r.choice(THINGS)}?",
        lambda: f"What time does the {r.choice(TRANSPORT)} leave?",
        lambda: f"How long does it take to get to {r.choice(CITIES)}?",
        lambda: f"Why is the {r.choice(PLACE_NOUNS)} so {r.choice(['quiet', 'dark', 'cold', 'crowded', 'empty', 'noisy', 'warm'])}?",
        lambda: f"Who is going to {vp}?",
        lambda: f"Can you {vp} {r.choice(TIME_PHRASES)}?",
        lambda: f"Could you please {vp}?",
        lambda: f"Would you like to {vp} {r.choice(TIME_PHRASES)}?",
        lambda: f"Is {_name(r)} coming to the {r.choice(EVENTS)}?",
        lambda: f"Are we still meeting {r.choice(TIME_PHRASES)}?",
        lambda: f"You {_vp(r)[1]}, didn't you?",
        lambda: f"What do you think of the new {r.choice(PLACE_NOUNS)}?",
        lambda: f"How many {r.choice(PLURALS)} do we need for the {r.choice(EVENTS)}?",
        lambda: f"Do you know where {_name(r)} lives?",
        lambda: f"Shall we {vp} {r.choice(ADVERBIALS)}?",
        lambda: f"Why did {_subject(r)} {vp}?",
        lambda: f"When does the {r.choice(EVENTS)} start?",
        lambda: f"Which way is the {r.choice(PLACE_NOUNS)}?",
        lambda: f"Has anyone seen my {r.choice(THINGS)}?",
        lambda: f"Is it true that {_subject(r)} {_vp(r)[1]}?",
        lambda: f"What would you do if {_subject(r)} {_vp(r)[1]}?",
        lambda: f"Do you remember the day {_subject(r)} {_vp(r)[1]} {r.choice(ADVERBIALS)}?",
        lambda: f"If {_subject(r)} {_vp(r)[1]} {r.choice(ADVERBIALS)}, why didn't anyone {_vp(r)[0]}?",
        lambda: f"Would you rather {_vp(r)[0]} {r.choice(TIME_PHRASES)} or {_vp(r)[0]} {r.choice(TIME_PHRASES)}?",
    ]
    return _cap(r.choice(forms)())


def _exclamation(r: random.Random) -> str:
    forms: list[Callable[[], str]] = [
        lambda: f"What {_article(r.choice(NICE_ADJ))} {r.choice(NOUNS)}!",
        lambda: f"How {r.choice(NICE_ADJ)} the {r.choice(NOUNS)} looks!",
        lambda: f"I can't believe {_subject(r)} {_vp(r)[1]}!",
        lambda: f"Oh no, {r.choice(['I', 'we', 'they', 'you'])} {_vp(r)[1]}!",
        lambda: "That was the {} {} I've ever {}!".format(r.choice(['best', 'worst', 'strangest', 'loudest', 'longest', 'oddest']),
                                                           *r.choice(EXPERIENCES)),
        lambda: f"{_name(r)}, come here right now!",
        lambda: f"{r.choice(GREETINGS)}, {_name(r)}!",
        lambda: f"What a surprise to see you in {r.choice(CITIES)}!",
        lambda: f"Look at the {r.choice(PLACE_NOUNS)}, it's {r.choice(['beautiful', 'so bright', 'full of people', 'completely empty', 'on fire'])}!",
        lambda: f"We finally {_vp(r)[1]}!",
        lambda: f"Don't {_vp(r)[0]}!",
        lambda: f"Watch out for the {r.choice(['car', 'step', 'dog', 'ice', 'bicycle', 'wet floor'])}!",
        lambda: f"This is {r.choice(['wonderful', 'ridiculous', 'perfect', 'unbelievable', 'fantastic', 'a disaster'])}!",
    ]
    return _cap(r.choice(forms)())


def _imperative(r: random.Random) -> str:
    vp = _vp(r)[0]
    forms: list[Callable[[], str]] = [
        lambda: f"Please {vp} {r.choice(ADVERBIALS)}.",
        lambda: f"Don't forget to {vp}.",
        lambda: f"Remember to {vp} before you leave.",
        lambda: f"Turn {r.choice(['left', 'right'])} at the {r.choice(['corner', 'bakery', 'bridge', 'traffic lights', 'church'])}.",
        lambda: f"Let's {vp} {r.choice(TIME_PHRASES)}.",
        lambda: f"Try to {vp} without making a sound.",
        lambda: f"Make sure you {vp} first.",
        lambda: f"{_name(r)}, please {vp}.",
        lambda: f"If it starts to rain, {vp} and wait inside.",
        lambda: f"Ask {_name(r)} to {vp} {r.choice(TIME_PHRASES)}.",
    ]
    return _cap(r.choice(forms)())


def _utterance(r: random.Random) -> str:
    """Something a character says (ends in . ? or !)."""
    x = r.random()
    if x < 0.3:
        return _question(r)
    if x < 0.45:
        return _exclamation(r)
    if x < 0.55:
        return _imperative(r)
    if x < 0.65:
        return r.choice(SHORT)
    vp = _vp(r)
    forms = [
        f"I think we should {vp[0]} {r.choice(TIME_PHRASES)}.",
        f"We need to leave {r.choice(['now', 'soon', 'before it gets dark', 'right away'])}.",
        "I've never seen anything like it.",
        f"I'll be back in {r.choice(['a minute', 'an hour', 'ten minutes', 'two days', 'a moment'])}.",
        f"You were right about the {r.choice(THINGS)}.",
        f"I {vp[1]} {r.choice(ADVERBIALS)}.",
        f"{_name(r)} {vp[1]}, and nobody told me.",
        f"It's too late to {vp[0]}.",
        "That's not what I meant.",
        f"The {r.choice(PLACE_NOUNS)} {r.choice(COPULAS)} {r.choice(STATE_ADJ)}.",
        f"I'd rather {vp[0]} {r.choice(TIME_PHRASES)}.",
    ]
    s = _cap(r.choice(forms))
    if r.random() < 0.2:  # two sentences in one breath
        s += " " + _cap(r.choice([_utterance(r), r.choice(SHORT)]))
    return s


def _speaker(r: random.Random) -> str:
    x = r.random()
    if x < 0.45:
        return _name(r)
    if x < 0.75:
        return r.choice(["she", "he", "they", "I", "someone"])
    return r.choice(PEOPLE)


def _continued(u: str) -> str:
    """A quote's second half goes on in lower case, except for "I" and names."""
    head = u.split()[0].strip(",.!?'")
    keep = head in ("I", "I'm", "I'll", "I've", "I'd") or u.startswith("I'") or head in FIRST_NAMES or head + "." in TITLES
    return u if keep else u[0].lower() + u[1:]


def _dialogue(r: random.Random) -> str:
    u = _utterance(r)
    end = u[-1]
    verb = r.choice(SPEECH_VERBS[end])
    spk = _speaker(r)
    x = r.random()
    if x < 0.5:  # "Come in," she said.
        quoted = u[:-1] + "," if end == "." else u
        tail = f"{spk} {verb}" if r.random() < 0.7 or spk in ("I", "she", "he", "they", "someone") else f"{verb} {spk}"
        return f'"{quoted}" {tail}.'
    if x < 0.8:  # She said, "Come in."
        return _cap(f'{spk} {verb}, "{u}"')
    # "Wait," she said, "I forgot the keys."
    first = r.choice(["Wait", "Listen", "Well", "Honestly", "Look", "Oh", "Yes", "No", "Please", "Okay"])
    return f'"{first}," {spk} {verb}, "{_continued(u)}"'


def _numbers(r: random.Random) -> str:
    n = r.randint(2, 99)
    forms: list[Callable[[], str]] = [
        lambda: f"The {r.choice(ITEMS)} costs {_money(r)}.",
        lambda: f"{_subject(r)} paid {_money(r)} for the {r.choice(ITEMS)}.",
        lambda: f"Tickets are ${r.randint(5, 60)} for adults and ${r.randint(1, 20)} for children.",
        lambda: f"We raised ${r.randint(2, 95) * 500:,} for the new {r.choice(['library', 'playground', 'roof', 'clinic', 'school bus'])}.",
        lambda: f"The {r.choice(EVENTS)} starts at {_time(r)}.",
        lambda: f"{_subject(r)} woke up at {_time(r)} {r.choice(['and made coffee', 'without an alarm', 'and went for a run', 'feeling tired'])}.",
        lambda: f"The last {r.choice(TRANSPORT)} leaves at {_time(r)}.",
        lambda: f"Let's meet at {r.randint(1, 12)} {r.choice(['a.m.', 'p.m.'])} by the {r.choice(['fountain', 'station', 'bakery', 'main gate', 'clock tower'])}.",
        lambda: f"The store closes at {_time(r)} on {r.choice(WEEKDAYS)}s.",
        lambda: f"{_name(r)} was born on {_date(r, year=True)}.",
        lambda: f"The {r.choice(['store', 'museum', 'pool', 'library', 'bridge'])} reopens on {_date(r)}.",
        lambda: f"On {_date(r, year=True)}, the {r.choice(['bridge', 'station', 'school', 'hospital', 'factory'])} finally opened.",
        lambda: f"The deadline is {r.choice(WEEKDAYS)}, {_date(r, year=False)}.",
        lambda: f"In {r.randint(1850, 2030)}, {_subject(r)} {_vp(r)[1]}.",
        lambda: f"There were {r.randint(2, 999)} people in the {r.choice(['hall', 'stadium', 'church', 'square', 'room'])}.",
        lambda: f"The recipe calls for {r.randint(2, 12)} cups of flour and {r.randint(1, 6)} eggs.",
        lambda: f"{_subject(r)} walked {r.randint(2, 40)} miles {r.choice(ADVERBIALS)}.",
        lambda: f"The library has over {r.randint(2, 900) * 100:,} books.",
        lambda: f"The village had only {n} houses and {r.randint(1, 5)} shops.",
        lambda: f"Only {n} of the {n + r.randint(1, 200)} students passed the exam.",
        lambda: f"Chapter {r.randint(1, 60)} begins with a storm.",
        lambda: f"Bus {r.randint(1, 99)} stops near the park every {r.choice([5, 10, 12, 15, 20, 30])} minutes.",
        lambda: f"Room {r.randint(100, 999)} is on the {_ordinal(r.randint(1, 30))} floor.",
        lambda: f"Flight {r.randint(100, 999)} to {r.choice(CITIES)} is delayed by {r.randint(10, 95)} minutes.",
        lambda: f"Please turn to page {r.randint(2, 700)}.",
        lambda: f"Prices rose by {r.randint(2, 40)}% {r.choice(['this year', 'last month', 'in the spring', 'since the summer'])}.",
        lambda: f"About {r.randint(10, 95)}% of the votes were counted by midnight.",
        lambda: f"The temperature dropped to {r.randint(-20, 50)}° overnight.",
        lambda: f"The baby weighed {r.randint(2, 4)}.{r.randint(1, 9)} kilograms.",
        lambda: f"{_subject(r)} ran {r.randint(1, 26)}.{r.randint(1, 9)} miles before breakfast.",
        lambda: f"The average score was {r.randint(40, 99)}.{r.randint(1, 9)} out of {r.choice([100, 120, 150])}.",
        lambda: f"{_name(r)} finished {_ordinal(r.randint(1, 60))} in the race.",
        lambda: f"It was the {_ordinal(r.randint(2, 12))} time this {r.choice(['week', 'month', 'year'])} that {_subject(r)} {_vp(r)[1]}.",
        lambda: f"The shop is at {r.randint(1, 999)} {r.choice(STREETS)}.",
        lambda: f"{r.choice(TITLES)} {r.choice(SURNAMES)} lives at {r.randint(1, 999)} {r.choice(STREETS)}.",
        lambda: f"{_subject(r)} left {r.choice(CITIES)} on {_date(r, year=False)} and arrived at {_time(r)}.",
        lambda: f"The train from {r.choice(CITIES)} was {r.randint(3, 90)} minutes late.",
        lambda: f"We need {r.randint(2, 60)} {r.choice(PLURALS)} by {r.choice(WEEKDAYS)}.",
        lambda: f"The bridge is {r.randint(100, 9000):,} feet long.",
        lambda: f"No. {r.randint(1, 99)} won the {r.choice(['race', 'prize', 'lottery', 'final game'])}.",
        lambda: f"It costs {_money(r)} a {r.choice(['month', 'week', 'night', 'year'])}, which is {r.choice(['too much', 'a bargain', 'fair', 'more than last year'])}.",
    ]
    return _cap(r.choice(forms)())


def _short(r: random.Random) -> str:
    x = r.random()
    if x < 0.5:
        return r.choice(SHORT)
    if x < 0.8:
        return f"{r.choice(GREETINGS)}, {r.choice(FIRST_NAMES)}" + r.choice([".", "!"])
    return f"{r.choice(FIRST_NAMES)}" + r.choice(["?", "!", "."])


def _list(r: random.Random) -> str:
    k = r.choice([3, 3, 4, 4, 5])
    items = r.sample(MARKET_ITEMS, k)
    things = ", ".join(items[:-1]) + ", and " + items[-1]
    forms = [
        f"We bought {things} at the market.",
        f"{_subject(r)} packed {things} for the trip.",
        f"The basket held {things}.",
        f"Don't forget {things}.",
        f"On the list were {things}.",
        f"Did you remember {things}?",
    ]
    return _cap(r.choice(forms))


def _person(r: random.Random) -> str:
    x = r.random()
    if x < 0.4:
        return r.choice(vocab.first_names())
    if x < 0.7:
        return f"{r.choice(vocab.first_names())} {r.choice(vocab.surnames())}"
    return f"{r.choice(TITLES)} {r.choice(vocab.surnames())}"


def _company(r: random.Random) -> str:
    a, b = r.sample(vocab.surnames(), 2)
    return r.choice([f"{a} {r.choice(vocab.company_suffixes())}", f"{a} and {b}", f"{a}, {b} and Partners"])


def _people(r: random.Random) -> str:
    """Faker's names, jobs, places and companies in everyday frames."""
    p, job, place = _person(r), r.choice(vocab.jobs()), r.choice(vocab.places())
    forms: list[Callable[[], str]] = [
        lambda: f"{p} works as {_article(job)} in {place}.",
        lambda: f"{p}, {_article(job)} from {place}, joined {_company(r)} on {_date(r)}.",
        lambda: f"Have you met {p}? She moved to {place} last {r.choice(MONTHS)}.",
        lambda: f"Please call {p} at {_company(r)} before {_time(r)}.",
        lambda: f"{_company(r)} hired {r.randint(2, 90)} new staff in {place}.",
        lambda: f"Is {p} still {_article(job)}?",
        lambda: f"Our new {job} is {p}.",
        lambda: f"{p} and {_person(r)} flew from {place} to {r.choice(vocab.places())}.",
        lambda: f"Send the letter to {p}, {r.randint(1, 999)} {r.choice(STREETS)}, {place}.",
    ]
    return _cap(r.choice(forms)())


def _words(r: random.Random, k: int) -> list[str]:
    """``k`` training-allowed words: half common words, half from the whole dictionary."""
    return [r.choice(vocab.common_words() if r.random() < 0.5 else vocab.training_words()) for _ in range(k)]


def _lexicon(r: random.Random) -> str:
    """Dictionary words in simple frames: breadth of spellings and phoneme sequences."""
    w = _words(r, 5)
    forms: list[Callable[[], str]] = [
        lambda: f"The next word is {w[0]}.",
        lambda: f"{_cap(w[0])}, {w[1]}, {w[2]}, and {w[3]}.",
        lambda: f"{_subject(r)} wrote {w[0]} and {w[1]} on the board.",
        lambda: f"Is {w[0]} spelled like {w[1]}?",
        lambda: f"She said {w[0]}, not {w[1]}!",
        lambda: f"Say {w[0]} {w[1]} {w[2]} slowly.",
        lambda: f"The list reads {w[0]}, {w[1]}, {w[2]}, {w[3]} and {w[4]}.",
        lambda: f"{_cap(w[0])} {w[1]} {w[2]} {w[3]}.",
        lambda: f"Why would anyone say {w[0]}?",
        lambda: f"After the {w[0]} came the {w[1]}.",
    ]
    return _cap(r.choice(forms)())


GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "narrative": _narrative,
    "dialogue": _dialogue,
    "question": _question,
    "exclamation": _exclamation,
    "numbers": _numbers,
    "imperative": _imperative,
    "short": _short,
    "list": _list,
    "people": _people,
    "lexicon": _lexicon,
}
WEIGHTS = {"narrative": 0.15, "dialogue": 0.10, "question": 0.10, "exclamation": 0.05, "numbers": 0.14,
           "imperative": 0.05, "short": 0.04, "list": 0.04, "people": 0.13, "lexicon": 0.20}
KINDS = tuple(GENERATORS)


# --- the corpus --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sentence:
    id: str
    kind: str
    raw: str  # as written (digits, abbreviations, quotes)
    text: str  # what the model reads: normalize(sanitize(raw))

    @property
    def words(self) -> int:
        return len(self.raw.split())


def sentence_id(index: int) -> str:
    return f"u{index:06d}"


_ALLOWED = set(DEFAULT_ALPHABET)


def _literal_words(values: object) -> set[str]:
    """Every lower-cased word in the strings (nested in lists, tuples, dicts) of ``values``."""
    if isinstance(values, str):
        return set(re.findall(r"[a-z]+", values.lower()))
    if isinstance(values, dict):
        values = [*values.keys(), *values.values()]
    if isinstance(values, (list, tuple, set, frozenset)):
        return set().union(*(_literal_words(v) for v in values)) if values else set()
    return set()


def core_words() -> frozenset[str]:
    """Words the template grammar and the normalizer write themselves (never held out)."""
    import voicespec.frontend.text as text

    found = set().union(*(_literal_words(v) for k, v in {**vars(text), **globals()}.items() if k.isupper() or k.startswith("_") and k[1:].isupper()))
    return frozenset(found)


def unseen_in(text: str, core: frozenset[str]) -> list[str]:
    """The held-out words (see :mod:`voicespec.train.vocab`) in normalized ``text``."""
    return [w for w in re.findall(r"[a-z]+", text) if vocab.is_unseen(w, core)]


def _dedup_key(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]+", " ", text).split())


def iter_sentences(seed: int = 0, max_words: int = MAX_WORDS, max_tries: int = 20000) -> Iterator[Sentence]:
    """Unique sentences, deterministic given ``seed``, ids ``u000000, u000001, ...``.

    Stops when ``max_tries`` candidates in a row were duplicates (the grammar is exhausted;
    that is far beyond the tens of thousands of sentences a few hours of audio need).
    """
    r = random.Random(seed)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    seen: set[str] = set()
    core = core_words()
    index = misses = 0
    while misses < max_tries:
        kind = r.choices(kinds, weights)[0]
        raw = re.sub(r"\s+", " ", GENERATORS[kind](r)).strip().replace("m..", "m.")
        text = normalize(sanitize(raw))
        key = _dedup_key(text)
        if (not 1 <= len(raw.split()) <= max_words or len(text) > MAX_CHARS or not set(text) <= _ALLOWED
                or key in seen or unseen_in(text, core)):
            misses += 1
            continue
        misses = 0
        seen.add(key)
        yield Sentence(sentence_id(index), kind, raw, text)
        index += 1


def build_corpus(n: int, seed: int = 0) -> list[Sentence]:
    """The first ``n`` sentences of ``iter_sentences(seed)``."""
    out = []
    for s in iter_sentences(seed):
        if len(out) >= n:
            break
        out.append(s)
    return out


def corpus_stats(sentences: list[Sentence]) -> dict:
    """Counts by kind and feature, and the word-length distribution (raw words)."""
    lengths = sorted(s.words for s in sentences)
    n = max(len(sentences), 1)
    def q(p: float) -> int:
        return lengths[min(int(p * len(lengths)), len(lengths) - 1)] if lengths else 0
    buckets = Counter("1-3" if w <= 3 else "4-7" if w <= 7 else "8-12" if w <= 12 else "13-18" if w <= 18 else "19-25"
                      for w in lengths)
    return {
        "sentences": len(sentences),
        "by_kind": dict(Counter(s.kind for s in sentences).most_common()),
        "share_question": sum(s.raw.rstrip('"').endswith("?") or '?"' in s.raw for s in sentences) / n,
        "share_exclamation": sum("!" in s.raw for s in sentences) / n,
        "share_quoted": sum('"' in s.raw for s in sentences) / n,
        "share_digits": sum(any(c.isdigit() for c in s.raw) for s in sentences) / n,
        "share_named": sum(any(w.strip(",.!?\"") in FIRST_NAMES or w.strip(",.!?\"") in SURNAMES for w in s.raw.split())
                           for s in sentences) / n,
        "words": {"min": lengths[0] if lengths else 0, "p10": q(0.1), "median": q(0.5), "p90": q(0.9),
                  "max": lengths[-1] if lengths else 0, "mean": sum(lengths) / n},
        "word_buckets": {b: buckets.get(b, 0) for b in ("1-3", "4-7", "8-12", "13-18", "19-25")},
    }
