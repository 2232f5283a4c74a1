"""An answer as a chat model gives it: the prompt in the model's chat template, and the answer's
tokens found in what the model wrote.

`chat_prompt` formats a prompt as FlashTrace does with ``use_chat_template=True`` (the user turn
"Context: {prompt}\\n\\n\\nQuery: "), so that attnflow and FlashTrace attribute the same token ids
and both to the user's text only; `answer_span` finds the expected answer as a whole word in a
generation and returns its tokens, the span a method then explains (the generated tokens before it
are context).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TEMPLATE", "answer_span", "chat_prompt", "user_gold_positions"]

TEMPLATE = "Context:{context}\n\n\nQuery: {query}"  # FlashTrace's DEFAULT_PROMPT_TEMPLATE


def chat_prompt(tokenizer: Any, prompt: str) -> tuple[list[int], list[int]]:
    """(the ids of the chat prompt, the positions of the user's text in them), as FlashTrace builds
    them: user text " " + prompt inside TEMPLATE inside the chat template, the user's tokens found
    where the first of them first occurs. The user's character i is the prompt's character i - 1."""
    user = " " + prompt
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": TEMPLATE.format(context=user, query="")}],
        tokenize=False, add_generation_prompt=True, enable_thinking=False,
    )  # fmt: skip
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    user_ids = tokenizer(user, add_special_tokens=False)["input_ids"]
    start = ids.index(user_ids[0])
    if ids[start : start + len(user_ids)] != user_ids:
        raise ValueError("the user's tokens are not contiguous in the chat prompt: its template splits them")
    return ids, list(range(start, start + len(user_ids)))


def user_gold_positions(tokenizer: Any, prompt: str, gold: list[tuple[int, int]]) -> list[int]:
    """The positions among the user's tokens (`chat_prompt`) of the gold character spans of ``prompt``."""
    from .tasks import gold_positions

    return gold_positions(tokenizer, " " + prompt, [(a + 1, b + 1) for a, b in gold])


def answer_span(tokenizer: Any, generated: list[int], answer: str) -> tuple[int, int] | None:
    """The inclusive token span of the first whole-word occurrence of ``answer`` (stripped) in the
    decoded generation, or None when the model did not give it.

    >>> class Pieces:  # ids index text pieces
    ...     def decode(self, ids): return "".join(["It", " is", " Pr", "ague", "."][i] for i in ids)
    >>> answer_span(Pieces(), [0, 1, 2, 3, 4], " Prague"), answer_span(Pieces(), [0, 1, 4], " Prague")
    ((2, 3), None)
    """
    word = answer.strip()
    pieces = [tokenizer.decode(generated[: i + 1]) for i in range(len(generated))]
    text = pieces[-1] if pieces else ""
    m = re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", text)
    if m is None:
        return None
    first = next(i for i, p in enumerate(pieces) if len(p) > m.start())
    last = next(i for i, p in enumerate(pieces) if len(p) >= m.end())
    return first, last
