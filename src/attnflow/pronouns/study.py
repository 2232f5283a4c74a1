"""The pronoun test of Abnar & Zuidema (2020), Figure 4, asked of a causal LM: which antecedent do
raw attention, rollout, flow, AttnLRP and integrated gradients point to?

An analogue, not the paper's experiment: the paper masks a pronoun in BERT; a causal LM predicts
it at the last position of a sentence that ends right before it (`attnflow.pronouns.sentences`).
For every sentence, one run of `attnflow.hf.explain_texts` gives the
explained row (the last position) of raw attention, rollout and flow at every layer, AttnLRP's
relevance (`attnflow.attnlrp`, its input row) and the next-token logits; captum's integrated
gradients (`attnflow.compare.captum.integrated_gradients`) gives IG x input per token. The
gradient methods explain the logit of the referent's pronoun. Then, per method, layer and
antecedent reduction (`attnflow.metrics.antecedents`):

    referent      outranks(map, referent tokens, distractor tokens)      (1 / 0.5 / 0)
    model_choice  the same for the antecedent of the pronoun the model prefers
                  (logit right > logit wrong: the referent; else the distractor)
    first         the same for the first-mentioned antecedent (position bias: always first -> 1)

and the model's accuracy = share of sentences with logit(right pronoun) > logit(wrong pronoun).
Shares come with a percentile-bootstrap interval (`attnflow.metrics.summarize`).
torch and transformers are used through attnflow.hf / attnflow.compare; nothing is imported here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnflow.metrics.antecedents import ANTECEDENT_REDUCTIONS, antecedent_score, outranks_by_layer
from attnflow.metrics.summarize import summarize
from attnflow.metrics.tables import summary_frame
from attnflow.options import PRONOUN_METHODS

from .sentences import PronounItem, token_span

__all__ = [
    "IG",
    "LAYERED",
    "MEASURES",
    "PRONOUN_METHODS",
    "PronounStudy",
    "pronoun_id",
    "pronoun_study",
    "pronoun_tables",
    "save_pronoun_study",
]

IG = "integrated_gradients"
# The methods of the test (attnflow.options.PRONOUN_METHODS): the attention maps have one row per
# layer; the model-level ones give one input attribution each (AttnLRP's input relevance, IG x input).
LAYERED = ("raw", "rollout", "flow")
MEASURES = ("referent", "model_choice", "first")


@dataclass
class PronounStudy:
    """``sentences``: one row per sentence (the item, its token spans, the pronoun logits, whether
    the model prefers the right pronoun); ``scores``: one row per (sentence, method, layer, reduce)
    with the two antecedent scores and each measure (1 / 0.5 / 0; layer NA for attnlrp and IG);
    ``maps``: per sentence, {method: [layer, token]} over ``sentences.tokens`` (IG as one row)."""

    sentences: pd.DataFrame
    scores: pd.DataFrame
    maps: list[dict[str, np.ndarray]]

    def map_lists(self) -> dict[str, list[np.ndarray]]:
        """{method: one map per sentence}, in sentence order (for `attnflow.io.save_ragged`)."""
        return {m: [d[m] for d in self.maps] for m in (self.maps[0] if self.maps else {})}

    def shares(self, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Per (measure, method, layer, reduce): mean share, bootstrap CI, n (`summary_frame`)."""
        long = self.scores.melt(
            id_vars=["sentence_id", "method", "layer", "reduce"], value_vars=list(MEASURES),
            var_name="measure", value_name="value",
        )  # fmt: skip
        return summary_frame(long, ["measure", "method", "layer", "reduce"], n_boot=n_boot, seed=seed)

    def summary(self, *, reduce: str = "max", n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        """For ``dvc metrics show``: n, the model's accuracy and, per measure and method, the share at
        the last layer (attention maps) or the input row (attnlrp, IG), each with its CI."""
        acc = summarize(
            self.sentences["correct"].to_numpy(dtype=np.float64)[:, None], n_boot=n_boot, seed=seed
        )
        out: dict[str, Any] = {"n": len(self.sentences), "reduce": reduce, "accuracy": _stat(acc)}
        last = self.scores[self.scores["reduce"] == reduce]
        top = last["layer"].max()
        last = last[last["layer"].isna() | (last["layer"] == top)]
        for measure in MEASURES:
            node = out.setdefault(measure, {})
            for method, group in last.groupby("method", sort=False):
                node[method] = _stat(
                    summarize(group[measure].to_numpy(dtype=np.float64)[:, None], n_boot=n_boot, seed=seed)
                )
        return out


def _stat(s: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: (int(s[k][0]) if k == "n" else float(s[k][0])) for k in ("mean", "ci_low", "ci_high", "n")}


def pronoun_id(tokenizer: Any, word: str) -> int:
    """The vocabulary id of `word` (with its leading space); ValueError unless it is one token."""
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"the pronoun {word!r} is {len(ids)} tokens in this tokenizer; the test needs one")
    return int(ids[0])


def _spans(tokenizer: Any, text: str, item: PronounItem, shift: int) -> tuple[list[int], list[int]]:
    enc = tokenizer(text, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    right = token_span(offsets, (item.referent_span[0] + shift, item.referent_span[1] + shift))
    wrong = token_span(offsets, (item.distractor_span[0] + shift, item.distractor_span[1] + shift))
    if not right or not wrong:
        raise ValueError(f"sentence {item.sentence_id} {text!r}: an antecedent maps to no token")
    return right, wrong


def pronoun_study(
    model: Any,
    tokenizer: Any,
    items: Sequence[PronounItem],
    *,
    methods: Sequence[str] = PRONOUN_METHODS,
    prefix: str = "",
    ig_steps: int = 32,
    ig_batch_size: int = 8,
    batch_size: int = 16,
    progress: bool = False,
) -> PronounStudy:
    """Run the test on `items` (see the module docstring); `prefix` is put before every sentence
    (e.g. the BOS token, so the first antecedent is not the attention sink at position 0) and is
    never scored. `batch_size` texts per forward of the attention maps and AttnLRP (grouped by
    length). IG: `ig_steps` Gauss-Legendre points, baseline = the pad token at every non-special
    position (`integrated_gradients`), `ig_batch_size` texts per batch (times `ig_steps` rows)."""
    from attnflow.hf import explain_texts

    if unknown := [m for m in methods if m not in PRONOUN_METHODS]:
        raise ValueError(
            f"unknown pronoun-test method(s) {unknown}; choose from {', '.join(PRONOUN_METHODS)}"
        )
    texts = [prefix + it.text for it in items]
    right_ids = [pronoun_id(tokenizer, it.right) for it in items]
    wrong_ids = [pronoun_id(tokenizer, it.wrong) for it in items]
    mapped = [m for m in methods if m != IG] or ["raw"]  # one run also gives the logits
    explained = explain_texts(
        model,
        tokenizer,
        texts,
        methods=mapped,
        target=right_ids,
        batch_size=batch_size,
        progress=progress,
        sinks="none",
    )  # length batches; each text keeps its own target; plain attention, as the study reports it
    ig = None
    if IG in methods:
        from attnflow.compare.captum import integrated_gradients

        ig = integrated_gradients(
            model, tokenizer, texts, target=right_ids, n_steps=ig_steps, batch_size=ig_batch_size, progress=progress
        )  # fmt: skip
    rows, all_maps = [], []
    for k, (it, text, e) in enumerate(zip(items, texts, explained, strict=True)):
        right, wrong = _spans(tokenizer, text, it, len(prefix))
        maps = {m: np.asarray(e.maps[m], dtype=np.float64) for m in methods if m != IG}  # (L, T)
        if ig is not None:
            maps[IG] = np.asarray(ig[k].scores, dtype=np.float64)[None]  # (1, T)
        if any(v.shape[-1] != len(e.tokens) for v in maps.values()):
            raise ValueError(f"sentence {it.sentence_id}: the methods' maps disagree on its tokens")
        z = np.asarray(e.logits, dtype=np.float64)
        lr, lw = float(z[right_ids[k]]), float(z[wrong_ids[k]])
        rows.append({
            **{f.name: getattr(it, f.name) for f in dataclasses.fields(it) if not f.name.endswith("_span")},
            "referent_tokens": right, "distractor_tokens": wrong, "tokens": list(e.tokens),
            "logit_right": lr, "logit_wrong": lw, "p_right": 1.0 / (1.0 + math.exp(lw - lr)), "correct": lr > lw,
            "ig_delta": float(ig[k].convergence_delta) if ig is not None else float("nan"),
            "ig_difference": float(ig[k].output_difference) if ig is not None else float("nan"),
        })  # fmt: skip
        all_maps.append(maps)
    sentences = pd.DataFrame(rows)
    return PronounStudy(sentences, pronoun_tables(sentences, all_maps), all_maps)


def pronoun_tables(sentences: pd.DataFrame, maps: Sequence[dict[str, np.ndarray]]) -> pd.DataFrame:
    """The long score table from the sentence table and each sentence's maps {method: (L, T)}.

    Attention maps (`LAYERED`) give one row per layer (1-based); any other method one row with
    layer NA, from the last row of its map (AttnLRP's input relevance, IG's only row).
    """
    out = []
    for s, per in zip(sentences.itertuples(index=False), maps, strict=True):
        for method, m in per.items():
            m = np.asarray(m, dtype=np.float64)
            layered = method in LAYERED
            rows = m if layered else m[-1:]  # (L, T) or (1, T)
            layers = range(1, len(rows) + 1) if layered else [None]
            for reduce in ANTECEDENT_REDUCTIONS:
                hit = outranks_by_layer(rows, s.referent_tokens, s.distractor_tokens, reduce=reduce)
                for layer, h, r in zip(layers, hit, rows, strict=True):
                    out.append({
                        "sentence_id": s.sentence_id, "method": method, "layer": layer, "reduce": reduce,
                        "right_score": antecedent_score(r, s.referent_tokens, reduce=reduce),
                        "wrong_score": antecedent_score(r, s.distractor_tokens, reduce=reduce),
                        "referent": float(h), "model_choice": float(h if s.correct else 1.0 - h),
                        "first": float(h if s.referent_first else 1.0 - h),
                    })  # fmt: skip
    table = pd.DataFrame(out)
    table["layer"] = table["layer"].astype("Int64")
    return table


def save_pronoun_study(
    study: PronounStudy, folder: Path, maps_path: Path, *, reduce: str, n_boot: int, seed: int
) -> dict[str, Any]:
    """Write the study's files (each atomically) and return its summary:
    ``folder``/sentences.parquet, scores.parquet, shares.parquet, summary.json, and the maps at
    ``maps_path`` (`attnflow.io.save_ragged`, one [layer, token] map per sentence and method, ids =
    sentence_id)."""
    from attnflow.io import save_ragged, write_json, write_parquet

    folder = Path(folder)
    write_parquet(folder / "sentences.parquet", study.sentences)
    write_parquet(folder / "scores.parquet", study.scores)
    write_parquet(folder / "shares.parquet", study.shares(n_boot=n_boot, seed=seed))
    save_ragged(maps_path, study.map_lists(), ids=study.sentences["sentence_id"].to_numpy())
    summary = study.summary(reduce=reduce, n_boot=n_boot, seed=seed)
    write_json(folder / "summary.json", summary)
    return summary
