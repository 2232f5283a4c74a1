"""The pronoun test of Abnar & Zuidema (2020), Figure 4, asked of a causal LM: which antecedent do
raw attention, rollout, flow, AttnLRP and integrated gradients point to?

An analogue, not the paper's experiment: the paper masks a pronoun in BERT; a causal LM predicts
it at the last position of a sentence that ends right before it (`attnflow.pronouns.sentences`,
minimal pairs with the antecedents swapped). For every sentence, `attnflow.hf.explain_texts` gives
the explained row (the last position) of raw attention, rollout and flow at every layer in two
variants, AttnLRP's relevance (`attnflow.attnlrp`, its input row) and the next-token logits;
captum's integrated gradients (`attnflow.compare.captum.integrated_gradients`) gives IG x input
per token. The gradient methods explain the logit of the referent's pronoun.

    plain      sinks="none", receptive_field="none": the maps as the paper computes them
    corrected  `CORRECTION`: the attention sinks handled (sinks="auto", as attnflow's generation
               path does) and the receptive-field correction the paper recommends for decoders
               (receptive_field="uniform", `attnflow.explain.normalize_receptive_field`)

AttnLRP and integrated gradients have no such correction: their rows are variant "plain" only.
The causal reference (`attnflow.pronouns.causal`) blanks each antecedent in turn and names the one
whose removal costs the preferred pronoun more of its logit margin. Then, per method, variant,
layer and antecedent reduction (`attnflow.metrics.antecedents`), h = outranks(map, referent
tokens, distractor tokens) (1 / 0.5 / 0) and, with c the indicator (1 / 0.5 / 0) of each side,

    referent      h
    model_choice  h c + (1 − h)(1 − c),  c = [the model prefers the referent's pronoun]
    causal        the same, c = `CAUSAL_VALUE` of the causal choice (1 referent, 1/2 tie, 0 distractor)
    first         the same, c = [the referent is mentioned first] (position bias: always first -> 1)

Every measure is 0.5 by design for a map that ignores the antecedents (a coin; `CHANCE`): half
the sentences put the referent first, and each pair has it male once and female once. The
model's accuracy = share of sentences with logit(right pronoun) > logit(wrong pronoun). Shares come
with a percentile-bootstrap interval (`attnflow.metrics.summarize`). torch and transformers are
used through attnflow.hf / attnflow.compare / `causal_reference`; nothing is imported here.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
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

from .causal import CAUSAL_VALUE, blank_token_id, causal_reference
from .sentences import PronounItem, token_span

__all__ = [
    "CHANCE",
    "CORRECTION",
    "IG",
    "LAYERED",
    "MEASURES",
    "PRONOUN_METHODS",
    "VARIANTS",
    "PronounStudy",
    "map_key",
    "pronoun_id",
    "pronoun_study",
    "pronoun_tables",
    "save_pronoun_study",
]

IG = "integrated_gradients"
# The methods of the test (attnflow.options.PRONOUN_METHODS): the attention maps have one row per
# layer; the model-level ones give one input attribution each (AttnLRP's input relevance, IG x input).
LAYERED = ("raw", "rollout", "flow")
MEASURES = ("referent", "model_choice", "causal", "first")
CHANCE = 0.5  # every measure's value for a map that cannot tell the antecedents apart (by design)
VARIANTS = ("plain", "corrected")
# the "corrected" variant's options of explain_texts (plain: sinks="none", receptive_field="none")
CORRECTION = {"sinks": "auto", "receptive_field": "uniform"}


def map_key(method: str, variant: str = "plain") -> str:
    """The key of a method's map in `PronounStudy.maps` and the maps file: the method for "plain",
    "<method>/<variant>" otherwise.

    >>> map_key("rollout"), map_key("rollout", "corrected")
    ('rollout', 'rollout/corrected')
    """
    return method if variant == "plain" else f"{method}/{variant}"


@dataclass
class PronounStudy:
    """``sentences``: one row per sentence (the item with its pair and order, its token spans, the
    pronoun logits, whether the model prefers the right pronoun, the causal reference);
    ``scores``: one row per (sentence, method, variant, layer, reduce) with the two antecedent
    scores and each measure (1 / 0.5 / 0; layer NA for attnlrp and IG); ``maps``: per sentence,
    {`map_key`: [layer, token]} over ``sentences.tokens`` (IG as one row); ``blank``: the causal
    reference's blank token."""

    sentences: pd.DataFrame
    scores: pd.DataFrame
    maps: list[dict[str, np.ndarray]]
    blank: str | None = None

    def map_lists(self) -> dict[str, list[np.ndarray]]:
        """{map key: one map per sentence}, in sentence order (for `attnflow.io.save_ragged`)."""
        return {m: [d[m] for d in self.maps] for m in (self.maps[0] if self.maps else {})}

    def shares(self, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Per (measure, method, variant, layer, reduce): mean share, bootstrap CI, n
        (`summary_frame`), and the measure's chance level (`CHANCE`)."""
        long = self.scores.melt(
            id_vars=["sentence_id", "method", "variant", "layer", "reduce"], value_vars=list(MEASURES),
            var_name="measure", value_name="value",
        )  # fmt: skip
        by = ["measure", "method", "variant", "layer", "reduce"]
        return summary_frame(long, by, n_boot=n_boot, seed=seed).assign(chance=CHANCE)

    def summary(self, *, reduce: str = "max", n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        """For ``dvc metrics show``: n, the model's accuracy, the share of sentences whose causal
        choice is the referent, the chance level, and per measure and method the share at the last
        layer (attention maps) or the input row (attnlrp, IG), each with its CI: the plain variant at
        ``summary[measure][method]``, the corrected one at ``summary["corrected"][measure][method]``."""

        def stat(values: Any) -> dict[str, float]:
            return _stat(summarize(np.asarray(values, dtype=np.float64)[:, None], n_boot=n_boot, seed=seed))

        causal = self.sentences["causal_choice"].map(CAUSAL_VALUE)
        out: dict[str, Any] = {
            "n": len(self.sentences), "reduce": reduce, "chance": CHANCE,
            "accuracy": stat(self.sentences["correct"]), "causal_referent": stat(causal), "blank": self.blank,
        }  # fmt: skip
        last = self.scores[self.scores["reduce"] == reduce]
        top = last["layer"].max()
        last = last[last["layer"].isna() | (last["layer"] == top)]
        for variant, rows in last.groupby("variant", sort=False):
            node = out if variant == "plain" else out.setdefault(str(variant), {})
            for measure in MEASURES:
                cell = node.setdefault(measure, {})
                for method, group in rows.groupby("method", sort=False):
                    cell[method] = stat(group[measure])
        return out


def _stat(s: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: (int(s[k][0]) if k == "n" else float(s[k][0])) for k in ("mean", "ci_low", "ci_high", "n")}


def pronoun_id(tokenizer: Any, word: str) -> int:
    """The vocabulary id of `word` (with its leading space); ValueError unless it is one token."""
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"the pronoun {word!r} is {len(ids)} tokens in this tokenizer; the test needs one")
    return int(ids[0])


def _spans(
    tokenizer: Any, text: str, item: PronounItem, shift: int
) -> tuple[list[int], list[int], list[int]]:
    """The text's token ids, and the token positions of its referent and distractor."""
    enc = tokenizer(text, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    right = token_span(offsets, (item.referent_span[0] + shift, item.referent_span[1] + shift))
    wrong = token_span(offsets, (item.distractor_span[0] + shift, item.distractor_span[1] + shift))
    if not right or not wrong:
        raise ValueError(f"sentence {item.sentence_id} {text!r}: an antecedent maps to no token")
    return list(enc["input_ids"]), right, wrong


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
    never scored. Raw attention, rollout and flow run twice, plain and `CORRECTION`; AttnLRP and
    IG once (variant "plain": they have no correction). `batch_size` texts per forward of the
    attention maps and AttnLRP (grouped by length) and sentences (x 3) per forward of the causal
    reference. IG: `ig_steps` Gauss-Legendre points, baseline = the pad token at every non-special
    position (`integrated_gradients`), `ig_batch_size` texts per batch (times `ig_steps` rows)."""
    from attnflow.hf import SinkWarning, explain_texts

    if unknown := [m for m in methods if m not in PRONOUN_METHODS]:
        raise ValueError(
            f"unknown pronoun-test method(s) {unknown}; choose from {', '.join(PRONOUN_METHODS)}"
        )
    texts = [prefix + it.text for it in items]
    right_ids = [pronoun_id(tokenizer, it.right) for it in items]
    wrong_ids = [pronoun_id(tokenizer, it.wrong) for it in items]
    mapped = [m for m in methods if m != IG] or ["raw"]  # one run also gives the logits
    common = {"batch_size": batch_size, "progress": progress}
    with warnings.catch_warnings():  # the plain variant keeps the sink on purpose; "corrected" removes it
        warnings.simplefilter("ignore", SinkWarning)
        explained = explain_texts(
            model, tokenizer, texts, methods=mapped, target=right_ids, sinks="none", **common
        )  # length batches; each text keeps its own target; plain attention, as the paper computes it
    layered = [m for m in methods if m in LAYERED]
    corrected = (
        explain_texts(model, tokenizer, texts, methods=layered, **CORRECTION, **common) if layered else None
    )
    ig = None
    if IG in methods:
        from attnflow.compare.captum import integrated_gradients

        ig = integrated_gradients(
            model, tokenizer, texts, target=right_ids, n_steps=ig_steps, batch_size=ig_batch_size, progress=progress
        )  # fmt: skip
    rows, all_maps, ids = [], [], []
    for k, (it, text, e) in enumerate(zip(items, texts, explained, strict=True)):
        token_ids, right, wrong = _spans(tokenizer, text, it, len(prefix))
        maps = {m: np.asarray(e.maps[m], dtype=np.float64) for m in methods if m != IG}  # (L, T)
        if corrected is not None:
            maps |= {
                map_key(m, "corrected"): np.asarray(corrected[k].maps[m], dtype=np.float64) for m in layered
            }
        if ig is not None:
            maps[IG] = np.asarray(ig[k].scores, dtype=np.float64)[None]  # (1, T)
        if any(v.shape[-1] != len(e.tokens) for v in maps.values()) or len(token_ids) != len(e.tokens):
            raise ValueError(f"sentence {it.sentence_id}: the methods' maps disagree on its tokens")
        z = np.asarray(e.logits, dtype=np.float64)
        lr, lw = float(z[right_ids[k]]), float(z[wrong_ids[k]])
        rows.append({
            **{f.name: getattr(it, f.name) for f in dataclasses.fields(it) if not f.name.endswith("_span")},
            "referent_tokens": right, "distractor_tokens": wrong, "tokens": list(e.tokens),
            "logit_right": lr, "logit_wrong": lw, "p_right": 1.0 / (1.0 + math.exp(lw - lr)), "correct": lr > lw,
            "preferred": it.right if lr > lw else it.wrong,
            "ig_delta": float(ig[k].convergence_delta) if ig is not None else float("nan"),
            "ig_difference": float(ig[k].output_difference) if ig is not None else float("nan"),
        })  # fmt: skip
        all_maps.append(maps)
        ids.append(token_ids)
    sentences = pd.DataFrame(rows)
    preferred = [r if c else w for r, w, c in zip(right_ids, wrong_ids, sentences["correct"], strict=True)]
    other = [w if c else r for r, w, c in zip(right_ids, wrong_ids, sentences["correct"], strict=True)]
    blank = blank_token_id(tokenizer)
    reference = causal_reference(
        model, ids, sentences["referent_tokens"].tolist(), sentences["distractor_tokens"].tolist(), preferred,
        other, blank_id=blank, batch_size=batch_size,
    )  # fmt: skip
    sentences = pd.concat([sentences, reference], axis=1)
    blank_token = tokenizer.convert_ids_to_tokens([blank])[0]
    return PronounStudy(sentences, pronoun_tables(sentences, all_maps), all_maps, blank=blank_token)


def _agrees(h: float, c: float) -> float:
    """h c + (1 − h)(1 − c): whether the map (h) favours the side that c (1 / 0.5 / 0) names."""
    return float(h * c + (1.0 - h) * (1.0 - c))


def pronoun_tables(sentences: pd.DataFrame, maps: Sequence[dict[str, np.ndarray]]) -> pd.DataFrame:
    """The long score table from the sentence table (with its causal reference, ``causal_choice``)
    and each sentence's maps {`map_key`: (L, T)}.

    Attention maps (`LAYERED`) give one row per layer (1-based); any other method one row with
    layer NA, from the last row of its map (AttnLRP's input relevance, IG's only row). The variant
    is read off the map's key ("plain" for a bare method name).
    """
    out = []
    for s, per in zip(sentences.itertuples(index=False), maps, strict=True):
        sides = {"model_choice": float(s.correct), "causal": CAUSAL_VALUE[s.causal_choice],
                 "first": float(s.referent_first)}  # fmt: skip
        for key, m in per.items():
            method, _, variant = key.partition("/")
            m = np.asarray(m, dtype=np.float64)
            layered = method in LAYERED
            rows = m if layered else m[-1:]  # (L, T) or (1, T)
            layers = range(1, len(rows) + 1) if layered else [None]
            for reduce in ANTECEDENT_REDUCTIONS:
                hit = outranks_by_layer(rows, s.referent_tokens, s.distractor_tokens, reduce=reduce)
                for layer, h, r in zip(layers, hit, rows, strict=True):
                    out.append({
                        "sentence_id": s.sentence_id, "method": method, "variant": variant or "plain",
                        "layer": layer, "reduce": reduce,
                        "right_score": antecedent_score(r, s.referent_tokens, reduce=reduce),
                        "wrong_score": antecedent_score(r, s.distractor_tokens, reduce=reduce),
                        "referent": float(h), **{k: _agrees(h, c) for k, c in sides.items()},
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
