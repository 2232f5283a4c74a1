"""Model accuracy: eval split, per attractor count, captured samples; the data splits."""

from __future__ import annotations

from collections.abc import Mapping

from attnflow.metrics.accuracy import labelled_accuracy

from ..context import Context
from ..document import Block, Heading, Paragraph, Table
from ..paper import PAPER_ACCURACY
from ..tables import Grid, fmt

HEADER = ["task", "eval split", "accuracy", "paper", "n", "val accuracy", "epochs", "train wall (s)",
          "train samples/s", "captured samples accuracy"]  # fmt: skip


def section(ctx: Context) -> None:
    ctx.add(Heading("Model accuracy", 2))
    grid, extra = Grid(header=HEADER, rows=[]), []
    for task, got in ctx.inputs.items():
        m, s = got.train_metrics or {}, got.samples
        timed = {**m, **(got.train_timing or {})}  # older runs kept the times in train_metrics.json
        captured = None
        if s is not None and (s["label"] >= 0).any():
            captured = f"{labelled_accuracy(s['label'], s['pred']):.3f} (n={int((s['label'] >= 0).sum())})"
        if not m and captured is None:
            continue
        keys = ("eval_split", "accuracy")
        grid.rows.append(
            [task, *(fmt(m.get(k)) for k in keys), fmt(PAPER_ACCURACY.get(task), 2), fmt(m.get("n_eval")),
             fmt(m.get("val_accuracy")), fmt(m.get("epochs")), fmt(timed.get("train_wall_s"), 1),
             fmt(timed.get("train_samples_per_s"), 1), captured or "n/a"]
        )  # fmt: skip
        extra += _attractors(task, m, got.data_summary or {})
    ctx.add(*([Table(grid), *extra] if grid.rows else [Paragraph("No training metrics were found.")]))
    rows = []
    for task, got in ctx.inputs.items():
        for split, entry in (got.data_summary or {}).items():
            if isinstance(entry, Mapping) and "n" in entry:
                counts = ", ".join(f"{lab} {entry[lab]}" for lab in ctx.labels(task) if lab in entry)
                rows.append([task, split, str(entry["n"]), counts or "unlabelled"])
    if rows:
        ctx.add(
            Table(
                Grid(
                    header=["task", "split", "n", "classes"],
                    rows=rows,
                    caption="Data (from data_summary.json)",
                )
            )
        )


# Two verb numbers to choose from (singular, plural): a coin flip's accuracy.
CHANCE = 0.5


def attractor_reading(task: str, split: str, by_attr: Mapping, n_by: Mapping, classes: Mapping) -> str:
    """One paragraph beside the attractor table: its baseline (chance; the majority class of the set
    when its class counts are known) and what an accuracy below chance means there.

    A count is below chance when its accuracy is more than two standard errors of a coin flip,
    2 sqrt(0.25 / n), under CHANCE.

    >>> print(attractor_reading("agreement", "attractors", {"1": 0.491, "5": 0.057}, {"1": 52599, "5": 159}, {}))
    agreement (attractors): chance is 0.500 (singular or plural). Accuracy falls from 0.491 with 1 attractor(s) (-0.009 against chance) to 0.057 with 5 (-0.443). Below chance is not guessing but a systematic error: the model agrees the verb with the attractors (the intervening nouns of the other number) instead of its subject, in 94% of the items with 5.
    """
    ks = sorted(by_attr, key=int)
    first, last = ks[0], ks[-1]
    acc = {k: float(by_attr[k]) for k in ks}
    parts = [f"{task} ({split}): chance is {CHANCE:.3f} (singular or plural)"]
    # the class counts of data_summary.json (integers; "n" is their total, *_fraction are floats)
    counts = {c: v for c, v in classes.items() if c != "n" and isinstance(v, int) and not isinstance(v, bool)}
    if counts and sum(counts.values()) > 0:
        top = max(counts, key=counts.get)
        parts[0] += (
            f"; always answering {top} scores {counts[top] / sum(counts.values()):.3f} on the whole set"
        )
    parts.append(
        f"Accuracy falls from {acc[first]:.3f} with {first} attractor(s) ({acc[first] - CHANCE:+.3f} against "
        f"chance) to {acc[last]:.3f} with {last} ({acc[last] - CHANCE:+.3f})"
        if len(ks) > 1
        else f"Accuracy is {acc[first]:.3f} with {first} attractor(s) ({acc[first] - CHANCE:+.3f} against chance)"
    )

    def below(k: str) -> bool:
        n = float(n_by.get(k) or 0)
        return n > 0 and acc[k] < CHANCE - 2 * (0.25 / n) ** 0.5

    worst = [k for k in ks if below(k)]
    if worst:
        k = worst[-1]
        parts.append(
            "Below chance is not guessing but a systematic error: the model agrees the verb with the "
            f"attractors (the intervening nouns of the other number) instead of its subject, in "
            f"{1 - acc[k]:.0%} of the items with {k}"
        )
    else:
        parts.append("No count is below chance: the attractors cost accuracy without reversing the answer")
    return ". ".join(parts) + "."


def _attractors(task: str, m: Mapping, summary: Mapping) -> list[Block]:
    """Accuracy per attractor count, on the eval split (when its counts are known) and on each
    evaluation-only set (Linzen et al.'s figure), each with its baseline and reading
    (`attractor_reading`); the teacher's accuracy when there is one."""
    blocks: list[Block] = []
    sets = {m.get("eval_split"): m, **m.get("extra_eval", {})}
    for split, entry in sets.items():
        by_attr = {k: v for k, v in (entry.get("accuracy_by_attractors") or {}).items() if k != "unknown"}
        if not by_attr:
            continue
        n_by = entry.get("n_by_attractors") or {}
        rows = [[str(k), fmt(n_by.get(k)), fmt(by_attr[k])] for k in sorted(by_attr, key=int)]
        caption = f"{task}: accuracy by number of attractors ({split}; chance {CHANCE:.3f})"
        blocks.append(Table(Grid(header=["attractors", "n", "accuracy"], rows=rows, caption=caption)))
        classes = summary.get(split) if isinstance(summary.get(split), Mapping) else {}
        blocks.append(Paragraph(attractor_reading(task, str(split), by_attr, n_by, classes)))
    if teacher := m.get("teacher"):
        blocks.append(
            Paragraph(
                f"{task}: the LSTM teacher (online distillation) reaches {fmt(teacher.get('accuracy'))} on "
                f"{m.get('eval_split')} (validation {fmt(teacher.get('val_accuracy'))}); the student, which the "
                f"study explains, {fmt(m.get('accuracy'))}."
            )
        )
    return blocks
