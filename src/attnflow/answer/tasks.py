"""Answer-attribution tasks whose source tokens are known, built offline from templates and text we have.

- ``retrieval``: a fact ("The secret code of the {key} is {value}.") placed at a random depth in
  filler text (sentences of a corpus, e.g. the Linzen wiki sentences of the data mirror) of about
  n tokens, then the question; the gold source is the value's characters inside the fact.
- ``arithmetic``: a two-step word problem ("{A} has 3 apples. {B} gives {A} 4 more apples. How many
  apples does {A} have now?"); gold: the two numbers.
- ``multihop``: two facts and a question that joins them ("{A} was born in Paris. {B} is the sister
  of {A}. In which city was the sister of {B} born?" is avoided for ambiguity: the question names
  the relation back: "In which city was {B}'s sister born?"); gold: the city.

Items carry the prompt text, the expected answer text and the gold character spans; token
positions come from the tokenizer (:func:`gold_positions`). Which items a model answers right is
decided by the caller (only those are scored), and the counts are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.options import ANSWER_TASKS as TASKS

__all__ = [
    "TASKS",
    "AnswerItem",
    "arithmetic_items",
    "build_items",
    "gold_positions",
    "multihop_items",
    "retrieval_items",
]


NAMES = ("Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Henry", "Iris", "Jack", "Lena", "Mark")
OBJECTS = ("apple", "book", "coin", "pencil", "card", "stone", "shell", "ticket")
CITIES = ("Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Dublin", "Oslo", "Prague", "Lisbon")
KEYS = ("red door", "blue box", "old clock", "green gate", "silver key", "small boat", "tall tower")


@dataclass(frozen=True)
class AnswerItem:
    """One item: the prompt, the answer the model should give, and the gold source characters."""

    task: str
    prompt: str
    answer: str  # with its leading space, as it follows the prompt
    gold: tuple[tuple[int, int], ...]  # (start, end) character spans of the source in the prompt
    meta: dict[str, Any] = field(default_factory=dict)


def gold_positions(tokenizer: Any, prompt: str, gold: Sequence[tuple[int, int]]) -> list[int]:
    """The prompt's token positions (``tokenizer(prompt)``, no special tokens) that overlap a gold
    character span: from the fast tokenizer's offsets."""
    enc = tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
    spans = list(gold)
    return [i for i, (a, b) in enumerate(enc["offset_mapping"]) if any(a < e and s < b for s, e in spans)]


def arithmetic_items(n: int, *, seed: int = 0) -> list[AnswerItem]:
    """``n`` two-step addition problems with sums below 20."""
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        a_name, b_name = rng.choice(NAMES, 2, replace=False)
        obj = rng.choice(OBJECTS)
        a, b = (int(x) for x in rng.integers(2, 9, 2))
        first = f"{a_name} has {a} {obj}s. "
        second = f"{b_name} gives {a_name} {b} more {obj}s. "
        prompt = f"{first}{second}How many {obj}s does {a_name} have now? Answer with a number. Answer:"
        at_a = len(f"{a_name} has ")
        at_b = len(first) + len(f"{b_name} gives {a_name} ")
        gold = ((at_a, at_a + len(str(a))), (at_b, at_b + len(str(b))))
        items.append(AnswerItem("arithmetic", prompt, f" {a + b}", gold, {"a": a, "b": b}))
    return items


def multihop_items(n: int, *, seed: int = 0) -> list[AnswerItem]:
    """``n`` two-fact questions: where was X born, X being named only through a relation."""
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        a_name, b_name = rng.choice(NAMES, 2, replace=False)
        city, other = rng.choice(CITIES, 2, replace=False)
        facts = [f"{a_name} was born in {city}.", f"{b_name} is the friend of {a_name}.",
                 f"Tom was born in {other}."]  # fmt: skip
        order = rng.permutation(3)
        text = " ".join(facts[i] for i in order) + " "
        prompt = f"{text}In which city was the friend of {b_name} born? Answer:"
        at = text.index(f"born in {city}.") + len("born in ")
        items.append(
            AnswerItem("multihop", prompt, f" {city}", ((at, at + len(city)),), {"order": order.tolist()})
        )
    return items


def retrieval_items(
    filler: Sequence[str], tokenizer: Any, *, n: int, length: int, seed: int = 0
) -> list[AnswerItem]:
    """``n`` items of about ``length`` prompt tokens: filler sentences drawn in order from a random
    start, the fact inserted at a uniform random depth (recorded in ``meta``), then the question."""
    if not filler:
        raise ValueError("retrieval_items needs filler sentences")
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        key = str(rng.choice(KEYS))
        value = str(int(rng.integers(1000, 9999)))
        fact = f"The secret code of the {key} is {value}."
        question = f"\nWhat is the secret code of the {key}? Answer:"
        budget = length - len(tokenizer(fact + question, add_special_tokens=False)["input_ids"])
        start, sentences, used = int(rng.integers(0, len(filler))), [], 0
        while used < budget:
            sentence = filler[(start + len(sentences)) % len(filler)].strip()
            used += len(tokenizer(" " + sentence, add_special_tokens=False)["input_ids"])
            sentences.append(sentence)
        depth = float(rng.uniform(0, 1))
        cut = round(depth * len(sentences))
        before = " ".join(sentences[:cut])
        head = f"{before} " if before else ""
        prompt = f"{head}{fact} {' '.join(sentences[cut:])}{question}"
        at = len(head) + fact.index(value)
        items.append(AnswerItem("retrieval", prompt, f" {value}", ((at, at + len(value)),),
                                {"depth": depth, "length": length, "key": key}))  # fmt: skip
    return items


def build_items(
    tasks: Sequence[str], n: int, *, tokenizer: Any = None, filler: Sequence[str] = (),
    lengths: Sequence[int] = (), seed: int = 0,
) -> list[AnswerItem]:  # fmt: skip
    """``n`` items of each task in ``tasks`` (TASKS), retrieval once per prompt length in ``lengths``
    (it needs the tokenizer and the filler sentences)."""
    if unknown := sorted(set(tasks) - set(TASKS)):
        raise ValueError(f"unknown answer task(s) {unknown}; the tasks are {', '.join(TASKS)}")
    items: list[AnswerItem] = []
    for task in tasks:
        if task == "arithmetic":
            items += arithmetic_items(n, seed=seed)
        elif task == "multihop":
            items += multihop_items(n, seed=seed)
        else:
            for length in lengths:
                items += retrieval_items(filler, tokenizer, n=n, length=length, seed=seed)
    return items
