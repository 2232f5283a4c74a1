"""Limitations: where our cells miss the paper's by a wide margin, with the evidence the run holds
about each miss, and where the run departs from the paper (model, sample, seeds).

A **large miss**: the paper's mean lies farther than :data:`MISS_THRESHOLD` outside our interval
(:func:`attnflow.report.sections.paper_tables.pooled_cells`):

    miss = max(ci_low - paper_mean, paper_mean - ci_high, 0) > MISS_THRESHOLD

Misses are grouped per method and side (ours above or below the paper): within a table, runs of
adjacent printed layers; the same run of layers in several tables is one group ("Raw L5-L6,
Tables 1-2"). Each group is read against the seed spread of its cells (std of the per-seed means
of a seed sweep, :func:`attnflow.report.frames.seed_frame`) and against the authors' own spread
between their checkpoints (:data:`attnflow.report.paper.AUTHORS_SPREAD`). Every number is taken
from the frames; a frame the run lacks gives "not measured in this run".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..context import Context, get
from ..document import Bullets, Heading, Paragraph
from ..frames import seed_frame
from ..paper import AUTHORS_CHOICES, AUTHORS_SPREAD, TABLES
from ..tables import EXPLAINER_LABELS, IMPORTANCE_LABELS, fmt_delta
from .paper_tables import CI, our_cells, span, sst2_model, trained_here

__all__ = ["MISS_THRESHOLD", "MissGroup", "group_bullet", "layers_label", "miss_groups", "section"]

MISS_THRESHOLD = (
    0.10  # a large miss: the paper's mean this far outside our interval (the study's ±0.10 target)
)
KEYS = ["task", "importance", "method", "layer"]
NOTEBOOK_SAMPLE = "conf/switch/notebook_sample.yaml"  # `+switch=notebook_sample`: the notebook's sample


@dataclass(frozen=True)
class MissGroup:
    """Cells of one method that miss the paper on the same side, over a run of adjacent layers."""

    method: str
    side: str  # "below" (ours < paper) or "above"
    layers: tuple[int, ...]
    tables: tuple[int, ...]
    cells: pd.DataFrame  # their rows of pooled_cells, by table then layer


def layers_label(layers: Sequence[int]) -> str:
    """``L3-L6`` for consecutive layers, else the list.

    >>> layers_label([5, 6]), layers_label([3]), layers_label([1, 3, 5, 6])
    ('L5-L6', 'L3', 'L1, L3, L5, L6')
    """
    layers = list(layers)
    if len(layers) == 1:
        return f"L{layers[0]}"
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"L{layers[0]}-L{layers[-1]}"
    return ", ".join(f"L{k}" for k in layers)


def _tables_label(tables: Sequence[int]) -> str:
    tables = sorted(tables)
    if len(tables) == 1:
        return f"Table {tables[0]}"
    if tables == list(range(tables[0], tables[-1] + 1)):
        return f"Tables {tables[0]}-{tables[-1]}"
    return "Tables " + ", ".join(map(str, tables))


def miss_groups(cells: pd.DataFrame, threshold: float = MISS_THRESHOLD) -> list[MissGroup]:
    """The large misses among ``cells`` (:func:`~.paper_tables.pooled_cells` rows), grouped: per
    (table, method, side) the runs of adjacent layers in the table's printed order, then one group
    per (method, side, layers) across tables. Ordered by first table, the paper's method order,
    first layer."""
    misses = cells[cells["miss"].astype(float) > threshold]
    side = np.where(misses["mean"].astype(float) < misses["paper_mean"].astype(float), "below", "above")
    misses = misses.assign(side=side)
    runs: dict[tuple[str, str, tuple[int, ...]], list[int]] = {}
    for paper in TABLES:
        for (method, where), rows in misses[misses["table"] == paper.number].groupby(["method", "side"]):
            positions = sorted(paper.layers.index(int(k)) for k in rows["layer"])
            start = 0
            for i in range(1, len(positions) + 1):
                if i == len(positions) or positions[i] != positions[i - 1] + 1:
                    layers = tuple(paper.layers[p] for p in positions[start:i])
                    runs.setdefault((method, where, layers), []).append(paper.number)
                    start = i
    order = {m: i for i, m in enumerate(TABLES[0].cells)}
    groups = []
    for (method, where, layers), tables in runs.items():
        rows = misses[
            misses["table"].isin(tables) & (misses["method"] == method) & misses["layer"].isin(layers)
        ]
        rows = rows[rows["side"] == where].sort_values(["table", "layer"]).drop(columns="side")
        groups.append(MissGroup(method, where, layers, tuple(sorted(tables)), rows.reset_index(drop=True)))
    return sorted(groups, key=lambda g: (g.tables[0], order.get(g.method, len(order)), g.layers[0]))


def _range(values: pd.Series) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}"


def group_bullet(group: MissGroup, seeds: pd.DataFrame | None, ci: float = CI) -> str:
    """One limitation: the group's miss with each cell's interval, the seed spread of its cells
    beside the miss (``seeds``: :func:`~attnflow.report.frames.seed_frame` rows; None: no sweep,
    said once for the section) and the authors' own spread."""
    c = group.cells
    label = EXPLAINER_LABELS.get(group.method, group.method)
    against = sorted({IMPORTANCE_LABELS.get(i, i) for i in c["importance"]})
    cells = "; ".join(
        f"T{r.table} L{r.layer} {r.mean:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}] vs {r.paper_mean:.2f} "
        f"(Δ {fmt_delta(r.mean - r.paper_mean)})"
        for r in c.itertuples()
    )
    text = (
        f"**{label} {layers_label(group.layers)}, {_tables_label(group.tables)}** (vs {', '.join(against)}): "
        f"ours {group.side} the paper's mean, which lies {_range(c['miss'])} outside our {ci:.0%} interval "
        f"(ours [interval] vs paper: {cells})."
    )
    spread = None
    if seeds is not None:  # the seed sweep's std of the per-seed means, beside each cell
        by_seed = seeds[[*KEYS, "std", "n_seeds"]].rename(
            columns={"std": "seed_std", "n_seeds": "sweep_seeds"}
        )
        spread = c[KEYS].merge(by_seed, on=KEYS, how="left")
    if spread is None:
        pass  # said once for the section (_seeds_bullet)
    elif not np.isfinite(spread["seed_std"].astype(float)).any():
        text += (
            " Seed spread: not measured for these cells (the seed sweep has fewer than two seeds of them)."
        )
    else:
        std, miss = spread["seed_std"].astype(float), float(c["miss"].min())
        if float(std.max()) > 0:
            ratio = miss / float(std.max())
            reading = "larger than the seed spread" if ratio > 1 else "within the seed spread"
            compared = f"the smallest miss is {ratio:.1f}× the largest: {reading}"
        else:
            compared = "the seeds agree exactly: the miss is not seed-to-seed variation"
        text += (
            f" Seed spread (std of the per-seed means, {int(spread['sweep_seeds'].max())} seeds): "
            f"{_range(std)}; {compared}."
        )
    return text + _authors(group)


def _agreement_tables() -> tuple[int, ...]:
    """The other tables of the task whose cell the authors' spread was measured on (Table 2)."""
    task = next(t.task for t in TABLES if t.number == AUTHORS_SPREAD.table)
    return tuple(t.number for t in TABLES if t.task == task and t.number != AUTHORS_SPREAD.table)


def _authors(group: MissGroup) -> str:
    """The group's miss against the authors' own spread between checkpoints (their Table 1), or
    what their runs showed for the group's other tables."""
    s, out = AUTHORS_SPREAD, ""
    width = s.high - s.low
    if s.table in group.tables:
        miss = float(group.cells.loc[group.cells["table"] == s.table, "miss"].max())
        out += (
            f" Against the authors' own spread between checkpoints ({width:.2f}, Table {s.table}): "
            f"{'within' if miss <= width else 'beyond'} it."
        )
    if others := sorted(set(group.tables) & set(_agreement_tables())):
        out += f" {_tables_label(others)}: {s.elsewhere}, so no such spread to set the miss against."
    if set(group.tables) - {s.table, *_agreement_tables()}:
        out += " Table 3 runs on another model than the paper's (below): a miss there mixes model and method."
    return out


def _spread_bullet() -> str:
    """The authors' own spread between their checkpoints, stated once with its source."""
    s = AUTHORS_SPREAD
    return (
        f"**The authors' own spread**: between their checkpoints and variants, Table {s.table}'s "
        f"{EXPLAINER_LABELS.get(s.method, s.method)} L{s.layer} ranged {s.low:.2f}-{s.high:.2f} (a spread of "
        f"{s.high - s.low:.2f}), while {s.elsewhere} ({s.source})."
    )


def _authors_choice(key: str) -> str | None:
    return next((c.value for c in AUTHORS_CHOICES if c.key == key), None)


def _sample_bullet(ctx: Context, cells: pd.DataFrame) -> str:
    """This run's agreement sample beside the one of the notebook that printed Tables 1-2."""
    capture = get(ctx.config, "task.agreement.capture") or {}
    if "agreement" not in ctx.inputs or not capture:
        return "**Sample (Tables 1-2)**: not measured in this run (no agreement task or no capture config)."
    ours = {k: capture.get(k) for k in ("n_samples", "split", "select")}
    theirs = {k: _authors_choice(f"task.agreement.capture.{k}") for k in ours}
    scored = cells[(cells["task"] == "agreement") & (cells["n"] > 0)]
    count = f"; {span(scored['n'])} sentence values per cell scored" if len(scored) else ""
    same = all(str(ours[k]) == str(theirs[k]) for k in ours)
    return (
        f"**Sample (Tables 1-2)**: ours {ours['n_samples']} items of the `{ours['split']}` split "
        f"({ours['select']}){count}; the notebook that printed Tables 1-2 took {theirs['n_samples']} items of the "
        f"`{theirs['split']}` split ({theirs['select']}, in file order)"
        + (
            ": this run uses that sample."
            if same
            else f"; `+switch=notebook_sample` ({NOTEBOOK_SAMPLE}) re-runs on it. The paper's captions state "
            "the first, the printed numbers come from the second."
        )
    )


def _model_bullet(ctx: Context) -> str:
    """Table 3's model and sample beside the paper's."""
    if "sst2" not in ctx.inputs:
        return "**Table 3's model**: not measured in this run (task sst2 not run)."
    capture = get(ctx.config, "task.sst2.capture") or {}
    sample = (
        f" Sample: ours {capture.get('n_samples')} items of the `{capture.get('split')}` split; the authors' "
        f"script scored the `{_authors_choice('task.sst2.capture.split')}` split (labels hidden)."
        if capture
        else ""
    )
    return (
        f"**Table 3's model**: ours is {sst2_model(ctx.config, trained_here(ctx, 'sst2'))}. Its cells compare "
        f"methods on another model than the paper's.{sample}"
    )


def _seeds_bullet(cells: pd.DataFrame, seeds: pd.DataFrame | None) -> str:
    """Over how many seeds the intervals are pooled, and whether the seed spread was measured."""
    pooled = cells[cells["pooled"]]
    spread = (
        " The seed spread of the cells: not measured in this run (no seed sweep)."
        if seeds is None or not np.isfinite(seeds["std"].astype(float)).any()
        else ""
    )
    if pooled.empty:
        return (
            "**Per-sentence correlations**: not measured in this run (no sentences.parquet): the intervals "
            "are this run's over its samples, one seed." + spread
        )
    n = int(pooled["n_seeds"].max())
    if n <= 1:
        return (
            "**Seeds**: one seed in this run: the intervals hold the spread over sentences only, not over "
            "training seeds." + spread
        )
    return (
        f"**Seeds**: the intervals are pooled over {n} seeds (two-level bootstrap: seeds, then sentences)."
        + spread
    )


def section(ctx: Context) -> None:
    ci = float(get(ctx.config, "correlate.ci") or CI)
    cells = our_cells(ctx)
    seeds = None
    if ctx.sweep is not None and not ctx.sweep.empty and "task" in ctx.sweep:
        seeds = seed_frame(ctx.sweep)
    items = []
    if not cells["mean"].notna().any():
        items.append("**Misses against the paper**: not measured in this run (no correlation tables).")
    else:
        groups = miss_groups(cells)
        items += [group_bullet(g, seeds, ci) for g in groups]
        if not groups:
            items.append(
                f"**Misses against the paper**: no cell's {ci:.0%} interval lies more than "
                f"{MISS_THRESHOLD:.2f} from the paper's mean."
            )
    items += [_spread_bullet(), _model_bullet(ctx), _sample_bullet(ctx, cells), _seeds_bullet(cells, seeds)]
    ctx.add(
        Heading("Limitations", 2),
        Paragraph(
            f"Where our cells miss the paper's by more than {MISS_THRESHOLD:.2f} (the paper's mean that far "
            f"outside our {ci:.0%} interval, as in Tables 1-3), grouped by method and adjacent layers, each "
            "with its interval, the seed spread of its cells and the authors' own spread between their "
            "checkpoints; then where this run departs from the paper."
        ),
        Bullets(items),
    )
