"""The faithfulness stage under both row rules: what ``pipelines/faithfulness.py`` computes.

An attention map [layer, query, key] explains the input by one row per layer. The methods whose
record reads the task's rule (raw, rollout, flow: ``task.<name>.rows``, "max" on SST-2 as in the
authors' script) and the class-specific ones (Chefer's, Grad-SAM: the CLS row, where the classifier
reads) then answer to different rows. When the task's rule is not "cls", every task-row method is
also read at the CLS row, from the same captured attentions with the same explain options
(residual, heads), labelled ``<method>_at_cls``:

    M_cls(l)[j] = M(l)[0, j]      beside      M_task(l)[j] = max_i M(l)[i, j]   (rows: max)

and scored like every other ranking (perturbation tests, agreement, cost). Every table gets a
``rows`` column (:func:`attnflow.metrics.faithfulness.row_rule`): the rule each ranking read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnflow.data.subsets import seeded_subset
from attnflow.metrics.faithfulness import at_cls, row_rule

from .faithfulness import FaithfulnessResult, check_layers, faithfulness_study, maps_layers

__all__ = ["cls_row_maps", "faithfulness_both_rows", "second_row_methods"]


def second_row_methods(records: Sequence[Any], task_rows: str) -> tuple[list[Any], dict[str, str]]:
    """The method records to read again at the CLS row, and {method: why not} for the task-row
    methods that cannot be (they need more than the attentions); none when ``task_rows`` is "cls"."""
    if task_rows == "cls":
        return [], {}
    task = [r for r in records if r.rows == "task" and r.kind == "attention"]
    skipped = {r.name: f"no CLS-row reading: it needs {', '.join(r.needs)}, not captured with the attentions"
               for r in task if r.needs}  # fmt: skip
    return [r for r in task if not r.needs], skipped


def cls_row_maps(
    attn: Sequence[np.ndarray],
    records: Sequence[Any],
    *,
    residual: float = 0.5,
    heads: Any = "mean",
    progress: bool = False,
) -> dict[str, list[np.ndarray]]:
    """``{<method>_at_cls: [(L, T_i)]}``: each record's map read at the CLS row (row 0) of each layer,
    from the captured ``(L, H, T_i, T_i)`` attentions (:func:`attnflow.explain.samples.explain_samples`,
    as the explain stage computes them; flow then solves from CLS only). {} without records.

    >>> from attnflow.methods import resolve
    >>> a = np.array([[[[0.5, 0.5], [0.0, 1.0]]]])  # (L=1, H=1, 2, 2)
    >>> cls_row_maps([a], resolve(["raw"]))["raw_at_cls"][0].tolist()  # row 0; rows "max": [[0.5, 1.0]]
    [[0.5, 0.5]]
    """
    from attnflow.explain.samples import explain_samples

    if not records:
        return {}
    maps = explain_samples(
        attn, methods=records, residual=residual, heads=heads, rows="cls", progress=progress
    )
    return {at_cls(r.name): maps[r.name] for r in records}


def faithfulness_both_rows(
    model: Any,
    encoder: Any,
    input_ids: Sequence[Sequence[int]],
    maps: Mapping[str, Sequence[np.ndarray]],
    importance: Mapping[str, Sequence[np.ndarray]],
    *,
    methods: Sequence[str],
    task_rows: str,
    load_attentions: Callable[[], Sequence[np.ndarray]],
    importance_options: Mapping[str, Mapping[str, Any]],
    sample_ids: Sequence[int],
    n_samples: int,
    residual: float = 0.5,
    heads: Any = "mean",
    keep_positions: Sequence[int] = (),
    seed: int = 0,
    device: Any = "cpu",
    progress: bool = False,
    **study: Any,
) -> tuple[FaithfulnessResult, pd.DataFrame]:
    """:func:`attnflow.attribution.faithfulness.faithfulness_with_comparators` with the task-row
    methods also read at the CLS row when ``task_rows`` is not "cls" (:func:`cls_row_maps` of
    ``load_attentions()``, the samples' captured attentions in the order of ``input_ids``; called
    only then), timed like the others; every table with its ``rows`` column. ``residual`` /
    ``heads``: the explain stage's options. ``study``: the other options of :func:`faithfulness_study`
    (layers, top_k, n_boot, batch_size, replace_id).
    """
    from attnflow.methods import METHODS, resolve

    from .comparators import GRADIENT, compare_on_subset, cost_steps, method_costs

    check_layers(study.get("layers", ()), maps_layers(maps))  # before the comparators' work
    records, skipped = second_row_methods(resolve(methods), task_rows)
    attn = load_attentions() if records else []  # read only for a second reading
    extra_maps = cls_row_maps(attn, records, residual=residual, heads=heads, progress=progress)
    del attn  # (L, H, T_i, T_i) per sample: not kept through the perturbation tests
    subset = [input_ids[i] for i in seeded_subset(len(input_ids), n_samples, seed, what="n_samples")]
    scores, cost = compare_on_subset(
        model, encoder, subset, methods=methods, task_rows=task_rows, keep_positions=keep_positions,
        importance_options=importance_options, device=device,
    )  # fmt: skip
    if records:  # the CLS-row readings' cost, timed after the warm-up of compare_on_subset
        steps = cost_steps(model, subset, methods=[r.name for r in records], task_rows="cls",
                           importance_options={}, pad_id=encoder.pad_id, device=device)  # fmt: skip
        unit = float(cost.set_index("method").at[GRADIENT, "seconds_per_sentence"])
        timed = method_costs(steps, len(subset))
        cost = pd.concat([cost, pd.DataFrame([
            {"method": at_cls(m), "seconds_per_sentence": s, "vs_gradient": s / unit, "skipped": "", "n": len(subset)}
            for m, s in timed.items()
        ])], ignore_index=True)  # fmt: skip
    if skipped:
        cost = pd.concat([cost, pd.DataFrame([
            {"method": at_cls(m), "seconds_per_sentence": np.nan, "vs_gradient": np.nan, "skipped": why, "n": len(subset)}
            for m, why in skipped.items()
        ])], ignore_index=True)  # fmt: skip
    result = faithfulness_study(
        model, input_ids, {**{m: maps[m] for m in methods}, **extra_maps}, importance, sample_ids=sample_ids,
        n_samples=n_samples, subset_scores=scores, seed=seed, pad_id=encoder.pad_id,
        keep_positions=keep_positions, device=device, progress=progress, **study,
    )  # fmt: skip
    map_rows = {name: r.rows for name, r in METHODS.items() if r.kind == "attention"}

    def rule(labels: pd.Series) -> list[str]:
        return [row_rule(m, task_rows=task_rows, map_rows=map_rows) for m in labels]

    agreement = result.agreement.assign(rows_a=rule(result.agreement["method_a"]),
                                        rows_b=rule(result.agreement["method_b"]))  # fmt: skip
    labelled = FaithfulnessResult(
        result.scores.assign(rows=rule(result.scores["method"])),
        result.curves.assign(rows=rule(result.curves["method"])),
        agreement,
    )
    return labelled, cost.assign(rows=rule(cost["method"]))
