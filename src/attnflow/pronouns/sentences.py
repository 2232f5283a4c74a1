"""Templated sentences for the pronoun test of Abnar & Zuidema (2020), Figure 4, on a causal LM.

The paper feeds BERT a sentence with a masked pronoun and two antecedents of different gender
("The author talked to Sara about [mask] book") and reads the attention of the mask to each. A
causal LM has no mask: here each sentence *ends* right before the pronoun, so the last position is
the one that predicts it, and the pronoun pair (" himself" / " herself", " him" / " her",
" his" / " her") is compared at that position. Every sentence names two antecedents of different
gender (names or gendered nouns) and has a known referent, fixed by a family's template:

==================  ==========================================  =========  ==============================
family              template (A first-mentioned, B second)      referent   why
==================  ==========================================  =========  ==============================
reflexive_local     A said that B had hurt ...                  B          a reflexive takes its clause's subject
reflexive_main      A, who had met B, hurt ...                  A          ditto (B sits in a relative clause)
object_first        A was sick, so B visited ...                A          an object pronoun is not its clause's subject
object_second       A waved at B and then smiled at ...         B          ditto (A is the subject of both verbs)
possessive_first    A, standing next to B, raised ...           A          one raises one's own hand
possessive_second   A watched B brush ...                       B          one brushes one's own teeth
==================  ==========================================  =========  ==============================

The first four are fixed by syntax (binding), the last two by what the verb does (pragmatics).
Half the families put the referent first, half second, and within a family the referent is male
and female equally often, so a method (or model) that always picks the first-mentioned
antecedent, or always the male one, scores 0.5. Pure Python: no torch, no tokenizer.

>>> items = pronoun_sentences(12, seed=0)
>>> len(items), sorted({i.family for i in items}) == sorted(FAMILIES)
(12, True)
>>> item = items[0]
>>> item.text[slice(*item.referent_span)] == item.referent.split()[-1]
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "FAMILIES",
    "FEMALE_NAMES",
    "GENDERED_NOUNS",
    "MALE_NAMES",
    "PRONOUNS",
    "Family",
    "PronounItem",
    "pronoun_sentences",
    "token_span",
]

# The pronoun each kind predicts, by the referent's gender: (male, female); each one BPE token in
# SmolLM2's (GPT-2 style) vocabulary, with its leading space.
PRONOUNS: dict[str, tuple[str, str]] = {
    "reflexive": (" himself", " herself"),
    "object": (" him", " her"),
    "possessive": (" his", " her"),
}

MALE_NAMES = (
    "John",
    "David",
    "Michael",
    "Robert",
    "James",
    "Thomas",
    "Peter",
    "Paul",
    "Mark",
    "George",
    "Daniel",
    "Henry",
)
FEMALE_NAMES = (
    "Mary",
    "Susan",
    "Linda",
    "Sarah",
    "Emma",
    "Anna",
    "Laura",
    "Julia",
    "Alice",
    "Helen",
    "Emily",
    "Grace",
)
# (male, female) nouns of the same profession or relation; used as "the <noun>"
GENDERED_NOUNS = (
    ("king", "queen"), ("actor", "actress"), ("waiter", "waitress"), ("father", "mother"),
    ("uncle", "aunt"), ("boy", "girl"), ("policeman", "policewoman"), ("husband", "wife"),
    ("prince", "princess"), ("monk", "nun"), ("grandfather", "grandmother"), ("businessman", "businesswoman"),
)  # fmt: skip


@dataclass(frozen=True)
class Family:
    """Templates with slots {A} (first-mentioned antecedent) and {B}; `referent` is "A" or "B"."""

    name: str
    kind: str  # a key of PRONOUNS
    referent: str  # "A" | "B"
    templates: tuple[str, ...]
    why: str


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("reflexive_local", "reflexive", "B", (
            "{A} said that {B} had hurt", "{A} thought that {B} had blamed", "{A} knew that {B} had praised",
            "{A} said that {B} had introduced", "{A} believed that {B} had cut", "{A} heard that {B} had described",
        ), "binding: a reflexive takes the subject of its own clause"),
        Family("reflexive_main", "reflexive", "A", (
            "{A}, who had met {B}, hurt", "{A}, who had called {B}, blamed", "{A}, who had seen {B}, praised",
            "{A}, who had met {B}, introduced", "{A}, who had visited {B}, cut", "{A}, who had called {B}, described",
        ), "binding: the reflexive's clause has A as subject; B sits inside a relative clause"),
        Family("object_first", "object", "A", (
            "{A} was sick, so {B} visited", "{A} was lonely, so {B} called", "{A} was tired, so {B} helped",
            "{A} was sad, so {B} hugged", "{A} was hungry, so {B} fed", "{A} was lost, so {B} guided",
        ), "binding: an object pronoun cannot be the subject of its own clause (B)"),
        Family("object_second", "object", "B", (
            "{A} waved at {B} and then smiled at", "{A} walked up to {B} and hugged", "{A} found {B} and thanked",
            "{A} ran toward {B} and greeted", "{A} sat next to {B} and talked to", "{A} looked at {B} and then called",
        ), "binding: A is the subject of both verbs, so the object pronoun is B"),
        Family("possessive_first", "possessive", "A", (
            "{A}, standing next to {B}, raised", "{A}, sitting beside {B}, shook", "{A}, walking behind {B}, scratched",
            "{A}, standing near {B}, folded", "{A}, sitting across from {B}, crossed", "{A}, waiting with {B}, checked",
        ), "pragmatics: one raises, shakes, scratches one's own hand or head"),
        Family("possessive_second", "possessive", "B", (
            "{A} watched {B} brush", "{A} watched {B} comb", "{A} saw {B} wash",
            "{A} watched {B} raise", "{A} saw {B} shake", "{A} watched {B} scratch",
        ), "pragmatics: one brushes, combs, washes one's own teeth, hair, face"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class PronounItem:
    """One sentence: `text` ends right before the pronoun; spans are character ranges in `text`
    of the antecedents' head words (a name, or the noun without its article)."""

    sentence_id: int
    family: str
    template: str
    text: str
    referent: str  # surface form, e.g. "the queen" / "Mary"
    distractor: str
    referent_span: tuple[int, int]
    distractor_span: tuple[int, int]
    referent_first: bool
    referent_gender: str  # "m" | "f"
    right: str  # the referent's pronoun, e.g. " herself"
    wrong: str  # the distractor's


def _antecedent(rng: random.Random, gender: str, noun: bool) -> tuple[str, str]:
    """(surface form, head word) of one antecedent of `gender`."""
    if noun:
        word = rng.choice(GENDERED_NOUNS)[gender == "f"]
        return f"the {word}", word
    word = rng.choice(FEMALE_NAMES if gender == "f" else MALE_NAMES)
    return word, word


def _fill(template: str, a: str, b: str) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """The sentence, and the character spans of the head words of A and B (A capitalised at the start)."""
    if template.startswith("{A}"):
        a = a[0].upper() + a[1:]
    head_a, head_b = a.split()[-1], b.split()[-1]
    before_a, rest = template.split("{A}")
    middle, after_b = rest.split("{B}")
    text = before_a + a + middle + b + after_b
    start_a = len(before_a) + len(a) - len(head_a)
    start_b = len(before_a) + len(a) + len(middle) + len(b) - len(head_b)
    return text, (start_a, start_a + len(head_a)), (start_b, start_b + len(head_b))


def pronoun_sentences(n: int, *, seed: int = 0, families: Sequence[str] | None = None) -> list[PronounItem]:
    """`n` distinct sentences, the families in turn, the referent's gender alternating within each.

    Sentence i belongs to family i mod F; its referent is male when (i // F) is even. Template,
    names / nouns (each antecedent a name or a gendered noun with probability 1/2) are drawn from
    ``random.Random(seed)``; a repeated text is drawn again. Deterministic in (n, seed, families).
    """
    names = list(FAMILIES) if families is None else list(families)
    if unknown := [f for f in names if f not in FAMILIES]:
        raise ValueError(f"unknown pronoun famil(ies) {unknown}; choose from {', '.join(FAMILIES)}")
    if n < 1 or not names:
        raise ValueError(f"need n >= 1 and at least one family, got n={n}, families={names}")
    rng = random.Random(seed)
    items: list[PronounItem] = []
    seen: set[str] = set()
    for i in range(n):
        fam = FAMILIES[names[i % len(names)]]
        gender = "m" if (i // len(names)) % 2 == 0 else "f"
        other = "f" if gender == "m" else "m"
        for _ in range(1000):
            template = rng.choice(fam.templates)
            ref, dis = (
                _antecedent(rng, gender, rng.random() < 0.5),
                _antecedent(rng, other, rng.random() < 0.5),
            )
            a, b = (ref, dis) if fam.referent == "A" else (dis, ref)
            text, span_a, span_b = _fill(template, a[0], b[0])
            if text not in seen:
                break
        else:  # pragma: no cover - the template space is far larger than any n asked for
            raise ValueError(f"cannot draw {n} distinct sentences from family {fam.name}")
        seen.add(text)
        first = fam.referent == "A"
        male, female = PRONOUNS[fam.kind]
        items.append(
            PronounItem(
                sentence_id=i, family=fam.name, template=template, text=text,
                referent=ref[0], distractor=dis[0],
                referent_span=span_a if first else span_b, distractor_span=span_b if first else span_a,
                referent_first=first, referent_gender=gender,
                right=male if gender == "m" else female, wrong=female if gender == "m" else male,
            )
        )  # fmt: skip
    return items


def token_span(offsets: Sequence[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """Indices of the tokens whose character range overlaps `span` = [start, end).

    A token [s, e) overlaps when s < end and e > start; empty ranges (special tokens) never do.

    >>> token_span([(0, 0), (0, 3), (3, 8), (8, 12)], (4, 12))  # a special token (0, 0), then 3 tokens
    [2, 3]
    """
    start, end = span
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]
