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
        extra += _attractors(task, m)
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


def _attractors(task: str, m: Mapping) -> list[Block]:
    """Accuracy per attractor count, on the eval split (when its counts are known) and on each
    evaluation-only set (Linzen et al.'s figure); the teacher's accuracy when there is one."""
    blocks: list[Block] = []
    sets = {m.get("eval_split"): m, **m.get("extra_eval", {})}
    for split, entry in sets.items():
        by_attr = {k: v for k, v in (entry.get("accuracy_by_attractors") or {}).items() if k != "unknown"}
        if not by_attr:
            continue
        n_by = entry.get("n_by_attractors") or {}
        rows = [[str(k), fmt(n_by.get(k)), fmt(by_attr[k])] for k in sorted(by_attr, key=int)]
        caption = f"{task}: accuracy by number of attractors ({split})"
        blocks.append(Table(Grid(header=["attractors", "n", "accuracy"], rows=rows, caption=caption)))
    if teacher := m.get("teacher"):
        blocks.append(
            Paragraph(
                f"{task}: the LSTM teacher (online distillation) reaches {fmt(teacher.get('accuracy'))} on "
                f"{m.get('eval_split')} (validation {fmt(teacher.get('val_accuracy'))}); the student, which the "
                f"study explains, {fmt(m.get('accuracy'))}."
            )
        )
    return blocks
