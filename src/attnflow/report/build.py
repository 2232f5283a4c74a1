"""Build the study report: ``report.md``, ``report.html``, ``figures/*.png``, ``metrics.json``, ``comparison.csv``.

One pass over the stage outputs of each task (see :mod:`attnflow.report.inputs`); a missing input
leaves its section saying so. Markdown and HTML are rendered from the same blocks. All writes are
atomic. The paper's numbers come from :mod:`attnflow.report.paper` and are labelled as such.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.io import write_json, write_text

from . import figures
from .aggregate import finite
from .document import Block, Bullets, Heading, Image, Paragraph, Table, render_html, render_markdown
from .findings import table_findings
from .inputs import MAP_METHODS, TaskInputs, find_examples, load_task, locate_examples, pick_samples
from .paper import AUTHORS_SETTINGS, PAPER_ACCURACY, SOURCE, TABLES, PaperTable, paper_table
from .tables import (
    EXPLAINER_LABELS,
    IMPORTANCE_LABELS,
    MARK_FAR,
    MARK_MATCH,
    Cell,
    Grid,
    comparison_cells,
    comparison_grid,
    fmt_delta,
    fmt_mean_std,
)

__all__ = ["SWEEP_FILE", "Report", "build_report", "metric_cells", "metrics_payload"]

SWEEP_FILE = Path("sweep") / "aggregate.json"  # relative to the reports folder
FIGURES = "figures"
LABELS = {"agreement": ("singular", "plural"), "sst2": ("negative", "positive")}
CONFIG_KEYS = (
    "explain.residual",
    "explain.heads",
    "explain.rows.{task}",
    "attribution.blank_token",
    "attribution.mask_blank",
    "attribution.blank_target",
    "attribution.blank_score",
    "attribution.gradient_target.{task}",
    "attribution.gradient_class.{task}",
    "attribution.gradient_reduction",
    "correlate.spearman",
    "correlate.undefined",
    "correlate.include_cls.blank_out",
    "correlate.include_cls.input_gradients",
    "correlate.n_boot",
    "correlate.ci",
    "capture.{task}.split",
    "capture.{task}.n_samples",
    "seed",
)


@dataclass
class Report:
    """What :func:`build_report` made: the texts, the metrics, and every file it wrote."""

    markdown: str
    html: str
    metrics: dict[str, Any]  # the content of metrics.json
    cells: dict[str, float]  # MLflow metric name -> value
    files: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


def _get(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if math.isfinite(x) else "n/a"
    return str(x)


def _layer_key(key: str) -> int:
    return int(str(key).lstrip("L"))


def metrics_payload(inputs: Mapping[str, TaskInputs]) -> dict[str, Any]:
    """``{task: {"accuracy": a, "corr": {importance: {explainer: {"L1": mean, ...}}}}}``; non-finite left out."""
    out: dict[str, Any] = {}
    for task, got in inputs.items():
        entry: dict[str, Any] = {}
        acc = (got.train_metrics or {}).get("accuracy")
        if finite(acc):
            entry["accuracy"] = float(acc)
        corr: dict[str, Any] = {}
        for importance, explainers in (got.correlations or {}).items():
            for explainer, layers in explainers.items():
                for layer in sorted(layers, key=_layer_key):
                    mean = layers[layer].get("mean") if isinstance(layers[layer], Mapping) else None
                    if finite(mean):
                        corr.setdefault(importance, {}).setdefault(explainer, {})[layer] = float(mean)
        if corr:
            entry["corr"] = corr
        if entry:
            out[task] = entry
    return out


def metric_cells(inputs: Mapping[str, TaskInputs]) -> dict[str, float]:
    """MLflow metrics, one per cell: ``<task>/corr/<importance>/<explainer>/L<k>`` (our mean),
    ``<task>/delta/<importance>/<explainer>/L<k>`` (ours − paper, where the paper has the cell),
    ``<task>/accuracy``."""
    cells: dict[str, float] = {}
    for task, entry in metrics_payload(inputs).items():
        if "accuracy" in entry:
            cells[f"{task}/accuracy"] = entry["accuracy"]
        for importance, explainers in entry.get("corr", {}).items():
            table = paper_table(task, importance)
            for explainer, layers in explainers.items():
                for layer, mean in layers.items():
                    cells[f"{task}/corr/{importance}/{explainer}/{layer}"] = mean
                    paper = table.cells.get(explainer, {}).get(_layer_key(layer)) if table else None
                    if paper is not None:
                        cells[f"{task}/delta/{importance}/{explainer}/{layer}"] = mean - paper[0]
    return cells


class _Builder:
    def __init__(self, reports: Path, inputs: dict[str, TaskInputs], config: Mapping[str, Any]):
        self.reports = reports
        self.inputs = inputs
        self.config = config
        self.blocks: list[Block] = []
        self.figures: list[Path] = []
        self.comparisons: list[tuple[PaperTable, list[Cell]]] = []

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)

    def figure(self, fig: Any, name: str, alt: str, caption: str = "") -> None:
        path = figures.save_figure(fig, self.reports / FIGURES / name)
        self.figures.append(path)
        self.add(Image(f"{FIGURES}/{name}", alt, caption))

    # -- sections ------------------------------------------------------------------------------

    def header(self) -> None:
        study = self.config.get("study", "attnflow")
        self.add(
            Heading(f"Attention flow re-run: report ({study})"),
            Paragraph(
                f"Tasks: {', '.join(self.inputs) or 'none'}; seed {self.config.get('seed', 'n/a')}. "
                f"**Paper** numbers are the published figures of {SOURCE}, copied into "
                "`attnflow.report.paper`; **ours** come from this run's stage outputs. "
                "Δ = ours − paper (means). Correlations are Spearman ρ per sample, then mean ± std over samples."
            ),
        )
        notes = []
        for task, got in self.inputs.items():
            notes += [f"{task}: missing `{p}`" for p in got.missing]
            notes += [f"{task}: unreadable {p}" for p in got.problems]
        self.add(Heading("Inputs", 2), Bullets(notes) if notes else Paragraph("All inputs were found."))

    def configuration(self) -> None:
        grid = Grid(
            header=["switch", "ours", "authors' code (REPLICATION.md)"],
            rows=[],
            caption="The switches that change the numbers",
        )
        seen = set()
        for pattern in CONFIG_KEYS:
            for task in self.inputs if "{task}" in pattern else [None]:
                key = pattern.format(task=task)
                value = _get(self.config, key)
                if value is None or key in seen:
                    continue
                seen.add(key)
                grid.rows.append([key, str(value), AUTHORS_SETTINGS.get(key, "")])
        for task, got in self.inputs.items():
            if got.samples is not None:
                grid.rows.append([f"samples captured ({task})", str(len(got.samples)), ""])
        self.add(Heading("Configuration", 2))
        self.add(Table(grid) if grid.rows else Paragraph("No configuration was passed to the report."))

    def accuracy(self) -> None:
        self.add(Heading("Model accuracy", 2))
        grid = Grid(
            header=[
                "task",
                "eval split",
                "accuracy",
                "paper",
                "n",
                "val accuracy",
                "epochs",
                "train wall (s)",
                "train samples/s",
                "captured samples accuracy",
            ],
            rows=[],
        )
        attractor_blocks: list[Block] = []
        for task, got in self.inputs.items():
            m = got.train_metrics or {}
            captured = None
            s = got.samples
            if s is not None and {"label", "pred"} <= set(s.columns):
                labelled = s["label"] >= 0
                if labelled.any():
                    captured = (
                        f"{float((s['pred'] == s['label'])[labelled].mean()):.3f} (n={int(labelled.sum())})"
                    )
            if not m and captured is None:
                continue
            grid.rows.append(
                [
                    task,
                    _fmt(m.get("eval_split")),
                    _fmt(m.get("accuracy")),
                    _fmt(PAPER_ACCURACY.get(task), 2),
                    _fmt(m.get("n_eval")),
                    _fmt(m.get("val_accuracy")),
                    _fmt(m.get("epochs")),
                    _fmt(m.get("train_wall_s"), 1),
                    _fmt(m.get("train_samples_per_s"), 1),
                    captured or "n/a",
                ]
            )
            by_attr = m.get("accuracy_by_attractors") or {}
            if by_attr:
                n_by = m.get("n_by_attractors") or {}
                keys = sorted(
                    by_attr, key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0)
                )
                agrid = Grid(
                    header=["attractors", "n", "accuracy"],
                    rows=[[str(k), _fmt(n_by.get(k)), _fmt(by_attr[k])] for k in keys],
                    caption=f"{task}: accuracy by number of attractors ({_fmt(m.get('eval_split'))})",
                )
                attractor_blocks.append(Table(agrid))
        if grid.rows:
            self.add(Table(grid), *attractor_blocks)
        else:
            self.add(Paragraph("No training metrics were found."))
        summary_rows = []
        for task, got in self.inputs.items():
            for split, entry in (got.data_summary or {}).items():
                if isinstance(entry, Mapping) and "n" in entry:
                    labels = LABELS.get(task, ("0", "1"))
                    counts = ", ".join(f"{lab} {entry[lab]}" for lab in labels if lab in entry)
                    summary_rows.append([task, split, str(entry["n"]), counts or "unlabelled"])
        if summary_rows:
            self.add(
                Table(
                    Grid(
                        header=["task", "split", "n", "classes"],
                        rows=summary_rows,
                        caption="Data (from data_summary.json)",
                    )
                )
            )

    def tables(self) -> None:
        self.add(
            Heading("Tables 1-3: ours beside the paper", 2),
            Paragraph(
                "Three rows per method: ours (mean ± std over samples), the paper's, and Δ. "
                f"Marks on Δ: {MARK_MATCH} the paper's mean lies inside our confidence interval of "
                f"the mean; {MARK_FAR} |Δ| > 2 × the paper's std."
            ),
        )
        for paper in TABLES:
            got = self.inputs.get(paper.task)
            ours = (got.correlations or {}).get(paper.importance) if got else None
            title = (
                f"Table {paper.number}: {paper.caption}. "
                f"Ours: task {paper.task} vs {IMPORTANCE_LABELS[paper.importance]}"
            )
            if ours is None:
                why = "not in this run's tasks" if got is None else "no correlations for it"
                self.add(Heading(f"Table {paper.number}", 3), Paragraph(f"{title}: {why}."))
                continue
            cells = comparison_cells(paper, ours)
            self.comparisons.append((paper, cells))
            n = sorted({c.n for c in cells if c.n is not None})
            grid = comparison_grid(paper, cells, caption=f"{title} (n defined per cell: {_span(n)})")
            self.add(Heading(f"Table {paper.number}", 3), Table(grid))
        extra = []
        for task, got in self.inputs.items():
            for importance, block in (got.correlations or {}).items():
                paper = paper_table(task, importance)
                layers = sorted({k for layers in block.values() for k in layers}, key=_layer_key)
                if paper is not None and {_layer_key(k) for k in layers} <= set(paper.layers):
                    continue
                grid = Grid(
                    header=[f"{task} vs {IMPORTANCE_LABELS.get(importance, importance)}", *layers],
                    rows=[],
                    caption=f"{task}, {importance}: all layers (ours; "
                    + ("the paper prints fewer layers)" if paper else "no published counterpart)"),
                )
                for explainer, by_layer in block.items():
                    grid.rows.append(
                        [EXPLAINER_LABELS.get(explainer, explainer)]
                        + [
                            fmt_mean_std(by_layer.get(k, {}).get("mean"), by_layer.get(k, {}).get("std"))
                            for k in layers
                        ]
                    )
                extra.append(Table(grid))
        if extra:
            self.add(Heading("Other cells", 3), *extra)

    def sensitivity(self) -> None:
        """Our correlations re-scored under each variant of the correlation's own hidden choices."""
        blocks: list[Block] = []
        for task, got in self.inputs.items():
            for importance in sorted({imp for v in (got.sensitivity or {}).values() for imp in v}):
                variants = {
                    name: v[importance] for name, v in (got.sensitivity or {}).items() if importance in v
                }
                layers = sorted(
                    {k for v in variants.values() for by in v.values() for k in by}, key=_layer_key
                )
                grid = Grid(
                    header=["variant", "method", *layers],
                    rows=[],
                    caption=f"{task} vs {IMPORTANCE_LABELS.get(importance, importance)}: mean ρ per layer",
                )
                for name, block in variants.items():
                    for explainer, by_layer in block.items():
                        grid.rows.append(
                            [
                                name,
                                EXPLAINER_LABELS.get(explainer, explainer),
                                *(_fmt(by_layer.get(k, {}).get("mean"), 2) for k in layers),
                            ]
                        )
                blocks.append(Table(grid))
        if blocks:
            self.add(
                Heading("Sensitivity to the correlation's hidden choices", 2),
                Paragraph(
                    "The same maps and importance scores, correlated under each variant: the Spearman "
                    "formula (average ranks, or the authors' dense ranks with the no-ties formula) and "
                    "whether CLS is among the ranked positions (authors: out for blank-out, in for "
                    "gradients). No bootstrap here; the tables above use the configured variant."
                ),
                *blocks,
            )

    def curves(self) -> None:
        self.add(
            Heading("Per-layer correlation curves", 2),
            Paragraph("Ours solid with the confidence band of the mean; the paper dashed."),
        )
        drawn = False
        for task, got in self.inputs.items():
            for importance, block in (got.correlations or {}).items():
                paper = paper_table(task, importance)
                ours = {e: block[e] for e in MAP_METHODS if e in block} or block
                fig = figures.plot_curves(
                    ours,
                    paper.cells if paper else None,
                    title=f"{task}: vs {IMPORTANCE_LABELS.get(importance, importance)}",
                )
                self.figure(fig, f"curves_{task}_{importance}.png", f"{task} {importance} curves")
                drawn = True
        if not drawn:
            self.add(Paragraph("No correlations were found."))

    def heads(self) -> None:
        self.add(Heading("Per-head correlations", 2))
        drawn = []
        for task, got in self.inputs.items():
            fig = figures.plot_head_correlations(
                got.per_head or {}, title=f"{task}: mean correlation per head"
            )
            if fig is not None:
                drawn.append((task, fig))
        if not drawn:
            self.add(Paragraph("No per-head correlations were found (`correlations_per_head.json`)."))
        else:
            self.add(Paragraph("Each head k at each layer, as in the paper's appendix A.1 (heads 0-based)."))
        for task, fig in drawn:
            self.figure(fig, f"heads_{task}.png", f"{task} per-head correlations")

    def maps(self, examples: Sequence[str], n_examples: int, prepared: Path | None = None) -> None:
        self.add(
            Heading("Attention maps (Figures 2/3 style)", 2),
            Paragraph(
                "Each panel: the explanation row (CLS for agreement, per `explain.rows`) at every "
                "layer (y, layer 1 at the bottom) over the input tokens (x)."
            ),
        )
        if examples:
            self.add(Heading("The paper's examples", 3))
            searched = [t for t, g in self.inputs.items() if g.samples is not None and g.maps is not None]
            with_data = [t for t in self.inputs if prepared and any((prepared / t).glob("*.parquet"))]
            located = {t: locate_examples(prepared / t, examples) for t in with_data}  # type: ignore[operator]
            for text in examples:
                found = False
                for task in searched:
                    got = self.inputs[task]
                    row = find_examples(got.samples, [text])[text]  # type: ignore[arg-type]
                    if row is not None:
                        found = True
                        self._draw(task, got, row, prefix="example")
                if not found:
                    where = ", ".join(searched) if searched else "none (no samples with maps)"
                    splits = [f"{t} `{s}`" for t, by in located.items() for s in by.get(text, [])]
                    elsewhere = (
                        f" It is in the prepared split(s) {', '.join(splits)}; only captured samples have maps."
                        if splits
                        else f" Nor is it in the prepared data of {', '.join(located)}."
                        if located
                        else ""
                    )
                    self.add(
                        Paragraph(
                            f"`{text}`: not found in the captured samples (searched: {where}).{elsewhere}"
                        )
                    )
        self.add(Heading("Fixed samples", 3))
        drew = False
        for task, got in self.inputs.items():
            if got.samples is None or got.maps is None:
                continue
            for row in pick_samples(got.samples, n_examples):
                self._draw(task, got, row, prefix="sample")
                drew = True
        if not drew:
            self.add(Paragraph("No captured samples with maps were found."))

    def _draw(self, task: str, got: TaskInputs, row: int, *, prefix: str) -> None:
        s = got.samples.iloc[row]  # type: ignore[union-attr]
        tokens = [str(t) for t in s["tokens"]] if "tokens" in s else []
        maps = {m: got.maps[m][row] for m in MAP_METHODS if m in got.maps}  # type: ignore[index]
        sid = int(s["sample_id"]) if "sample_id" in s else row
        desc = _describe(task, s)
        try:
            fig = figures.plot_maps(maps, tokens, title=f"{task} #{sid}: {desc}")
        except ValueError as exc:
            self.add(Paragraph(f"{task} sample {sid}: not drawn ({exc})."))
            return
        self.figure(
            fig,
            f"maps_{task}_{prefix}_{sid}.png",
            f"{task} sample {sid}",
            caption=f"{task} sample {sid}: `{_clip(str(s.get('text', '')))}`, {desc}",
        )

    def sweep(self) -> None:
        path = self.reports / SWEEP_FILE
        if not path.is_file():
            return
        self.add(Heading("Seeds", 2))
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.add(Paragraph(f"`{path.as_posix()}` could not be read: {exc}."))
            return
        by_task = payload.get("tasks", payload)
        seeds = payload.get("seeds")
        self.add(
            Paragraph(
                f"Per cell over seeds {seeds if seeds else '(not listed)'}: mean ± std of the per-seed means "
                "(sample std over seeds), [min, max], n seeds; the paper's cell and Δ of the seed mean."
            )
        )
        for paper in TABLES:
            agg = (by_task.get(paper.task) or {}).get(paper.importance)
            if not agg:
                continue
            grid = Grid(
                header=[f"Table {paper.number} over seeds", *(f"L{k}" for k in paper.layers)],
                rows=[],
                caption=f"Table {paper.number} ({paper.task} vs "
                f"{IMPORTANCE_LABELS[paper.importance]}), aggregated over seeds",
            )
            for explainer, by_layer in paper.cells.items():
                label = EXPLAINER_LABELS.get(explainer, explainer)
                ours = [agg.get(explainer, {}).get(f"L{k}", {}) for k in paper.layers]
                grid.rows.append(
                    [f"{label} (seeds)"]
                    + [
                        f"{fmt_mean_std(c.get('mean'), c.get('std'))} [{_fmt(c.get('min'), 2)}, "
                        f"{_fmt(c.get('max'), 2)}] n={c.get('n_seeds', 0)}"
                        if c
                        else "n/a"
                        for c in ours
                    ]
                )
                grid.rows.append([f"{label} (paper)"] + [fmt_mean_std(*by_layer[k]) for k in paper.layers])
                grid.rows.append(
                    [f"{label} Δ"]
                    + [
                        fmt_delta(c["mean"] - by_layer[k][0]) if finite(c.get("mean")) else "n/a"
                        for c, k in zip(ours, paper.layers, strict=True)
                    ]
                )
            self.add(Table(grid))

    def findings(self) -> None:
        self.add(
            Heading("Where we match and where we differ", 2),
            Paragraph(
                "Computed from the numbers above; no other claim is made. "
                "The CI is our bootstrap interval of the mean (sampling error only); "
                "the paper's ± is its spread over samples, not an error of its mean."
            ),
        )
        items = []
        for task, got in self.inputs.items():
            acc, paper_acc = (got.train_metrics or {}).get("accuracy"), PAPER_ACCURACY.get(task)
            if finite(acc) and paper_acc is not None:
                items.append(
                    f"{task} accuracy: ours {acc:.3f} vs paper {paper_acc:.2f} "
                    f"(Δ {fmt_delta(acc - paper_acc)})."
                )
        for paper, cells in self.comparisons:
            sentences = table_findings(paper, cells)
            if sentences:
                items.append(
                    f"**Table {paper.number}** ({paper.task} vs {IMPORTANCE_LABELS[paper.importance]}): "
                    + " ".join(sentences)
                )
        split = _get(self.config, "capture.sst2.split")
        if "sst2" in self.inputs and self.inputs["sst2"].correlations and split:
            items.append(
                f"Table 3 setting: ours scores the SST-2 `{split}` split; the authors' script scored "
                "GLUE test sentences, whose labels are hidden (REPLICATION.md)."
            )
        self.add(Bullets(items) if items else Paragraph("Nothing to compare: no correlations were found."))


def _span(values: Sequence[int]) -> str:
    if not values:
        return "n/a"
    return str(values[0]) if values[0] == values[-1] else f"{values[0]}-{values[-1]}"


def _clip(text: str, n: int = 120) -> str:
    text = text.replace("`", "'")
    return text if len(text) <= n else text[: n - 1] + "…"


def _describe(task: str, s: Any) -> str:
    names = LABELS.get(task, ())
    parts = []

    def name(v: Any) -> str:
        v = int(v)
        return names[v] if 0 <= v < len(names) else str(v)

    if "label" in s and int(s["label"]) >= 0:
        parts.append(f"gold {name(s['label'])}")
    if "pred" in s:
        probs = np.asarray(s["probs"], dtype=float) if "probs" in s and s["probs"] is not None else None
        p = f" (p={probs[int(s['pred'])]:.2f})" if probs is not None and len(probs) > int(s["pred"]) else ""
        parts.append(f"predicted {name(s['pred'])}{p}")
        if "label" in s and int(s["label"]) >= 0:
            parts.append("correct" if int(s["pred"]) == int(s["label"]) else "wrong")
    if "n_attractors" in s and int(s["n_attractors"]) >= 0:
        parts.append(f"{int(s['n_attractors'])} attractor(s)")
    return ", ".join(parts) or "no label"


def _comparison_csv(comparisons: Sequence[tuple[PaperTable, list[Cell]]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "table",
            "task",
            "importance",
            "explainer",
            "layer",
            "mean",
            "std",
            "ci_low",
            "ci_high",
            "n",
            "n_undefined",
            "paper_mean",
            "paper_std",
            "delta",
            "paper_in_ci",
            "far",
        ]
    )
    for paper, cells in comparisons:
        for c in cells:
            w.writerow(
                [
                    paper.number,
                    paper.task,
                    paper.importance,
                    c.explainer,
                    c.layer,
                    *(
                        "" if v is None else v
                        for v in (
                            c.mean,
                            c.std,
                            c.ci_low,
                            c.ci_high,
                            c.n,
                            c.n_undefined,
                            c.paper_mean,
                            c.paper_std,
                            c.delta,
                            c.paper_in_ci,
                            c.far,
                        )
                    ),
                ]
            )
    return buf.getvalue()


def build_report(
    *,
    tasks: Sequence[str],
    reports: str | Path,
    outputs: str | Path,
    config: Mapping[str, Any] | None = None,
    examples: Sequence[str] = (),
    n_examples: int = 3,
    prepared: str | Path | None = None,
) -> Report:
    """Read every task's stage outputs, write the report files under ``reports``, return what was made.

    Writes ``report.md``, ``report.html``, ``metrics.json``, ``comparison.csv`` (one row per cell of
    Tables 1-3) and ``figures/*.png`` (PNGs of earlier runs that this run did not draw are removed).
    ``config`` is the resolved study config as plain dicts, used only for the configuration summary;
    ``examples`` are texts to look for in the captured samples (the paper's example prefixes); when
    one is not there and ``prepared`` (the folder of ``<task>/<split>.parquet``) is given, the report
    says which prepared split holds it.
    """
    reports, outputs = Path(reports), Path(outputs)
    inputs = {task: load_task(task, reports, outputs) for task in tasks}
    b = _Builder(reports, inputs, dict(config or {}))
    b.header()
    b.configuration()
    b.accuracy()
    b.tables()
    b.sensitivity()
    b.curves()
    b.heads()
    b.maps(examples, n_examples, Path(prepared) if prepared is not None else None)
    b.sweep()
    b.findings()

    fig_dir = reports / FIGURES
    keep = {p.resolve() for p in b.figures}
    for stale in fig_dir.glob("*.png") if fig_dir.is_dir() else []:
        if stale.resolve() not in keep:
            stale.unlink()

    title = f"Attention flow re-run: report ({b.config.get('study', 'attnflow')})"
    md, html_text = render_markdown(b.blocks), render_html(b.blocks, title=title)
    metrics = metrics_payload(inputs)
    files = {name: reports / name for name in ("report.md", "report.html", "metrics.json", "comparison.csv")}
    write_text(files["comparison.csv"], _comparison_csv(b.comparisons))
    write_json(files["metrics.json"], metrics)
    write_text(files["report.md"], md)
    write_text(files["report.html"], html_text)
    return Report(
        markdown=md,
        html=html_text,
        metrics=metrics,
        cells=metric_cells(inputs),
        files=[*files.values(), *b.figures],
        figures=list(b.figures),
    )
