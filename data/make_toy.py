"""Write the toy GLUE sets in data/toy/ (synthetic, label-balanced, in the original GLUE TSV layout).

    python data/make_toy.py            # rewrites data/toy/*/train.tsv and dev.tsv, byte for byte the same

The sentences come from small templates with a clear signal (sentiment words, grammatical slips,
matching or clashing facts), so a tiny model learns them in seconds. They exist so that tests and
demos run on any machine; they say nothing about the real tasks.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

TOY_DIR = Path(__file__).resolve().parent / "toy"
SIZES = {"train": 200, "dev": 100}
SEEDS = {"train": 1, "dev": 2}

# --------------------------------------------------------------------------- SST-2: sentiment words
POSITIVE = ["wonderful", "delightful", "moving", "brilliant", "charming", "funny",
            "gripping", "beautiful", "clever", "warm", "superb", "engaging"]
NEGATIVE = ["dull", "tedious", "boring", "clumsy", "lifeless", "awful",
            "bland", "tiresome", "forgettable", "painful", "messy", "predictable"]
SUBJECTS = ["the film", "this movie", "the script", "the acting", "the story", "the plot",
            "the soundtrack", "the ending", "the cast", "the dialogue", "the direction", "the camera work"]
SST_TEMPLATES = ["{s} is {a} .", "{s} is {a} and {b} .", "a {a} , {b} film .", "{s} feels {a} from start to finish .",
                 "what a {a} experience .", "{s} was {a} , frankly .", "i found {s} {a} .", "{s} is {a} , even {b} ."]


def sst2_row(rng: random.Random, label: int) -> tuple[str, ...]:
    words = POSITIVE if label else NEGATIVE
    a, b = rng.sample(words, 2)
    sentence = rng.choice(SST_TEMPLATES).format(s=rng.choice(SUBJECTS), a=a, b=b)
    return (sentence, str(label))


# --------------------------------------------------------------------------- CoLA: grammatical slips
NOUNS = [("cat", "cats"), ("dog", "dogs"), ("teacher", "teachers"), ("student", "students"),
         ("neighbour", "neighbours"), ("child", "children"), ("farmer", "farmers"), ("singer", "singers")]
DETERMINERS = (["The", "A", "This", "My"], ["The", "These", "Two", "My"])
VERBS = [("sleeps", "sleep"), ("laughs", "laugh"), ("sings", "sing"), ("runs", "run"),
         ("waits", "wait"), ("smiles", "smile")]
TAILS = ["", " quietly", " in the garden", " every morning", " near the river"]


def cola_row(rng: random.Random, label: int) -> tuple[str, ...]:
    plural = rng.randrange(2)
    det, noun, verb = rng.choice(DETERMINERS[plural]), rng.choice(NOUNS)[plural], rng.choice(VERBS)
    tail = rng.choice(TAILS)
    if label:
        sentence = f"{det} {noun} {verb[plural]}{tail}."
    else:
        slip = rng.randrange(4)
        if slip == 0:  # two determiners
            sentence = f"{det} {rng.choice(DETERMINERS[plural]).lower()} {noun} {verb[plural]}{tail}."
        elif slip == 1:  # verb before its subject
            sentence = f"{verb[plural].capitalize()} {det.lower()} {noun}{tail}."
        elif slip == 2:  # determiner after the noun
            sentence = f"{noun.capitalize()} {det.lower()} {verb[plural]}{tail}."
        else:  # no verb at all
            sentence = f"{det} {noun} the{tail}."
    return ("toy", str(label), "" if label else "*", sentence)


# --------------------------------------------------------------------------- MRPC: same event or not
COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Hooli", "Vandelay"]
MONTHS = ["January", "March", "May", "July", "September", "November"]
CITIES = ["Paris", "Lagos", "Lima", "Osaka", "Oslo", "Denver", "Cairo", "Perth"]
EVENTS = [
    ("{c} reported a profit of {n} million dollars in {m} .", "In {m} , {c} said it earned {n} million dollars ."),
    ("{c} opened a new office in {p} in {m} .", "A new {c} office opened in {p} in {m} ."),
    ("{c} hired {n} engineers in {p} .", "In {p} , {n} engineers joined {c} ."),
]


def mrpc_row(rng: random.Random, label: int) -> tuple[str, ...]:
    facts = dict(c=rng.choice(COMPANIES), n=rng.randrange(2, 90), m=rng.choice(MONTHS), p=rng.choice(CITIES))
    first, second = rng.choice(EVENTS)
    if not label:  # another event by another company
        second = rng.choice([e for e in EVENTS if e[1] != second])[1]
        facts2 = dict(facts, c=rng.choice([c for c in COMPANIES if c != facts["c"]]))
        return (str(label), "1", "2", first.format(**facts), second.format(**facts2))
    return (str(label), "1", "2", first.format(**facts), second.format(**facts))


# --------------------------------------------------------------------------- RTE: follows or not
NAMES = ["Anna", "Ravi", "Mei", "Tom", "Sara", "Kofi", "Lena", "Omar"]
ITEMS = ["bicycle", "lamp", "guitar", "teapot", "jacket", "camera"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white"]


def rte_row(rng: random.Random, label: int) -> tuple[str, ...]:
    name, item, colour, city = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(COLOURS), rng.choice(CITIES)
    premise = f"{name} bought a {colour} {item} in {city} last week ."
    if label == 0:  # entailment
        hypothesis = rng.choice([f"{name} bought a {item} .", f"{name} was in {city} .",
                                 f"Someone bought a {colour} {item} ."])
    else:
        other = rng.choice([n for n in NAMES if n != name])
        hypothesis = rng.choice([f"{name} never bought a {item} .", f"{name} did not go to {city} .",
                                 f"{other} bought a {item} ."])
    values = ("entailment", "not_entailment")
    return ("0", premise, hypothesis, values[label])


TASKS = {  # folder: (row maker, header or None)
    "SST-2": (sst2_row, ("sentence", "label")),
    "CoLA": (cola_row, None),
    "MRPC": (mrpc_row, ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")),
    "RTE": (rte_row, ("index", "sentence1", "sentence2", "label")),
}


def make_rows(make_row, size: int, seed: int, avoid: set) -> list[tuple[str, ...]]:
    """``size`` distinct rows, half of each label, alternating, none of them in ``avoid``."""
    rng = random.Random(seed)
    rows, seen = [], set(avoid)
    while len(rows) < size:
        row = make_row(rng, len(rows) % 2)
        if row not in seen:
            seen.add(row)
            rows.append(row)
    return rows


def write_all(root: Path = TOY_DIR) -> list[Path]:
    written = []
    for folder, (make_row, header) in TASKS.items():
        train = make_rows(make_row, SIZES["train"], SEEDS["train"], set())
        dev = make_rows(make_row, SIZES["dev"], SEEDS["dev"], set(train))
        for split, rows in (("train", train), ("dev", dev)):
            if folder == "RTE":  # RTE numbers its rows
                rows = [(str(i),) + row[1:] for i, row in enumerate(rows)]
            lines = ([header] if header else []) + rows
            path = root / folder / f"{split}.tsv"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join("\t".join(line) + "\n" for line in lines), encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    for path in write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else TOY_DIR):
        print(path)
