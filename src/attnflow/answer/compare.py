"""Several attributions of the same items side by side. `answer_target` asks the model an item in
its chat template and finds the explained span in what it answered; `item_scores` scores one
attribution of it (RISE, MAS, RISE+AP of the guided deletion of the user's tokens, recovery@10 %);
`summarise` gives per (task, length, method) the mean of each score with a percentile bootstrap
interval over items, and each method's paired difference to a reference method on the items both
scored.

Rows are tidy: one per (item, method), with ``item``, ``task``, ``length`` (None where the task has
none), ``tool`` (the method), the scores (e.g. ``rise``, ``mas``, ``recovery@10%``, ``seconds``,
``peak_bytes``; None or absent when not measured) and ``out_of_memory`` where the call ran out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["PAIRED", "SCORES", "answer_target", "bootstrap", "item_scores", "summarise"]

SCORES = ("rise", "mas", "recovery@10%", "seconds", "peak_bytes")
PAIRED = ("rise", "mas", "recovery@10%", "seconds")  # the scores compared item by item
N_BOOT = 2000
MAX_NEW_TOKENS = 32  # what the model may write before the answer


def answer_target(
    model: Any, tokenizer: Any, item: Any, *, pad_id: int, teacher_forced: bool = False
) -> tuple[list[int], list[int], list[int], tuple[int, int]] | str:
    """(chat prompt ids, user positions, generated ids up to the answer, the answer's inclusive
    span in them), or why the item is left out: "template" (`chat_prompt` finds no contiguous user
    span), "wrong" (greedy decoding, at most MAX_NEW_TOKENS, did not give the answer as a word) or
    "retokenized" (the generation's text does not give its ids back; FlashTrace tokenizes text).
    teacher_forced: the expected answer is the generation (random weights: no answer to check)."""
    import torch

    from attnflow.devices import model_device

    from .chat import answer_span, chat_prompt

    try:
        ids, user = chat_prompt(tokenizer, item.prompt)
    except ValueError:  # the template's tokens merge with the prompt's first: no clean user span
        return "template"
    if teacher_forced:
        generated = tokenizer(item.answer.strip(), add_special_tokens=False)["input_ids"]
        return ids, user, generated, (0, len(generated) - 1)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids], device=model_device(model)), max_new_tokens=MAX_NEW_TOKENS,
                             do_sample=False, pad_token_id=pad_id)  # fmt: skip
    generated = out[0, len(ids) :].tolist()
    span = answer_span(tokenizer, generated, item.answer)
    if span is None:
        return "wrong"
    generated = generated[: span[1] + 1]
    if tokenizer(tokenizer.decode(generated), add_special_tokens=False)["input_ids"] != generated:
        return "retokenized"
    return ids, user, generated, span


def item_scores(
    model: Any, tokenizer: Any, item: Any, target: tuple, weights: np.ndarray, *, pad_id: int,
    steps: int | None = None,
) -> dict[str, float]:  # fmt: skip
    """RISE, MAS, RISE+AP of the guided deletion of the user's tokens (the template's own tokens
    kept; ``steps``: see `attnflow.answer.deletion`) and recovery@10 % of the gold tokens, for
    ``weights`` (len(user),) of the ``target`` `answer_target` returned."""
    from .chat import user_gold_positions
    from .deletion import guided_deletion
    from .metrics import recovery_at

    ids, user, generated, span = target
    full = np.zeros(len(ids))
    full[user] = np.nan_to_num(weights)
    protect = sorted(set(range(len(ids))) - set(user))
    got = guided_deletion(model, ids, generated, full, pad_id=pad_id, protect=protect, steps=steps, span=span)
    got["recovery@10%"] = recovery_at(weights, user_gold_positions(tokenizer, item.prompt, item.gold), 0.1)
    return got


def bootstrap(values: Iterable[Any], n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(mean, 2.5 %, 97.5 %) of a percentile bootstrap of the mean over items
    (`attnflow.metrics.versus_random.nested_bootstrap_mean` with the items as one group); None, NaN
    and infinities dropped; all NaN when nothing is left.

    >>> bootstrap([1.0, None, float("nan"), 1.0])
    (1.0, 1.0, 1.0)
    """
    from attnflow.metrics.versus_random import nested_bootstrap_mean

    v = np.asarray([np.nan if x is None else x for x in values], dtype=np.float64)
    v[~np.isfinite(v)] = np.nan
    return nested_bootstrap_mean([v], n_boot=n_boot, seed=seed)  # one group: the items


def summarise(
    rows: Sequence[dict[str, Any]], reference: str = "flashtrace", *, n_boot: int = N_BOOT, seed: int = 0
) -> list[dict[str, Any]]:
    """One row per (task, length, tool), tools in their order of appearance: ``items``,
    ``out_of_memory`` and, per score, (mean, low, high); for every tool but ``reference``,
    ``{score}_minus_{reference}``: the bootstrap of the paired differences on shared items."""
    out = []
    groups = sorted({(r["task"], r["length"]) for r in rows}, key=lambda g: (g[0], g[1] or 0))
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    for task, length in groups:
        here = [r for r in rows if r["task"] == task and r["length"] == length]
        ref = {r["item"]: r for r in here if r["tool"] == reference}
        for tool in tools:
            mine = [r for r in here if r["tool"] == tool]
            if not mine:
                continue
            row = {"task": task, "length": length, "tool": tool, "items": len(mine),
                   "out_of_memory": sum(1 for r in mine if r.get("out_of_memory"))}  # fmt: skip
            for key in SCORES:
                row[key] = bootstrap((r.get(key) for r in mine), n_boot, seed)
                if tool != reference and key in PAIRED:
                    pairs = [r[key] - ref[r["item"]][key] for r in mine
                             if r.get(key) is not None and ref.get(r["item"], {}).get(key) is not None]  # fmt: skip
                    row[f"{key}_minus_{reference}"] = bootstrap(pairs, n_boot, seed)
            out.append(row)
    return out
