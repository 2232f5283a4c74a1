"""The causal reference of the pronoun test: which antecedent the model's pronoun choice depends on.

At the position that predicts the pronoun (the last one), with p the pronoun the model prefers
(the higher of the two logits) and q the other, and x \\ S the sentence with every token of the
span S replaced by one blank token id (same length, same positions):

    m(x)               = z_p(x) − z_q(x)                 (the model's margin; >= 0 on x itself)
    effect_referent    = m(x) − m(x \\ referent)
    effect_distractor  = m(x) − m(x \\ distractor)
    causal choice      = "referent"   if effect_referent > effect_distractor
                         "distractor" if effect_referent < effect_distractor,  "tie" if equal

The antecedent whose removal costs the preferred pronoun more of its margin is the one the choice
rests on; a map "agrees with the causal reference" when it favours that antecedent (1, a tie 1/2,
else 0, as the other measures; `CAUSAL_VALUE` is the referent's side of it). This is blank-out
(the paper's importance score, there of a class probability) asked of the two antecedents only.

The blank (`blank_token_id`) is the tokenizer's pad token, else its eos token: a token that is no
word (no name, no gendered noun, so it cannot carry a gender), the baseline this study's
integrated gradients start from (`attnflow.compare.captum`, "pad"), and the token the authors'
final notebook blanks with. SmolLM2's pad is "<|im_end|>" (its eos); a mid-sentence end-of-turn
is out of distribution, which every blank token is, and the same for both antecedents.

Three forwards per sentence (x, x \\ referent, x \\ distractor) in one batch; sentences of the same
token length share batches, so nothing is padded. numpy here; torch inside `causal_reference`.

>>> blank_spans([7, 8, 9, 10], [[1], [2, 3]], blank_id=0).tolist()
[[7, 8, 9, 10], [7, 0, 9, 10], [7, 8, 0, 0]]
>>> e = margin_effects(np.array([[0.0, 3.0, 1.0], [0.0, 1.0, 1.0], [0.0, 2.5, 1.0]]), 1, 2)
>>> e["margin"], e["effect_referent"], e["effect_distractor"], e["causal_choice"]
(2.0, 2.0, 0.5, 'referent')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "CAUSAL_COLUMNS",
    "CAUSAL_VALUE",
    "blank_spans",
    "blank_token_id",
    "causal_reference",
    "margin_effects",
]

# the referent's side of the causal choice: 1 when it is the referent, 1/2 on a tie, 0 otherwise
CAUSAL_VALUE = {"referent": 1.0, "tie": 0.5, "distractor": 0.0}
CAUSAL_COLUMNS = (
    "margin", "margin_blank_referent", "margin_blank_distractor",
    "effect_referent", "effect_distractor", "causal_choice",
)  # fmt: skip


def blank_token_id(tokenizer: Any) -> int:
    """The blank of the causal reference: the tokenizer's pad id, else its eos id (see the module
    docstring for why); ValueError when it has neither."""
    for name in ("pad_token_id", "eos_token_id"):
        token = getattr(tokenizer, name, None)
        if isinstance(token, int) and not isinstance(token, bool):
            return token
    raise ValueError("the tokenizer has no pad and no eos token to blank the antecedents with")


def blank_spans(ids: Sequence[int], spans: Sequence[Sequence[int]], *, blank_id: int) -> np.ndarray:
    """(1 + len(spans), T) int64: `ids`, then one copy per span with its positions set to `blank_id`.

    ValueError for an empty span or a position outside the ids. `ids` is not changed.
    """
    row = np.asarray(list(ids), dtype=np.int64)  # (T,)
    out = np.repeat(row[None], 1 + len(spans), axis=0)  # (1 + S, T)
    for k, span in enumerate(spans, start=1):
        idx = np.asarray(list(span), dtype=np.int64)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= row.size:
            raise ValueError(f"span {list(span)} is empty or outside a text of {row.size} tokens")
        out[k, idx] = blank_id
    return out


def margin_effects(logits: np.ndarray, preferred: int, other: int) -> dict[str, Any]:
    """The causal reference of one sentence from the last position's logits (3, V) of x, x \\ referent
    and x \\ distractor, in that order (the module docstring's equations)."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] != 3:
        raise ValueError(
            f"logits must be (3, vocabulary): x, x without referent, x without distractor; got {z.shape}"
        )
    m = z[:, preferred] - z[:, other]  # (3,) margins
    ref, dis = float(m[0] - m[1]), float(m[0] - m[2])
    choice = "referent" if ref > dis else "distractor" if ref < dis else "tie"
    return {
        "margin": float(m[0]), "margin_blank_referent": float(m[1]), "margin_blank_distractor": float(m[2]),
        "effect_referent": ref, "effect_distractor": dis, "causal_choice": choice,
    }  # fmt: skip


def causal_reference(
    model: Any,
    ids: Sequence[Sequence[int]],
    referent_tokens: Sequence[Sequence[int]],
    distractor_tokens: Sequence[Sequence[int]],
    preferred_ids: Sequence[int],
    other_ids: Sequence[int],
    *,
    blank_id: int,
    batch_size: int = 16,
) -> pd.DataFrame:
    """One row per sentence (input order), columns `CAUSAL_COLUMNS`: `margin_effects` of the model's
    next-token logits at the last position of each sentence's `ids` and its two blanked copies
    (`blank_spans`). `batch_size` sentences (x 3 rows) per forward, each batch of one token length."""
    import torch

    from attnflow.devices import model_device

    n = len(ids)
    if not n == len(referent_tokens) == len(distractor_tokens) == len(preferred_ids) == len(other_ids):
        raise ValueError("ids, spans and pronoun ids must have one entry per sentence")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = model_device(model)
    by_length: dict[int, list[int]] = {}
    for i, row in enumerate(ids):
        by_length.setdefault(len(row), []).append(i)
    rows: list[dict[str, Any] | None] = [None] * n
    for group in by_length.values():
        for start in range(0, len(group), batch_size):
            chunk = group[start : start + batch_size]
            stack = np.concatenate(
                [
                    blank_spans(ids[i], [referent_tokens[i], distractor_tokens[i]], blank_id=blank_id)
                    for i in chunk
                ]
            )  # (3 * len(chunk), T): each sentence, then without its referent, then without its distractor
            with torch.no_grad():
                out = model(input_ids=torch.from_numpy(stack).to(device))
            z = getattr(out, "logits", None)
            z = (out[0] if z is None else z)[:, -1].double().cpu().numpy()  # (3k, V)
            for k, i in enumerate(chunk):
                rows[i] = margin_effects(z[3 * k : 3 * k + 3], int(preferred_ids[i]), int(other_ids[i]))
    return pd.DataFrame(rows, columns=list(CAUSAL_COLUMNS))
