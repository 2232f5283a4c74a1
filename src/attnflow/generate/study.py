"""The generation study: every prompt x method x causal option on one decoder-only LM, as tidy tables.

For each prompt, one generation and one teacher-forced forward explain every generated token under
each (sinks, receptive_field) option (:func:`explain_generation_grid`); the tables hold, per
option x method x generated token, the first-token share and the top prompt token
(:func:`generation_table`), and the faithfulness check per k: the drop in the token's
log-probability when the k prompt tokens a method ranks highest are deleted, beside k random ones
(:func:`faithfulness_grid`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .explanation import GenerationExplanation, explain_generation_grid, generation_table
from .faithfulness import faithfulness_grid

__all__ = ["GenerationStudy", "generation_study"]


@dataclass
class GenerationStudy:
    """``shares``: one row per (prompt, method, sinks, receptive_field, generated token);
    ``faithfulness``: one row per (prompt, method, sinks, receptive_field, token, k) with the
    log-probability drop (method "random": mean over the random draws, sinks/receptive_field NA);
    ``explanations``: {prompt name: {(sinks, receptive_field): GenerationExplanation}} for figures."""

    shares: pd.DataFrame
    faithfulness: pd.DataFrame
    explanations: dict[str, dict[tuple[str, str], GenerationExplanation]]

    def summary(self) -> dict[str, Any]:
        """Means over prompts and generated tokens, nested for ``dvc metrics show``:
        ``first_token_share[method][sinks][receptive_field]`` and
        ``drop[method][sinks][receptive_field]["k<k>"]`` (``drop["random"]["k<k>"]``)."""
        out: dict[str, Any] = {"first_token_share": {}, "drop": {}}
        share = self.shares.groupby(["method", "sinks", "receptive_field"], sort=False)[
            "first_token_share"
        ].mean()
        for (m, s, f), v in share.items():
            out["first_token_share"].setdefault(m, {}).setdefault(s, {})[f] = float(v)
        drops = self.faithfulness.groupby(
            ["method", "sinks", "receptive_field", "k"], sort=False, dropna=False
        )["drop"].mean()
        for (m, s, f, k), v in drops.items():
            node = out["drop"].setdefault(m, {})
            for part in (s, f):
                if isinstance(part, str):  # the random baseline has no option
                    node = node.setdefault(part, {})
            node[f"k{k}"] = float(v)
        return out


def generation_study(
    model: Any,
    tokenizer: Any,
    prompts: Mapping[str, str],
    *,
    methods: Sequence[str],
    sinks: Sequence[str],
    receptive_fields: Sequence[str],
    max_new_tokens: int = 15,
    ks: Sequence[int] = (1, 3),
    n_random: int = 10,
    seed: int = 0,
) -> GenerationStudy:
    """Explain and check every prompt under every option (greedy decoding: the completions are
    the model's own; the faithfulness uses the last layer's ranking)."""
    shares, checks, explanations = [], [], {}
    for name, prompt in prompts.items():
        grid = explain_generation_grid(
            model, tokenizer, prompt, max_new_tokens=max_new_tokens, methods=methods,
            sinks=sinks, receptive_fields=receptive_fields,
        )  # fmt: skip
        explanations[name] = grid
        shares.append(pd.DataFrame(generation_table(grid)).assign(prompt_name=name))
        records = faithfulness_grid(model, grid, ks=ks, n_random=n_random, seed=seed).records
        checks.append(
            pd.DataFrame(records).assign(prompt_name=name).drop(columns=["removed"], errors="ignore")
        )
    return GenerationStudy(
        pd.concat(shares, ignore_index=True), pd.concat(checks, ignore_index=True), explanations
    )
