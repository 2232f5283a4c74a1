"""Faithfulness of many rankings over ragged samples: what the study's ``faithfulness`` stage runs.

Each ranking (an explanation method at one layer, a reference importance score, or the seeded
random floor) goes through four perturbation protocols of :func:`perturbation_curve`:

    comprehensiveness   remove the top-ranked q of the tokens, q in ferret's 0.1 .. 1.0 (floor)
    sufficiency         keep only the top-ranked q                                       (floor)
    positive            remove the most relevant first, Chefer's {0, .25, ..., 1}        (ceil)
    negative            remove the least relevant first, Chefer's fractions             (ceil)

and yields per sample: AOPC comprehensiveness (higher = more faithful) and sufficiency (lower),
the areas under the positive (lower) and negative (higher) curves of the predicted class's
probability and of the accuracy. Samples of similar length are padded together; every perturbed
copy of a batch goes through the model in chunks of ``batch_size``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnflow.batches import length_batches, pad_batch
from attnflow.data.subsets import seeded_subset
from attnflow.metrics.faithfulness import (
    HIGHER_IS_BETTER,
    RANDOM,
    aopc_comprehensiveness,
    aopc_sufficiency,
    perturbation_auc,
)
from attnflow.modes import eval_mode

from ._model import _logits
from .perturbation import CHEFER_FRACTIONS, FERRET_FRACTIONS, perturbation_curve, random_scores

__all__ = [
    "HIGHER_IS_BETTER",
    "PROTOCOLS",
    "RANDOM",
    "FaithfulnessResult",
    "faithfulness_samples",
    "faithfulness_study",
    "study_rankings",
]

# protocol -> (perturbation_curve mode, fractions, rounding)
PROTOCOLS: dict[str, tuple[str, tuple[float, ...], str]] = {
    "comprehensiveness": ("positive", FERRET_FRACTIONS, "floor"),
    "sufficiency": ("sufficiency", FERRET_FRACTIONS, "floor"),
    "positive": ("positive", CHEFER_FRACTIONS, "ceil"),
    "negative": ("negative", CHEFER_FRACTIONS, "ceil"),
}


def _scores(protocol: str, curve: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if protocol == "comprehensiveness":
        return {"comprehensiveness": aopc_comprehensiveness(curve["clean_prob"], curve["prob"], curve["k"])}
    if protocol == "sufficiency":
        return {"sufficiency": aopc_sufficiency(curve["clean_prob"], curve["prob"], curve["k"])}
    q = curve["fractions"]
    return {
        f"auc_{protocol}": perturbation_auc(curve["prob"], q),
        f"auc_{protocol}_accuracy": perturbation_auc(curve["correct"].astype(np.float64), q),
    }


class _OnceModel:
    """``model`` called at most once per distinct input: the logits of every input row already
    seen are reused (a clean sample recurs in each protocol and ranking; deleting everything, or
    the same top tokens, gives the same input for many rankings). An input row is its real part:
    ids and mask up to its last real token (padding beyond it changes nothing the model sees).

    With ``recording`` set, a call only notes the rows it has not seen and returns zero logits;
    :meth:`run_recorded` then forwards them grouped by their real length, each group without
    padding (deleting tokens shortens a copy: padded to its chunk's longest row, a perturbation
    curve's copies cost about twice their real length)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.seen: dict[tuple[bytes, bytes], torch.Tensor] = {}
        self.recording = False
        self.recorded: dict[tuple[bytes, bytes], tuple[torch.Tensor, torch.Tensor]] = {}
        self.n_classes: int | None = None

    @staticmethod
    def _keys(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[list, list[int]]:
        mask = attention_mask.cpu()
        last = (torch.where(mask != 0, torch.arange(mask.shape[1]), -1).amax(dim=1) + 1).tolist()  # (c,)
        ids = input_ids.cpu()
        return [
            (ids[r, :n].numpy().tobytes(), mask[r, :n].numpy().tobytes()) for r, n in enumerate(last)
        ], last

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with eval_mode(self.model), torch.no_grad():
            logits = _logits(self.model(input_ids=input_ids, attention_mask=attention_mask))  # (n, C)
        self.n_classes = logits.shape[-1]
        return logits

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keys, last = self._keys(input_ids, attention_mask)
        if self.recording and self.n_classes is not None:
            for r, key in enumerate(keys):
                if key not in self.seen and key not in self.recorded:
                    n = max(last[r], 1)  # a row masked out whole keeps one (masked) position
                    self.recorded[key] = (input_ids[r, :n], attention_mask[r, :n])
            return torch.zeros((len(keys), self.n_classes), dtype=torch.float64)
        first: dict[tuple[bytes, bytes], int] = {}  # each unseen input once, at its first row
        for r, key in enumerate(keys):
            if key not in self.seen:
                first.setdefault(key, r)
        new = list(first.values())
        if new:
            at = torch.as_tensor(new, device=input_ids.device)
            logits = self._forward(input_ids[at], attention_mask[at])
            for row, r in enumerate(new):
                self.seen[keys[r]] = logits[row]
        return torch.stack([self.seen[key] for key in keys])  # (c, C)

    def run_recorded(self, batch_size: int) -> None:
        """Forward every recorded row, rows of one real length together in chunks of ``batch_size``."""
        by_length: dict[int, list[tuple[bytes, bytes]]] = {}
        for key, (ids, _) in self.recorded.items():
            by_length.setdefault(int(ids.shape[0]), []).append(key)
        for _, keys in sorted(by_length.items()):
            for start in range(0, len(keys), batch_size):
                chunk = keys[start : start + batch_size]
                ids = torch.stack([self.recorded[k][0] for k in chunk])
                mask = torch.stack([self.recorded[k][1] for k in chunk])
                for key, row in zip(chunk, self._forward(ids, mask), strict=True):
                    self.seen[key] = row
        self.recorded.clear()


def faithfulness_samples(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    rankings: Mapping[tuple[str, int | None], Sequence[np.ndarray]],
    *,
    sample_ids: Sequence[int],
    random_seed: int | None = 0,
    pad_id: int = 0,
    keep_positions: Sequence[int] = (0,),
    replace_id: int | None = None,
    batch_size: int = 256,
    samples_per_batch: int = 64,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-sample faithfulness scores and mean perturbation curves of every ranking.

    ``rankings[(method, layer)]``: one (T_i,) score vector per sample (higher = more important;
    layer None for a reference score); with ``random_seed`` the seeded random floor is added as
    ``(RANDOM, None)`` (each sample's ranking depends on (seed, sample_id) only). ``replace_id`` None
    deletes tokens; else they are replaced by it (a PAD is also masked). ``keep_positions`` are
    never removed (CLS; -1 for a final SEP).

    Returns ``scores`` (columns method, layer, sample_id, metric, value) and ``curves`` (method,
    layer, protocol, fraction, prob, accuracy: means over samples); layer is a nullable int.
    """
    from tqdm.auto import tqdm

    rows = [np.asarray(r) for r in input_ids]
    if not rows:
        raise ValueError("no samples to perturb")
    for key, per_sample in rankings.items():
        if [len(s) for s in per_sample] != [len(r) for r in rows]:
            raise ValueError(f"ranking {key!r}: one score per token of each sample is needed")
    keys = [*rankings, *([(RANDOM, None)] if random_seed is not None else [])]
    ids_all = np.asarray(sample_ids)
    scores, curve_parts = [], []
    batches = length_batches([len(r) for r in rows], samples_per_batch)
    for idx in tqdm(batches, desc="faithfulness", disable=not progress, leave=False):
        ids, mask = pad_batch([rows[i] for i in idx], pad_id)
        ids, mask = ids.to(device), mask.to(device)
        once = _OnceModel(model)  # the batch's clean and perturbed inputs recur across protocols and rankings
        once(ids, mask)  # the clean inputs (and the number of classes)
        ranked = {key: _ranking(key, idx, rows, rankings, ids, mask, ids_all, random_seed) for key in keys}
        once.recording = True  # first every curve's inputs, then each distinct one forwarded, by length
        for key in keys:
            for mode, fractions, rounding in PROTOCOLS.values():
                perturbation_curve(
                    once, ids, mask, ranked[key], mode=mode, fractions=fractions, rounding=rounding,
                    replace_id=replace_id, pad_id=pad_id, keep_positions=keep_positions, batch_size=batch_size,
                )  # fmt: skip
        once.recording = False
        once.run_recorded(batch_size)
        for key in keys:
            for protocol, (mode, fractions, rounding) in PROTOCOLS.items():
                curve = perturbation_curve(
                    once, ids, mask, ranked[key], mode=mode, fractions=fractions, rounding=rounding,
                    replace_id=replace_id, pad_id=pad_id, keep_positions=keep_positions, batch_size=batch_size,
                )  # fmt: skip
                for metric, values in _scores(protocol, curve).items():
                    scores.append(
                        pd.DataFrame(
                            {
                                "method": key[0],
                                "layer": key[1],
                                "sample_id": ids_all[idx],
                                "metric": metric,
                                "value": values,
                            }
                        )
                    )
                curve_parts.append(
                    pd.DataFrame({
                        "method": key[0],
                        "layer": key[1],
                        "protocol": protocol,
                        "fraction": np.tile(curve["fractions"], len(idx)),
                        "prob": curve["prob"].ravel(),
                        "accuracy": curve["correct"].astype(np.float64).ravel(),
                    })
                )  # fmt: skip
    curves = pd.concat(curve_parts, ignore_index=True).astype({"layer": "Int64"})
    curves = curves.groupby(["method", "layer", "protocol", "fraction"], sort=False, dropna=False)[
        ["prob", "accuracy"]
    ].mean()
    return pd.concat(scores, ignore_index=True).astype({"layer": "Int64"}), curves.reset_index()


def _ranking(key, idx, rows, rankings, ids, mask, ids_all, random_seed) -> torch.Tensor:
    """(c, T) scores of ranking ``key`` for the padded batch of samples ``idx``."""
    if key == (RANDOM, None):
        return random_scores(mask, seed=random_seed, sample_index=ids_all[idx])
    ranking = torch.zeros(ids.shape, dtype=torch.float64, device=ids.device)
    for row, i in enumerate(idx):
        ranking[row, : len(rows[i])] = torch.as_tensor(np.asarray(rankings[key][i], dtype=np.float64))
    return ranking


def maps_layers(maps: Mapping[str, Sequence[np.ndarray]]) -> int:
    """The number of layers of the study's (L, T_i) maps (0 without maps)."""
    first = next(iter(maps.values()), None)
    return int(np.shape(first[0])[0]) if first is not None and len(first) else 0


def check_layers(layers: Sequence[int], n_layers: int) -> None:
    """Each of ``layers`` (``faithfulness.layers``, 1-based) is one of the model's `n_layers`
    layers; a ValueError names the key and the range otherwise."""
    if bad := [k for k in layers if not 1 <= k <= n_layers]:
        raise ValueError(
            f"faithfulness.layers={list(layers)}: {', '.join(map(str, bad))} not among the model's "
            f"{n_layers} layers (1-based: 1..{n_layers})"
        )


def study_rankings(
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    layers: Sequence[int] = (),
) -> dict[tuple[str, int | None], list[np.ndarray]]:
    """The rankings the study tests: each method at each 1-based layer of ``layers`` (empty: all;
    the last layer is always added) from its (L, T_i) maps, and each importance score (layer None).

    >>> maps = {"flow": [np.array([[0.2, 0.8], [0.6, 0.4]])]}
    >>> sorted(study_rankings(maps, {"blank_out": [np.array([0.0, 1.0])]}, layers=[1]), key=str)
    [('blank_out', None), ('flow', 1), ('flow', 2)]
    """
    n_layers = maps_layers(maps)
    check_layers(layers, n_layers)
    chosen = sorted({*(layers or range(1, n_layers + 1)), n_layers}) if n_layers else []
    out: dict[tuple[str, int | None], list[np.ndarray]] = {
        (m, k): [a[k - 1] for a in per_sample] for m, per_sample in maps.items() for k in chosen
    }
    out.update({(name, None): list(values) for name, values in importance.items()})
    return out


@dataclass
class FaithfulnessResult:
    """Tidy tables: ``scores`` (method, layer, metric, mean, std, ci_low, ci_high, n), ``curves``
    (method, layer, protocol, fraction, prob, accuracy) and ``agreement`` (every pair of methods
    per layer: Kendall tau and top-k overlap, see :func:`attnflow.metrics.agreement_table`)."""

    scores: pd.DataFrame
    curves: pd.DataFrame
    agreement: pd.DataFrame

    def metric_cells(self) -> dict[str, float]:
        """Every score as one MLflow metric: ``faithfulness/<metric>/<method>[/L<layer>]``."""
        return {
            f"faithfulness/{c.metric}/{c.method}" + ("" if pd.isna(c.layer) else f"/L{c.layer}"): c.mean
            for c in self.scores.itertuples()
        }


def faithfulness_study(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    sample_ids: Sequence[int],
    n_samples: int,
    layers: Sequence[int] = (),
    seed: int = 0,
    top_k: int = 3,
    n_boot: int = 1000,
    subset_scores: Mapping[str, Sequence[np.ndarray]] | None = None,
    **perturbation: Any,
) -> FaithfulnessResult:
    """The study's faithfulness analysis of one task.

    Agreement between methods on every sample; then, on a seeded subset of ``n_samples``, the
    perturbation tests of every method at the chosen layers (:func:`study_rankings`), of each
    importance score and of the seeded random floor, summarised per (method, layer, metric) with
    bootstrap CIs. ``subset_scores``: more token scores, computed only for the perturbed subset
    (``attnflow.data.subsets.seeded_subset``, in its order; e.g. the comparators of ``attribution.comparators``).
    ``perturbation``: options of :func:`faithfulness_samples` (pad_id, keep_positions,
    replace_id, batch_size, device, progress).
    """
    from attnflow.metrics.agreement import agreement_table
    from attnflow.metrics.tables import summary_frame

    check_layers(layers, maps_layers(maps))  # before the work, not after the agreement table
    agreement = agreement_table({**maps, **importance}, k=top_k, n_boot=n_boot, seed=seed)
    chosen = seeded_subset(len(input_ids), n_samples, seed, what="n_samples")
    rankings = {
        key: [v[i] for i in chosen] for key, v in study_rankings(maps, importance, layers=layers).items()
    }
    for name, values in (subset_scores or {}).items():
        if len(values) != len(chosen):
            raise ValueError(f"subset_scores[{name!r}] has {len(values)} samples, the subset {len(chosen)}")
        rankings[(name, None)] = list(values)
    ids = np.asarray(sample_ids)[chosen]
    per_sample, curves = faithfulness_samples(
        model, [input_ids[i] for i in chosen], rankings, sample_ids=ids, random_seed=seed, **perturbation
    )
    scores = summary_frame(per_sample, ["method", "layer", "metric"], n_boot=n_boot, seed=seed)
    return FaithfulnessResult(scores.astype({"layer": "Int64"}), curves, agreement)


def faithfulness_with_comparators(
    model: Any,
    encoder: Any,
    input_ids: Sequence[Sequence[int]],
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    methods: Sequence[str],
    task_rows: str,
    importance_options: Mapping[str, Mapping[str, Any]],
    sample_ids: Sequence[int],
    n_samples: int,
    keep_positions: Sequence[int] = (),
    seed: int = 0,
    device: Any = "cpu",
    **study: Any,
) -> tuple[FaithfulnessResult, pd.DataFrame]:
    """What the ``faithfulness`` stage computes: :func:`faithfulness_study` of the study's maps
    (``methods``) and importance, with the comparators (integrated gradients, AttnLRP, ...; the
    records' ``comparator`` methods) scored on the same seeded subset, and the cost table of every
    method (:func:`attnflow.attribution.comparators.compare_on_subset`). ``study``: the other
    options of :func:`faithfulness_study` (layers, top_k, n_boot, batch_size, replace_id, progress).
    """
    from .comparators import compare_on_subset

    check_layers(study.get("layers", ()), maps_layers(maps))  # before the comparators' work
    subset = [input_ids[i] for i in seeded_subset(len(input_ids), n_samples, seed, what="n_samples")]
    extra, cost = compare_on_subset(
        model, encoder, subset, methods=methods, task_rows=task_rows, keep_positions=keep_positions,
        importance_options=importance_options, device=device,
    )  # fmt: skip
    result = faithfulness_study(
        model, input_ids, {m: maps[m] for m in methods}, importance, sample_ids=sample_ids,
        n_samples=n_samples, subset_scores=extra, seed=seed, pad_id=encoder.pad_id,
        keep_positions=keep_positions, device=device, **study,
    )  # fmt: skip
    return result, cost
