"""Header, the inputs found, and every configuration switch beside the authors' choice (commit, cell)."""

from __future__ import annotations

from ..context import Context, get
from ..document import Bullets, Heading, Paragraph, Table
from ..paper import AUTHORS_CHOICES, SOURCE
from ..tables import Grid

# Keys shown beside the authors' choices (every AUTHORS_CHOICES key is shown too).
CONFIG_KEYS = (
    "explain.methods",
    "task.{task}.gradient_class",
    "correlate.n_boot",
    "correlate.ci",
    "seed",
)


def section(ctx: Context) -> None:
    ctx.add(
        Heading(f"Attention flow re-run: report ({ctx.config.get('study', 'attnflow')})"),
        Paragraph(
            f"Tasks: {', '.join(ctx.inputs) or 'none'}; seed {ctx.config.get('seed', 'n/a')}. "
            f"**Paper** numbers are the published figures of {SOURCE}, copied into "
            "`attnflow.report.paper`; **ours** come from this run's stage outputs. "
            "Δ = ours − paper (means). Correlations are Spearman ρ per sample, then mean ± std over samples."
        ),
    )
    notes = [f"{task}: missing `{p}`" for task, got in ctx.inputs.items() for p in got.missing]
    notes += [f"{task}: unreadable {p}" for task, got in ctx.inputs.items() for p in got.problems]
    ctx.add(Heading("Inputs", 2), Bullets(notes) if notes else Paragraph("All inputs were found."))
    grid = Grid(
        header=["switch", "this run", "the authors'", "where in their code", "same"],
        rows=[],
        caption="Every choice that changes the numbers: this run's value beside the authors' "
        "(the source of truth for their choices: commit, file and cell)",
    )
    authors = {c.key: c for c in AUTHORS_CHOICES}
    keys = dict.fromkeys(
        [
            *authors,
            *(p.format(task=t) for p in CONFIG_KEYS for t in (ctx.inputs if "{task}" in p else [None])),
        ]
    )
    for key in keys:
        value = get(ctx.config, key)
        if value is None:
            continue
        choice = authors.get(key)
        same = "" if choice is None else "yes" if str(value) == choice.value else "**no**"
        grid.rows.append([key, str(value), *((choice.value, choice.source) if choice else ("", "")), same])
    for task, got in ctx.inputs.items():
        if got.samples is not None:
            grid.rows.append([f"samples captured ({task})", str(len(got.samples)), "", "", ""])
    ctx.add(Heading("The authors' choices, and this run's", 2))
    ctx.add(Table(grid) if grid.rows else Paragraph("No configuration was passed to the report."))
