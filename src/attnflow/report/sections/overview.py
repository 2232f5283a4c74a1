"""Header, the inputs found, and the configuration switches beside the authors' choices."""

from __future__ import annotations

from ..context import Context, get
from ..document import Bullets, Heading, Paragraph, Table
from ..paper import AUTHORS_SETTINGS, SOURCE
from ..tables import Grid

CONFIG_KEYS = (
    "explain.methods",
    "explain.residual",
    "explain.heads",
    "task.{task}.rows",
    "attribution.blank_token",
    "attribution.mask_blank",
    "attribution.blank_target",
    "attribution.blank_score",
    "task.{task}.gradient_target",
    "task.{task}.gradient_class",
    "attribution.gradient_reduction",
    "correlate.spearman",
    "correlate.undefined",
    "correlate.include_cls.blank_out",
    "correlate.include_cls.input_gradients",
    "correlate.n_boot",
    "correlate.ci",
    "task.{task}.capture.split",
    "task.{task}.capture.n_samples",
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
        header=["switch", "ours", "authors' code (REPLICATION.md)"],
        rows=[],
        caption="The switches that change the numbers",
    )
    keys = dict.fromkeys(
        p.format(task=t) for p in CONFIG_KEYS for t in (ctx.inputs if "{task}" in p else [None])
    )
    for key in keys:
        value = get(ctx.config, key)
        if value is not None:
            grid.rows.append([key, str(value), AUTHORS_SETTINGS.get(key, "")])
    for task, got in ctx.inputs.items():
        if got.samples is not None:
            grid.rows.append([f"samples captured ({task})", str(len(got.samples)), ""])
    ctx.add(Heading("Configuration", 2))
    ctx.add(Table(grid) if grid.rows else Paragraph("No configuration was passed to the report."))
