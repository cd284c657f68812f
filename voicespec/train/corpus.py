"""A deterministic, license-clean English sentence corpus for the teacher TTS.

Every sentence comes from the template grammar in this file, which was written for this project
(our own text, Apache-2.0 like the rest of the repository): no outside prose is copied, and the
only facts it uses are common first names, surnames, city names and month/weekday names. Text
and order depend only on ``seed`` (Python's ``random.Random``, no ``hash()``), so a corpus can be
rebuilt anywhere; ``CORPUS_VERSION`` changes whenever the grammar would produce different text.

Sentences are varied on purpose: narrative, dialogue in quotes, questions, exclamations,
commands, lists, very short replies, and numbers written in digits (money, times, dates, years,
counts, percentages, decimals, ordinals, addresses) that ``voicespec.frontend.text`` spells out. Each
``Sentence`` keeps the raw text and the normalized text the model will read
(``normalize(sanitize(raw))``); sentences whose words only differ by punctuation count as
duplicates and are dropped.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator

from voicespec.frontend.text import DEFAULT_ALPHABET, normalize, sanitize
from voicespec.train import vocab

CORPUS_VERSION = 2  # 2: broad vocabulary (CMUdict, Faker lists) and unseen words held out
MAX_WORDS = 25
MAX_CHARS = 200  # the front end's sentence limit: longer normalized text would be split

# --- vocabulary --------------------------------------------------------------------------------

FIRST_NAMES = """Anna Ben Carlos Diana Ethan Fatima George Hannah Ivan Julia Kenji Laura Marcus Nadia
Oliver Priya Quinn Rosa Samuel Tara Umar Vera William Yusuf Zoe Amelia Daniel Grace Henry Isabel
Jack Leo Maya Noah Olivia Peter Ruth Sofia Thomas Wendy Aisha Bruno Chloe Dmitri Elena Felix Gloria
Hugo Ingrid Jamal Keiko Liam Mei Nora Oscar Pablo Rachel Simon Theo Valerie Walter Xavier Yara
Zachary Alice Omar Lucy Mateo Irene Victor Eva Arthur Lena""".split()
SURNAMES = """Smith Johnson Garcia Nguyen Patel Kim O'Brien Rossi Cohen Okafor Larsen Novak Silva Tanaka
Brown Walker Hughes Fischer Moreau Kowalski Reyes Anderson Bennett Campbell Diaz Evans Foster Gupta
Hansen Ibrahim Jensen Khan Lopez Murphy Nakamura Ortiz Park Russo Schmidt Turner Vargas Wright Young
Zhang Morgan Fletcher Sullivan Chandler""".split()
TITLES = ["Mr.", "Mrs.", "Ms.", "Dr.", "Prof."]
CITIES = """Boston|Chicago|Denver|Seattle|Austin|Portland|Atlanta|Phoenix|Miami|Detroit|Toronto|Montreal|
Vancouver|London|Dublin|Edinburgh|Paris|Berlin|Madrid|Lisbon|Rome|Vienna|Prague|Oslo|Stockholm|Helsinki|
Cairo|Nairobi|Lagos|Mumbai|Tokyo|Osaka|Seoul|Sydney|Melbourne|Auckland|Lima|Santiago|Mexico City|
Buenos Aires|San Francisco|New Orleans""".replace("\n", "").split("|")
STREETS = ["Maple Street", "Oak Avenue", "Elm Road", "Pine Lane", "River Road", "Hill Street", "Park Ave.",
           "Mill Lane", "Church Street", "Lake Drive", "Cedar Court", "Sunset Boulevard", "Harbor Road",
           "Station Road", "Willow Way", "Bridge Street"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
MONTH_ABBR = ["Jan.", "Feb.", "Mar.", "Apr.", "Aug.", "Oct.", "Nov.", "Dec."]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

PEOPLE = """the old fisherman|my grandmother|our neighbor|the young teacher|a tired nurse|the captain|
the children|my brother|her cousin|the baker|the night guard|a stranger|the two sisters|the farmer|
his father|the new manager|the librarian|a small boy|the bus driver|everyone in the village|
the students|the mayor|my aunt|the doctor|the old woman|our guide|the twins|the shopkeeper|
a young musician|the painter|the engineer|my best friend|the waiter|the pilot""".replace("\n", "").split("|")
PRONOUN_SUBJECTS = ["I", "we", "you", "she", "he", "they"]

# (base form | past form) verb phrases.
VERB_PHRASES = [tuple(v.split("|")) for v in """open the window|opened the window
close the curtains|closed the curtains
carry the boxes upstairs|carried the boxes upstairs
find a letter under the door|found a letter under the door
paint the fence|painted the fence
fix the old radio|fixed the old radio
bake a loaf of bread|baked a loaf of bread
read the newspaper|read the newspaper
walk the dog|walked the dog
feed the cat|fed the cat
wash the dishes|washed the dishes
miss the last bus|missed the last bus
lose the keys again|lost the keys again
plant tomatoes in the garden|planted tomatoes in the garden
climb the hill|climbed the hill
cross the bridge|crossed the bridge
call the doctor|called the doctor
answer the phone|answered the phone
build a small boat|built a small boat
sell the old car|sold the old car
buy fresh vegetables|bought fresh vegetables
cook dinner for everyone|cooked dinner for everyone
clean the kitchen|cleaned the kitchen
play the piano|played the piano
sing a quiet song|sang a quiet song
tell a strange story|told a strange story
hear a noise in the attic|heard a noise in the attic
see a fox in the yard|saw a fox in the yard
catch the early train|caught the early train
pack a small suitcase|packed a small suitcase
leave the lights on|left the lights on
forget the umbrella|forgot the umbrella
borrow a ladder from the neighbors|borrowed a ladder from the neighbors
return the library books|returned the library books
repair the roof|repaired the roof
sweep the porch|swept the porch
light a fire|lit a fire
wait for the rain to stop|waited for the rain to stop
take a photograph of the lake|took a photograph of the lake
draw a map of the town|drew a map of the town
count the chairs|counted the chairs
fold the laundry|folded the laundry
check the weather|checked the weather
lock the front door|locked the front door
water the plants|watered the plants
visit an old friend|visited an old friend
finish the report|finished the report
ride a bicycle to work|rode a bicycle to work
drive to the coast|drove to the coast
swim across the lake|swam across the lake
pick apples in the orchard|picked apples in the orchard
mend a torn shirt|mended a torn shirt
study for the exam|studied for the exam
order a cup of tea|ordered a cup of tea
wrap the presents|wrapped the presents
empty the trash|emptied the trash
chop some wood|chopped some wood
set the table|set the table
win the race|won the race
fill the bucket with water|filled the bucket with water
move the piano|moved the piano
feed the ducks|fed the ducks
rent a cabin by the lake|rented a cabin by the lake
learn a new song|learned a new song
change the tire|changed the tire
sign the papers|signed the papers""".splitlines()]

ADVERBIALS = """before dinner|after lunch|in the morning|late at night|early on Sunday|on the way home|
after the storm|near the river|in the rain|without a word|with great care|as quickly as possible|
for the first time|once again|at the last minute|behind the station|in the garden|at the end of the day|
during the long winter|on a cold afternoon|in silence|by the old mill|next to the bakery|
under a gray sky|last week|yesterday|this morning|two days later|the next morning|
just after sunrise|in the middle of the night|before the guests arrived|on the first warm day of spring|
while it was still dark""".replace("\n", "").split("|")
WHEN = ["last night", "this morning", "after midnight", "all weekend", "on Tuesday", "for three days",
        "before dawn", "that evening", "during the festival", "early in the week"]
CLAUSES = """because it was getting late|while the kettle boiled|although nobody had asked|
and then sat down to rest|but the door was locked|so that nobody would worry|before anyone noticed|
as the sun went down|even though it was raining|and nobody said a word|while the others were asleep|
because the shop was closed|and the house felt warm again|but it was already too late|
when the bell rang|until the light faded|as if nothing had happened|and everyone laughed|
but the dog refused to move|so the evening ended early|while the radio played softly|
because the road was flooded|and the rest of the day was quiet""".replace("\n", "").split("|")
PLACE_NOUNS = """kitchen|station|garden|library|market|harbor|classroom|hallway|old house|village square|
forest|road|sky|river|beach|museum|office|bakery|waiting room|attic|theater|train|hospital corridor|
playground|bridge|valley|parking lot|church|hotel lobby|cellar""".replace("\n", "").split("|")
STATE_ADJ = """quiet|crowded|dark|warm|cold|empty|bright|noisy|peaceful|strangely silent|full of people|
covered in snow|wet from the rain|smaller than I remembered|cleaner than usual|almost deserted|
freshly painted|surprisingly busy|calm and still|colder than expected""".replace("\n", "").split("|")
COPULAS = ["was", "seemed", "looked", "felt", "had become"]
SMELLS = ["fresh bread", "wood smoke", "rain", "coffee", "pine needles", "the sea", "cut grass", "oranges",
          "old books", "wet leaves", "cinnamon", "engine oil"]
WEATHER = ["It rained all night", "Snow fell softly over the town", "The wind picked up after midnight",
           "A thin fog covered the valley", "The sun came out at last", "Thunder rolled over the hills",
           "The river rose after the storm", "A cold wind blew from the north", "The clouds cleared by noon",
           "Frost covered the windows"]
THINGS = """keys|map|umbrella|blue folder|tickets|flashlight|recipe|old photographs|spare battery|notebook|
letter|scissors|charger|passport|hammer|camera|receipt|sunglasses|envelope|remote""".replace("\n", "").split("|")
PLURALS = ["chairs", "tickets", "eggs", "candles", "blankets", "volunteers", "plates", "bottles of water",
           "maps", "buses", "rooms", "sandwiches"]
EVENTS = ["meeting", "concert", "game", "party", "lecture", "wedding", "rehearsal", "interview", "match",
          "film", "ceremony", "tour"]
TRANSPORT = ["train", "bus", "ferry", "flight", "last boat", "night train", "shuttle"]
TIME_PHRASES = ["tomorrow", "tonight", "on Friday", "next week", "this afternoon", "after work", "on Saturday morning",
                "before noon", "later today", "in the spring"]
ITEMS = ["coffee", "sandwich", "ticket", "umbrella", "notebook", "bus pass", "haircut", "pair of socks",
         "bicycle", "lamp", "jacket", "bowl of soup", "taxi ride", "museum ticket", "loaf of bread", "used guitar"]
MARKET_ITEMS = ["apples", "bread", "cheese", "two onions", "a bag of rice", "fresh fish", "a jar of honey", "candles",
                "rope", "a flashlight", "warm socks", "a map", "matches", "some tea", "three lemons", "a notebook",
                "potatoes", "a bunch of flowers", "eggs", "olive oil", "a new broom", "batteries", "carrots", "soap"]
NICE_ADJ = ["beautiful", "strange", "lovely", "terrible", "wonderful", "odd", "brilliant", "awful", "amazing",
            "ugly", "enormous", "tiny", "clever", "lucky", "peculiar"]
NOUNS = ["day", "idea", "view", "house", "dog", "surprise", "mess", "story", "garden", "storm", "dress", "song",
         "painting", "mistake", "adventure", "evening", "plan", "old clock", "umbrella", "answer"]
EXPERIENCES = [("soup", "tasted"), ("song", "heard"), ("film", "seen"), ("story", "heard"), ("journey", "taken"),
               ("game", "played"), ("night", "spent"), ("meal", "eaten"), ("speech", "heard"), ("book", "read"),
               ("joke", "heard"), ("party", "been to")]
SPEECH_VERBS = {".": ["said", "replied", "whispered", "explained", "added", "answered", "muttered", "told them"],
                "?": ["asked", "wondered", "whispered", "asked again", "called out"],
                "!": ["shouted", "cried", "called", "laughed", "exclaimed", "said"]}
SHORT = """Yes.|No.|Okay.|Thanks!|Thank you.|Hello!|Good morning.|Good night.|Really?|Why?|Where?|Not yet.|
Of course.|Maybe later.|I see.|Wait!|Come in.|Sit down.|Go ahead.|Never mind.|Excuse me.|Sorry!|Please.|
Help!|Stop!|Listen.|Well done!|Me too.|Why not?|Right away.|See you soon.|Take care.|Goodbye.|All right.|
Exactly!|Absolutely.|I'm sorry.|Excuse me?|Who's there?|What happened?|Not now.|Almost there.|Hurry!|
That's fine.|I don't know.|Nice to meet you.|How are you?|Good evening.|Look!|Careful!|Definitely not.|
No problem.|Here you go.|Just a moment.|Oh dear.|Fair enough.|Good luck!|Perhaps.|Certainly.""".replace("\n", "").split("|")
GREETINGS = ["Hi", "Hello", "Good morning", "Good evening", "Thanks", "Thank you", "Goodbye", "Welcome back",
             "Sorry", "Congratulations", "Happy birthday", "Good luck", "Excuse me"]


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
