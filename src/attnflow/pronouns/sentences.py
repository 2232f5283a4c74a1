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

**Minimal pairs.** The sentences come in pairs: one template, one male and one female antecedent
(both names, or both "the <noun>"), once with the male one first (order "mf") and once with the
two swapped (its twin, "fm"). The family fixes which slot holds the referent, so within a pair the
referent stands at the same place and is male once and female once. Half the families put the
referent first, half second; so a method (or model) that always picks the first-mentioned
antecedent, or always the male one, scores 0.5 on every measure.

**Fixed positions.** Every name is one token of SmolLM2's tokenizer both at the start of the text
(right after the BOS prefix) and after a space, and every noun is one token after a space (its
article is " the" / "The"): the two antecedents of a pair then span the same number of tokens in
either slot, and a twin's tokens sit at exactly the positions of its partner's, the two
antecedents' positions swapped. The lists below are the candidates that pass this rule, measured
with the tokenizer (`tests/unit/test_pronouns_tokens.py` checks it when the converted model is
there; common words such as Mark, Rose or Grace and names of either gender such as Alex are left
out). Pure Python: no torch, no tokenizer.

>>> items = pronoun_sentences(12, seed=0)
>>> len(items), sorted({i.family for i in items}) == sorted(FAMILIES)
(12, True)
>>> a, b = items[0], items[1]  # a minimal pair: the antecedents swapped
>>> (a.pair, a.order), (b.pair, b.order), (a.referent, a.distractor) == (b.distractor, b.referent)
((0, 'mf'), (0, 'fm'), True)
>>> a.text[slice(*a.referent_span)] == a.referent.split()[-1]
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
    "ORDERS",
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

# One token at the start of the text and after a space (the module docstring's rule), one gender only.
MALE_NAMES = ("John", "David", "Michael", "Robert", "James", "Thomas", "Peter", "Paul", "George", "Daniel")
FEMALE_NAMES = ("Mary", "Sarah", "Anna", "Alice", "Emily", "Jane", "Maria", "Elizabeth", "Lily", "Anne")
# (male, female) nouns of the same profession or relation, used as "the <noun>"; one token after a space
GENDERED_NOUNS = (
    ("king", "queen"), ("actor", "actress"), ("father", "mother"), ("uncle", "aunt"), ("boy", "girl"),
    ("husband", "wife"), ("prince", "princess"), ("monk", "nun"), ("grandfather", "grandmother"),
    ("son", "daughter"), ("brother", "sister"), ("gentleman", "lady"),
)  # fmt: skip
ORDERS = ("mf", "fm")  # a pair's two sentences: the male antecedent first, then the female one first


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
    of the antecedents' head words (a name, or the noun without its article). `pair`: the minimal
    pair it belongs to; `order`: "mf" (the male antecedent first) or "fm" (its twin, swapped)."""

    sentence_id: int
    pair: int
    order: str  # one of ORDERS
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


def _antecedents(rng: random.Random) -> tuple[str, str]:
    """(male, female) surface forms of a pair's antecedents: two names, or two "the <noun>" (p = 1/2)."""
    if rng.random() < 0.5:
        return f"the {rng.choice(GENDERED_NOUNS)[0]}", f"the {rng.choice(GENDERED_NOUNS)[1]}"
    return rng.choice(MALE_NAMES), rng.choice(FEMALE_NAMES)


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


def _item(i: int, pair: int, order: str, fam: Family, template: str, male: str, female: str) -> PronounItem:
    """Sentence `i`: `fam`'s `template` with the male antecedent in slot A (order "mf") or in B ("fm")."""
    a, b = (male, female) if order == "mf" else (female, male)
    text, span_a, span_b = _fill(template, a, b)
    first = fam.referent == "A"
    gender = "m" if (order == "mf") == first else "f"  # the referent's: A is male exactly in "mf"
    m, f = PRONOUNS[fam.kind]
    return PronounItem(
        sentence_id=i, pair=pair, order=order, family=fam.name, template=template, text=text,
        referent=a if first else b, distractor=b if first else a,
        referent_span=span_a if first else span_b, distractor_span=span_b if first else span_a,
        referent_first=first, referent_gender=gender,
        right=m if gender == "m" else f, wrong=f if gender == "m" else m,
    )  # fmt: skip


def pronoun_sentences(n: int, *, seed: int = 0, families: Sequence[str] | None = None) -> list[PronounItem]:
    """`n` distinct sentences in n/2 minimal pairs, the families in turn (pair p: family p mod F).

    Pair p is sentences 2p (order "mf": the male antecedent first) and 2p+1 (its twin, "fm": the two
    swapped); both share the template and the two antecedents, one male and one female, both names
    or both gendered nouns (probability 1/2), drawn from ``random.Random(seed)``. Within a pair the
    referent keeps its slot and changes gender. A pair that repeats an earlier text is drawn again.
    Deterministic in (n, seed, families). ValueError when n is odd: every sentence needs its twin.
    """
    names = list(FAMILIES) if families is None else list(families)
    if unknown := [f for f in names if f not in FAMILIES]:
        raise ValueError(f"unknown pronoun famil(ies) {unknown}; choose from {', '.join(FAMILIES)}")
    if not names:
        raise ValueError("need at least one family, got none")
    if n < 2 or n % 2:
        raise ValueError(
            f"the number of pronoun sentences must be even and >= 2 (minimal pairs: each sentence comes "
            f"with its twin, the antecedents swapped), got n={n}"
        )
    rng = random.Random(seed)
    items: list[PronounItem] = []
    seen: set[str] = set()
    for pair in range(n // 2):
        fam = FAMILIES[names[pair % len(names)]]
        for _ in range(1000):
            template = rng.choice(fam.templates)
            male, female = _antecedents(rng)
            twins = [_item(2 * pair + k, pair, o, fam, template, male, female) for k, o in enumerate(ORDERS)]
            if not seen & {t.text for t in twins}:
                break
        else:  # pragma: no cover - the template space is far larger than any n asked for
            raise ValueError(f"cannot draw {n // 2} distinct pairs from family {fam.name}")
        seen |= {t.text for t in twins}
        items += twins
    return items


def token_span(offsets: Sequence[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """Indices of the tokens whose character range overlaps `span` = [start, end).

    A token [s, e) overlaps when s < end and e > start; empty ranges (special tokens) never do.

    >>> token_span([(0, 0), (0, 3), (3, 8), (8, 12)], (4, 12))  # a special token (0, 0), then 3 tokens
    [2, 3]
    """
    start, end = span
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]
