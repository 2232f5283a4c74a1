"""Machine spread: how far Tables 1-2 move between two CPU kinds, beside how far they move between seeds.

Reads, below the reports folder:

- ``machines/avx2-133b5cc/``: the committed run of an AVX2 machine on the notebook's sample
  (``+switch=notebook_sample``): seed 0's correlation table and the stacked sweep of seeds 1-2;
- ``samples/``: a seed sweep of the same sample on this checkout's machine (``python -m
  pipelines.study -m seed=0,1,2 +switch=notebook_sample hydra.callbacks.aggregate.into=samples``),
  ``correlations.csv`` and ``jobs.json``;
- ``machines/determinism-*.json``: ``scripts/determinism.py``'s measurement, one file per CPU kind.

Spreads: :mod:`attnflow.metrics.spread` over the configured all-heads cells of Tables 1-2.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from attnflow.io import load_artifact, read_json, read_parquet
from attnflow.metrics.spread import CELL, spread_frame, spread_summary
from attnflow.metrics.tables import configured

from ..context import Context
from ..document import Bullets, Heading, Paragraph, Table
from ..figures import COLORS
from ..paper import TABLES
from ..tables import EXPLAINER_LABELS, IMPORTANCE_LABELS, Grid, fmt
from .samples import SAMPLES_SWEEP

__all__ = ["archived_cells", "determinism_files", "plot_spread", "sample_cells", "section", "table_cells"]

TASK = "agreement"
MACHINES = "machines"  # below the reports folder: other machines' runs and the determinism files
ARCHIVED = "avx2-133b5cc"  # the AVX2 machine's committed run (seed 0 at 133b5cc, its sweep of seeds 1-2)
SEED0_TABLE = "agreement_correlations.parquet"  # ARCHIVED's seed-0 cells
SEED0_METRICS = "agreement_train_metrics.json"  # ARCHIVED's seed-0 training (its seed, its CPU)
SWEEP_TABLE = "sweep_correlations.csv"  # ARCHIVED's seeds 1-2
SAMPLES = SAMPLES_SWEEP  # the aggregate folder of this machine's sweep on the same sample
DETERMINISM = "determinism-*.json"  # scripts/determinism.py, one per CPU kind
DIGEST = 12  # hex digits of a digest shown
UNMEASURED = "not measured in this run"
_MARKERS = {"blank_out": "o", "input_gradients": "^"}


def table_cells(table: pd.DataFrame, *, machine: str, seed: int | None = None) -> pd.DataFrame:
    """The configured all-heads cells of Tables 1-2 in a correlation table (one task's or a sweep's
    stacked one), as :mod:`attnflow.metrics.spread` cells; ``seed`` for a table without a seed column.

    >>> t = pd.DataFrame({"task": "agreement", "importance": "blank_out", "method": ["flow", "chefer"],
    ...     "head": pd.NA, "layer": 3, "variant": "configured", "mean": [0.7, 0.1], "n": 100})
    >>> table_cells(t, machine="m", seed=0)[["machine", "seed", "method", "mean"]].values.tolist()
    [['m', 0, 'flow', 0.7]]
    """
    rows = configured(table)
    rows = rows[rows["task"] == TASK] if "task" in rows else rows.assign(task=TASK)
    if seed is not None:
        rows = rows.assign(seed=seed)
    published = {
        (p.importance, m, k) for p in TABLES if p.task == TASK for m, by in p.cells.items() for k in by
    }
    keep = [
        (i, m, int(k)) in published
        for i, m, k in zip(rows["importance"], rows["method"], rows["layer"], strict=True)
    ]
    out = rows[keep].assign(
        machine=machine, seed=lambda f: f["seed"].astype(int), layer=lambda f: f["layer"].astype(int)
    )
    return out[["machine", "seed", *CELL, "mean", "n"]].reset_index(drop=True)  # fmt: skip


def _csv(path: Path) -> pd.DataFrame | None:
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return load_artifact(path, pd.read_csv, what="sweep table")


def archived_cells(reports: Path) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """The AVX2 run's cells (seed 0 and its sweep) and what its seed-0 metrics say of it: ``label``,
    ``capability``, ``commits``; (None, {}) when the folder is absent."""
    folder = reports / MACHINES / ARCHIVED
    if not (folder / SEED0_TABLE).is_file():
        return None, {}
    metrics = read_json(folder / SEED0_METRICS) if (folder / SEED0_METRICS).is_file() else {}
    label = f"{(metrics.get('cpu') or {}).get('capability', '?')} ({ARCHIVED.rsplit('-', 1)[-1]})"
    parts = [table_cells(read_parquet(folder / SEED0_TABLE), machine=label, seed=int(metrics.get("seed", 0)))]
    commits = {ARCHIVED.rsplit("-", 1)[-1]}
    if (sweep := _csv(folder / SWEEP_TABLE)) is not None:
        parts.append(table_cells(sweep, machine=label))
        commits |= set(sweep["commit"].dropna().astype(str).str[:7]) if "commit" in sweep else set()
    info = {
        "label": label,
        "capability": (metrics.get("cpu") or {}).get("capability"),
        "commits": sorted(commits),
    }
    return pd.concat(parts, ignore_index=True), info


def sample_cells(ctx: Context) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """This machine's sweep on the same sample: the cells of its finished jobs (``jobs.json``, when
    present, says which finished and their seeds) and ``label``, ``capability``, ``commits``; (None,
    {}) when it has not run. The machine is this checkout's training CPU (``train_metrics.json``)."""
    table = _csv(ctx.paths.sweep_table(SAMPLES))
    if table is None:
        return None, {}
    jobs_file = ctx.paths.sweep_jobs_file(SAMPLES)
    if jobs_file.is_file():
        jobs = read_json(jobs_file).get("jobs", [])
        seeds = {str(j["job"]): int(j["seed"]) for j in jobs if j.get("status") == "finished"}
        table = table[table["job"].astype(str).isin(seeds)]
        if "seed" not in table:
            table = table.assign(seed=table["job"].astype(str).map(seeds))
    got = ctx.inputs.get(TASK)
    capability = (((got.train_metrics if got is not None else None) or {}).get("cpu") or {}).get("capability")
    label = f"{capability or 'this machine'} ({SAMPLES}/)"
    commits = sorted(set(table["commit"].dropna().astype(str).str[:7])) if "commit" in table else []
    return table_cells(table, machine=label), {"label": label, "capability": capability, "commits": commits}


def determinism_files(reports: Path) -> list[dict[str, Any]]:
    """Every ``scripts/determinism.py`` result in the machines folder, by file name, each with ``file``."""
    folder = reports / MACHINES
    return (
        [{**read_json(p), "file": p.name} for p in sorted(folder.glob(DETERMINISM))]
        if folder.is_dir()
        else []
    )


def plot_spread(frame: pd.DataFrame, labels: tuple[str, str]) -> Figure:
    """One point per cell: seed spread (x) against machine spread (y), the diagonal y = x drawn;
    colour = method, marker = importance score. Points below the diagonal: the CPU moved the cell
    less than a seed does."""
    fig = Figure(figsize=(5.2, 4.2), layout="constrained")
    ax = fig.add_subplot()
    both = frame.dropna(subset=["machine_spread", "seed_spread"])
    for (importance, method), rows in both.groupby(["importance", "method"], sort=False):
        ax.scatter(rows["seed_spread"], rows["machine_spread"], s=22, color=COLORS.get(method),
                   marker=_MARKERS.get(importance, "s"),
                   label=f"{EXPLAINER_LABELS.get(method, method)} vs {IMPORTANCE_LABELS.get(importance, importance)}")  # fmt: skip
    top = max(float(both[["machine_spread", "seed_spread"]].max().max()), 1e-3) * 1.08 if len(both) else 1.0
    ax.plot([0, top], [0, top], "--", color="#777", linewidth=1, label="machine = seed")
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="seed spread (sd over seeds, mean of the machines)",
           ylabel=f"machine spread (|{labels[0]} − {labels[1]}|, mean over seeds)")  # fmt: skip
    ax.set_title("Tables 1-2 cells: another CPU vs another seed", fontsize=10)
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(alpha=0.3)
    return fig


def _spread_grid(frame: pd.DataFrame) -> list[Table]:
    cells = frame.set_index(CELL)
    tables = []
    for paper in TABLES:
        if paper.task != TASK:
            continue
        grid = Grid(header=["method", *(f"L{k}" for k in paper.layers)], rows=[],
                    caption=f"Table {paper.number} ({IMPORTANCE_LABELS[paper.importance]}): machine spread / seed spread per cell")  # fmt: skip
        for method in paper.cells:
            row = [EXPLAINER_LABELS.get(method, method)]
            for k in paper.layers:
                key = (TASK, paper.importance, method, k)
                c = cells.loc[key] if key in cells.index else None
                row.append(
                    "n/a" if c is None else f"{fmt(c['machine_spread'], 3)} / {fmt(c['seed_spread'], 3)}"
                )
            grid.rows.append(row)
        tables.append(Table(grid))
    return tables


def _summary_text(summary: dict[str, Any], labels: list[str]) -> str:
    if summary["n_machine"] == 0:
        return (f"Machine spread: {UNMEASURED} (the cells of a second CPU on the same sample are absent: "
                f"`reports/{SAMPLES}/correlations.csv`). Seed spread over {summary['n_seed']} cells on "
                f"{', '.join(labels)}: mean {fmt(summary['seed_mean'])}, largest {fmt(summary['seed_max'])}.")  # fmt: skip
    share = summary["share_machine_above_seed"]
    return (
        f"Over {summary['n_both']} cells of Tables 1-2 ({' vs '.join(labels)}): machine spread mean "
        f"{fmt(summary['machine_mean'])}, largest {fmt(summary['machine_max'])}; seed spread mean "
        f"{fmt(summary['seed_mean'])}, largest {fmt(summary['seed_max'])}. The CPU moves "
        f"{round(share * summary['n_both']) if share is not None else 'n/a'} of the {summary['n_both']} cells "
        f"further than a seed's standard deviation ({fmt(100 * share if share is not None else None, 0)}%)."
    )


def _determinism_blocks(files: list[dict[str, Any]]) -> list[Any]:
    if not files:
        return [
            Paragraph(f"Weights across instruction-set pins: {UNMEASURED} (`python scripts/determinism.py`).")
        ]
    blocks: list[Any] = []
    for got in files:
        m, r = got.get("machine", {}), got.get("recipe", {})
        grid = Grid(header=["dtype", "pin", "kernels", "weights (sha256)", "= native", "max |Δw| vs native",
                            "first step whose loss differs", "CPU s"], rows=[],
                    caption=f"{got['file']}: {m.get('cpu')} ({m.get('cpu_capability')}), torch "
                            f"{(m.get('packages') or {}).get('torch')}; {r.get('train_items')} training items, "
                            f"{r.get('epochs')} epochs, {r.get('threads')} thread(s), seed {r.get('seed')}")  # fmt: skip
        for s in got.get("settings", []):
            step = s.get("first_loss_difference")
            grid.rows.append([s["dtype"], s["pin"], s.get("capability", "?"), s["digest"][:DIGEST],
                              "yes" if s.get("same_digest") else "no", f"{s.get('max_abs_diff', math.nan):.1e}",
                              "none" if step is None else str(step + 1), fmt(s.get("cpu_s"), 1)])  # fmt: skip
        blocks += [Paragraph(_determinism_text(got)), Table(grid)]
    blocks.append(Paragraph(_across_text(files)))
    return blocks


def _determinism_text(got: dict[str, Any]) -> str:
    answer, m = got.get("answer", {}), got.get("machine", {})
    parts = []
    for dtype in ("float32", "float64"):
        a = answer.get(dtype)
        if a is None:
            continue
        same = "the same weights, bit for bit" if a["identical_across_pins"] else "different weights"
        rounded = ("" if a["identical_across_pins"] or dtype == "float32" else
                   "; rounded to float32 they are " + ("identical" if a["identical_float32_rounded"] else "still not identical"))  # fmt: skip
        costs = ", ".join(f"{pin} {r}x" for pin, r in (a.get("cost_ratio") or {}).items() if pin != "native")
        parts.append(
            f"in {dtype} the pins give {same} (largest |Δw| {a['max_abs_diff']:.1e}){rounded}"
            + (f"; CPU time against native: {costs}" if costs else "")
        )
    ratio = answer.get("float64_cost_ratio")
    cost = f" float64 training took {ratio}x the CPU time of float32 (native kernels)." if ratio else ""
    return f"On {m.get('cpu')} ({m.get('cpu_capability')}): " + "; ".join(parts) + "." + cost


def _across_text(files: list[dict[str, Any]]) -> str:
    """Whether two CPU kinds gave the same digest for the same setting and recipe."""
    kinds = {f.get("machine", {}).get("cpu_capability") for f in files}
    if len(files) < 2 or len(kinds) < 2:
        return f"The same settings on another CPU kind: {UNMEASURED} (one kind's file: {', '.join(f['file'] for f in files)})."
    by: dict[tuple, dict[str, str]] = {}
    for f in files:
        recipe = tuple(sorted((f.get("recipe") or {}).items()))
        for s in f.get("settings", []):
            by.setdefault((recipe, s["dtype"], s["pin"]), {})[f["file"]] = s["digest"]
    rows = [f"{d} {p}: " + ("identical" if len(set(v.values())) == 1 else "different") + f" across {len(v)} files"
            for (_, d, p), v in sorted(by.items(), key=lambda kv: kv[0][1:]) if len(v) > 1]  # fmt: skip
    return "Across CPU kinds (same recipe): " + ("; ".join(rows) if rows else "no setting in common") + "."


def section(ctx: Context) -> None:
    reports = ctx.paths.reports
    archived, a_info = archived_cells(reports)
    sampled, s_info = sample_cells(ctx)
    files = determinism_files(reports)
    if archived is None and sampled is None and not files:
        return
    ctx.add(
        Heading("Machines: another CPU beside another seed", 2),
        Bullets(
            [
                "Same CPU kind (torch's capability, e.g. AVX2 or AVX512), same thread count, same code, config and "
                "data: every trained weight, map and table is bit-identical (docs/determinism.md).",
                "Another CPU kind (or torch, MKL and oneDNN pinned to other instructions): the kernels sum in "
                "another order, the weights differ in their last bits, and training grows the difference into "
                "another model; the cells then move as measured below.",
            ]
        ),
    )
    parts = [c for c in (archived, sampled) if c is not None]
    labels = [i["label"] for i in (a_info, s_info) if i]
    if parts:
        cells = pd.concat(parts, ignore_index=True)
        frame = spread_frame(cells.drop(columns="n"))
        summary = spread_summary(frame)
        seeds = {lab: sorted(int(s) for s in g["seed"].unique()) for lab, g in cells.groupby("machine")}
        n = {lab: sorted(int(x) for x in g["n"].unique()) for lab, g in cells.groupby("machine")}
        commits = {i["label"]: ", ".join(i["commits"]) for i in (a_info, s_info) if i}
        ctx.add(Paragraph(
            "Cells: the configured all-heads Tables 1-2 cells on the notebook's sample (`+switch=notebook_sample`). "
            + "; ".join(f"{lab}: seeds {seeds[lab]}, {'/'.join(map(str, n[lab]))} samples per cell, commit(s) {commits[lab]}" for lab in seeds)
            + ". Machine spread = |difference| between the machines at one seed, mean over the seeds both ran; "
            "seed spread = sd over seeds within a machine, mean of the machines (`attnflow.metrics.spread`)."
        ))  # fmt: skip
        if len(set(map(tuple, n.values()))) > 1:
            ctx.add(
                Paragraph(
                    "**The machines' cells average different numbers of samples: not the same sample.**"
                )
            )
        ctx.add(Paragraph(_summary_text(summary, labels)))
        if summary["n_both"] and len(labels) == 2:
            ctx.figure(plot_spread(frame, (labels[1], labels[0])), "machine_spread.png",
                       "machine spread against seed spread per cell",
                       "One point per Tables 1-2 cell; below the dashed diagonal the CPU moved the cell less than a seed does.")  # fmt: skip
        ctx.add(*_spread_grid(frame))
    ctx.add(*_determinism_blocks(files))
