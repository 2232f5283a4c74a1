"""A generated answer attributed to its prompt, side by side with FlashTrace: per task (and prompt
length) every tool's RISE, MAS, recovery@10 %, seconds and peak memory per item with bootstrap
intervals, its paired difference to the reference on the same items, and the issue's verdicts."""

from __future__ import annotations

import json
import math

import pandas as pd

from attnflow.io import read_parquet

from ..context import Context
from ..document import Bullets, Heading, Paragraph, Table
from ..tables import Grid

COLUMNS = (("rise", "RISE ↓", 1.0, 3), ("mas", "MAS ↓", 1.0, 3), ("recovery@10%", "recovery@10 % ↑", 1.0, 3),
           ("seconds", "s / item", 1.0, 2), ("peak_bytes", "peak MB", 1 / 2**20, 0))  # fmt: skip
PAIRED = (("rise", "ΔRISE", 3), ("mas", "ΔMAS", 3), ("seconds", "Δs", 2))


def section(ctx: Context) -> None:
    folder = ctx.paths.answer
    if not (folder / "summary.parquet").is_file():
        return
    summary = read_parquet(folder / "summary.parquet")
    meta = json.loads((folder / "summary.json").read_text())["meta"]
    ref = meta["reference"]
    ctx.add(
        Heading("Answer attribution: generated spans side by side with FlashTrace", 2),
        Paragraph(
            f"{meta['model']} on {meta['machine']}, {meta['threads']} threads, load {meta['load'][0]:.2f} at the end; torch "
            f"{meta['torch']}, FlashTrace {meta['flashtrace'] or 'not installed'}. Items with known source tokens "
            "(arithmetic and two-fact questions from templates; a code retrieved from SST-2 sentences at a random "
            "depth), asked in the model's chat template as FlashTrace asks them; only the items the model answers "
            "right are scored. Each tool attributes the answer's tokens to the user's tokens; RISE and MAS are the "
            f"areas of a guided deletion of them (lower is better; {meta['deletion']}), recovery@10 % the share of "
            f"gold source tokens among the top 10 %. Δ: the paired difference to {ref} on the same items. "
            "Means with 95 % bootstrap intervals over items."
        ),
    )  # fmt: skip
    verdicts = []
    for (task, length), group in summary.groupby(["task", "length"], dropna=False, sort=False):
        head = task + ("" if _missing(length) else f", {int(length):,} tokens")
        first = group.iloc[0]
        ctx.add(
            Table(
                _grid(
                    group, ref, f"{head}: {first['kept']} of {first['built']} items answered right and scored"
                )
            )
        )
        verdicts.append(_verdict(head, group, ref))
    ctx.add(Paragraph(f"Targets (the best attnflow method against {ref}):"), Bullets(verdicts))


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _ci(row: pd.Series | None, scale: float = 1.0, digits: int = 3, signed: bool = False) -> str:
    if row is None or _missing(row["mean"]):
        return ""
    form = f"{{:{'+' if signed else ''}.{digits}f}}"
    m, lo, hi = (form.format(row[k] * scale) for k in ("mean", "low", "high"))
    return f"{m} [{lo}, {hi}]"


def _cell(group: pd.DataFrame, tool: str, score: str, paired: bool) -> pd.Series | None:
    hit = group[(group["tool"] == tool) & (group["score"] == score) & (group["paired"] == paired)]
    return None if hit.empty else hit.iloc[0]


def _grid(group: pd.DataFrame, ref: str, caption: str) -> Grid:
    rows = []
    for tool in dict.fromkeys(group["tool"]):
        oom = int(group[group["tool"] == tool]["out_of_memory"].max())
        cells = [_ci(_cell(group, tool, s, False), scale, digits) for s, _, scale, digits in COLUMNS]
        cells += [_ci(_cell(group, tool, s, True), 1.0, digits, signed=True) for s, _, digits in PAIRED]
        rows.append([tool + (f" ({oom} out of memory)" if oom else ""), *cells])
    header = [
        "tool",
        *(label for _, label, _, _ in COLUMNS),
        *(f"{label} vs {ref}" for _, label, _ in PAIRED),
    ]
    return Grid(header=header, rows=rows, caption=caption)


def _verdict(head: str, group: pd.DataFrame, ref: str) -> str:
    """The best attnflow tool (the fewest of RISE and MAS worse than the reference beyond the
    interval of their paired difference, then the lowest RISE) and whether its RISE, MAS,
    recovery@10 % (at or above the reference's mean, or within its own interval of it) and time
    (its paired difference) meet the targets."""
    tools = [t for t in dict.fromkeys(group["tool"]) if t != ref]
    means = {
        t: c["mean"]
        for t in tools
        if (c := _cell(group, t, "rise", False)) is not None and not _missing(c["mean"])
    }
    if not means or _cell(group, ref, "rise", False) is None:
        return f"{head}: not compared (no scored item of both tools)"

    def misses(tool: str) -> int:  # RISE and MAS paired differences above 0 beyond their intervals
        cells = (_cell(group, tool, score, True) for score in ("rise", "mas"))
        return sum(1 for d in cells if d is not None and not _missing(d["mean"]) and d["low"] > 0)

    best = min(means, key=lambda t: (misses(t), means[t]))  # the fewest misses, then the lowest RISE
    parts = []
    for score, label in (("rise", "RISE"), ("mas", "MAS")):
        d = _cell(group, best, score, True)
        if d is None or _missing(d["mean"]):
            parts.append(f"{label} not paired")
            continue
        word = "better" if d["high"] < 0 else "within the interval" if d["low"] <= 0 else "worse: missed"
        parts.append(f"{label} {word} (Δ {_ci(d, signed=True)})")
    mine, theirs = _cell(group, best, "recovery@10%", False), _cell(group, ref, "recovery@10%", False)
    if mine is not None and theirs is not None and not _missing(mine["mean"]):
        word = ("met" if mine["mean"] >= theirs["mean"] else "within the interval" if mine["high"] >= theirs["mean"]
                else "missed")  # fmt: skip
        parts.append(f"recovery@10 % {mine['mean']:.2f} vs {theirs['mean']:.2f}: {word}")
    d = _cell(group, best, "seconds", True)
    if d is not None and not _missing(d["mean"]):
        word = (
            "faster"
            if d["high"] < 0
            else "as fast (within the interval)"
            if d["low"] <= 0
            else "slower: missed"
        )
        parts.append(f"time {word} (Δ {_ci(d, digits=2, signed=True)} s)")
    return f"{head}: best attnflow method {best}; " + "; ".join(parts)
