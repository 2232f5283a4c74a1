"""The paper's claims about Tables 1-2, checked one by one on the seed means (and on the paper's own
cells, so each rule is shown to hold where the paper says it does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnflow.metrics.ledger import ledger

from ..context import Context
from ..document import Heading, Paragraph, Table
from ..frames import seed_frame
from ..inputs import sentence_frames
from ..paper import TABLES, paper_frame
from ..tables import Grid, fmt

TOLERANCE = 0.10  # the replication's target: every rollout/flow cell within ±0.10 of the paper
STD_TOLERANCE = 0.10  # and the mean per-sample std within 0.10 of the paper's

Cells = Callable[[str, str, int], float]  # (importance, method, layer) -> value


@dataclass(frozen=True)
class Claim:
    """A claim, its rule in words, and the statistic whose sign (>= 0) decides it."""

    text: str
    rule: str
    margin: Callable[[Cells], float]  # >= 0: the claim holds


def _mean(cells: Cells, importance: str, method: str, layers: range) -> float:
    return float(np.mean([cells(importance, method, k) for k in layers]))


def _rise(importance: str, method: str) -> Callable[[Cells], float]:
    return lambda c: c(importance, method, 6) - c(importance, method, 1) - 0.10


CLAIMS: tuple[Claim, ...] = (
    *(
        Claim(
            f"raw attention loses its signal after layer 1 (vs {imp.replace('_', ' ')})",
            "mean(raw L2-L6) ≤ raw L1 − 0.20",
            lambda c, imp=imp: c(imp, "raw", 1) - 0.20 - _mean(c, imp, "raw", range(2, 7)),
        )
        for imp in ("blank_out", "input_gradients")
    ),
    *(
        Claim(
            f"{method} rises with depth (vs {imp.replace('_', ' ')})",
            f"{method} L6 − L1 ≥ 0.10",
            _rise(imp, method),
        )
        for imp in ("blank_out", "input_gradients")
        for method in ("rollout", "flow")
    ),
    Claim(
        "flow agrees better than rollout with blank-out from layer 3 on",
        "mean over L3-L6 of (flow − rollout) > 0",
        lambda c: float(
            np.mean([c("blank_out", "flow", k) - c("blank_out", "rollout", k) for k in range(3, 7)])
        ),
    ),
    *(
        Claim(
            f"raw L1 differs from rollout L1 (vs {imp.replace('_', ' ')})",
            "|raw L1 − rollout L1| ≥ 0.10",
            lambda c, imp=imp: abs(c(imp, "raw", 1) - c(imp, "rollout", 1)) - 0.10,
        )
        for imp in ("blank_out", "input_gradients")
    ),
)


def lookup(frame: pd.DataFrame, column: str = "mean") -> Cells:
    """A cell getter over a frame with columns importance, method, layer and ``column``."""
    index = frame.set_index(["importance", "method", "layer"])[column]
    return lambda importance, method, layer: float(index.get((importance, method, layer), np.nan))


def paper_cells() -> Cells:
    """The paper's Tables 1-2 as a cell getter (means)."""
    rows = paper_frame()
    return lookup(rows[rows["task"] == "agreement"].rename(columns={"paper_mean": "mean"}))


def check_claims(ours: Cells) -> list[tuple[Claim, float, float]]:
    """Each claim with its statistic on the paper's cells and on ``ours`` (>= 0: it holds).

    >>> all(paper >= 0 for _, paper, _ in check_claims(paper_cells()))  # the paper meets its claims
    True
    """
    paper = paper_cells()
    return [(claim, claim.margin(paper), claim.margin(ours)) for claim in CLAIMS]


def target_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Every published rollout/flow cell of Tables 1-2 beside ours: Δ and whether |Δ| ≤ TOLERANCE,
    and our per-sample std beside the paper's (``cells``: importance, method, layer, mean, std)."""
    paper = paper_frame()
    paper = paper[(paper["task"] == "agreement") & paper["method"].isin(["rollout", "flow"])]
    out = paper.merge(cells, on=["importance", "method", "layer"], how="left")
    return out.assign(
        delta=out["mean"] - out["paper_mean"], within=(out["mean"] - out["paper_mean"]).abs() <= TOLERANCE
    )


def seed_cells(stacked: pd.DataFrame) -> tuple[pd.DataFrame, list[int]]:
    """The agreement cells of stacked per-seed tables (column ``seed``): per (importance, method,
    layer) the mean over seeds of the means and of the per-sample stds; and the seeds."""
    stacked = stacked[stacked["task"] == "agreement"]
    means = seed_frame(stacked)[["importance", "method", "layer", "mean", "n_seeds"]]
    rows = stacked[(stacked["variant"] == "configured") & stacked["head"].isna()]
    stds = rows.groupby(["importance", "method", "layer"])["std"].mean().rename("std").reset_index()
    seeds = sorted(int(s) for s in stacked["seed"].unique())
    return means.merge(stds, on=["importance", "method", "layer"]), seeds


def _our_cells(ctx: Context) -> tuple[pd.DataFrame, str]:
    """Seed means of the means and of the per-sample stds (this run alone without a sweep)."""
    stacked = ctx.sweep
    if stacked is None or stacked.empty:
        got = ctx.inputs.get("agreement")
        if got is None or got.table is None:
            return pd.DataFrame(), ""
        stacked = got.table.assign(seed=ctx.config.get("seed", 0), task="agreement")
    cells, seeds = seed_cells(stacked)
    return cells, f"seeds {seeds}"


def section(ctx: Context) -> None:
    cells, over = _our_cells(ctx)
    if cells.empty:
        return
    claims = Grid(
        header=["claim", "rule", "paper", "ours", "holds"], rows=[], caption=f"The paper's claims ({over})"
    )
    for claim, paper, ours in check_claims(lookup(cells)):
        holds = "n/a" if np.isnan(ours) else "yes" if ours >= 0 else "**no**"
        claims.rows.append([claim.text, claim.rule, fmt(paper, 2), fmt(ours, 2), holds])
    target = target_cells(cells)
    n_in, n_all = int(target["within"].sum()), len(target)
    std_ours, std_paper = float(target["std"].mean()), float(target["paper_std"].mean())
    misses = target[~target["within"]]
    miss_text = ", ".join(
        f"T{next(t.number for t in TABLES if t.task == 'agreement' and t.importance == r.importance)} "
        f"{r.method} L{r.layer} ({r.delta:+.2f})"
        for r in misses.itertuples()
    )
    ctx.add(
        Heading("The paper's claims, one by one", 2),
        Paragraph(
            f"Ours = the mean over {over} of each cell's mean (and of its per-sample std). The margin is the "
            "rule's statistic (≥ 0: the claim holds); the paper column applies the same rule to the published cells. "
            f"Rollout and flow cells within ±{TOLERANCE:.2f} of the paper: {n_in} of {n_all}"
            + (f"; outside: {miss_text}" if miss_text else "")
            + f". Mean per-sample std over those cells: ours {std_ours:.2f}, paper {std_paper:.2f} "
            f"({'within' if abs(std_ours - std_paper) <= STD_TOLERANCE else 'outside'} ±{STD_TOLERANCE:.2f}). "
            "Where a cell misses, the sensitivity section shows which switch moves it."
        ),
        Table(claims),
    )


def ledger_section(ctx: Context) -> None:
    """The claims ledger: every claim the paper makes in words, its per-sentence statistic, a
    two-level bootstrap interval over seeds and sentences and the verdict by one rule."""
    frames = sentence_frames(ctx.paths, list(ctx.inputs), int(ctx.config.get("seed", 0)))
    if not frames:
        return
    table = ledger(frames, seed=int(ctx.config.get("seed", 0)))
    if table.empty:
        return
    counts = table["verdict"].value_counts()
    grid = Grid(
        header=[
            "claim",
            "where",
            "statistic (per sentence)",
            "seeds",
            "sentences",
            "estimate",
            "95% interval",
            "verdict",
        ],
        rows=[
            [
                f"{r.claim}: “{r.quote}”",
                r.source,
                r.statistic,
                str(r.n_seeds),
                str(r.n_sentences),
                fmt(r.estimate, 3),
                f"[{fmt(r.ci_low, 3)}, {fmt(r.ci_high, 3)}]",
                r.verdict if r.verdict == "holds" else f"**{r.verdict}**",
            ]
            for r in table.itertuples()
        ],
        caption="The claims ledger",
    )
    ctx.add(
        Heading("The claims ledger: the paper's words, tested", 2),
        Paragraph(
            "Each claim the paper makes in words, the per-sentence statistic that tests it (oriented so that a "
            "value above the null supports it: 0 for a paired difference, 0.5 for Figure 4's two-way choice), "
            "its mean over every seed and sentence, and a 95% interval from a two-level bootstrap (seeds "
            "resampled, then sentences within each seed; a comparison of two methods is paired on the same "
            "sentence). The rule, for every claim: **holds** when the whole interval lies above the null, "
            "**fails** when it lies at or below it, **inconclusive** when it straddles it. "
            f"Counts: {int(counts.get('holds', 0))} hold, {int(counts.get('fails', 0))} fail, "
            f"{int(counts.get('inconclusive', 0))} inconclusive, of {len(table)}."
        ),
        Table(grid),
    )
