"""The README's "at a glance" paragraph from the study's outputs (``python -m pipelines.glance``
writes it): every figure read from a file the study wrote, through the report's own functions, so
the README and the report cannot disagree. The paragraph sits between ``<!-- results:glance -->``
and ``<!-- /results:glance -->``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from attnflow.io import read_json, write_text
from attnflow.metrics.ledger import ledger
from attnflow.paths import StudyPaths
from attnflow.report.build import with_main_run
from attnflow.report.inputs import load_task, read_sweep_table, sentence_frames
from attnflow.report.paper import PAPER_ACCURACY
from attnflow.report.sections.claims import TOLERANCE, check_claims, lookup, seed_cells, target_cells
from attnflow.report.sections.provenance import left_out
from attnflow.report.tables import EXPLAINER_LABELS

MARKERS = ("<!-- results:glance -->\n", "<!-- /results:glance -->")
LABELS = {
    **EXPLAINER_LABELS,
    "integrated_gradients": "integrated gradients (captum)",
    "random": "the random floor",
}
FAITHFUL = ("attnlrp", "integrated_gradients", "grad_sam", "chefer", "raw", "rollout", "flow", "random")


def _jobs(path: Path) -> list[dict[str, Any]]:
    return [j for j in read_json(path)["jobs"] if j["status"] == "finished"] if path.is_file() else []


def facts(
    paths: StudyPaths, seed: int, code: Mapping[str, Any] | None = None, *, allow_mixed_code: bool = False
) -> dict[str, Any]:
    """Every figure of the paragraph, read from the study's outputs under ``paths``. ``code``: this
    checkout's code (`attnflow.sweep.code_state`); as in the report, seed-sweep jobs of other code
    are left out (`provenance.left_out`), so the paragraph pools the seeds the report pools."""
    inputs = {task: load_task(task, paths) for task in ("agreement", "sst2")}
    main = read_json(paths.train_metrics("agreement"))
    skip = left_out(code, _jobs(paths.sweep_jobs), allow=allow_mixed_code)
    sweep = [j for j in _jobs(paths.sweep_jobs) if int(j["seed"]) not in skip]
    curve = {
        j["accuracy"]["agreement"]["n_train"]: j["accuracy"]["agreement"]["accuracy"]
        for j in _jobs(paths.recipe_jobs)
    }
    curve[main["n_train"]] = main["accuracy"]  # the main run is the curve's last point
    table = read_sweep_table(paths.sweep)
    if table is not None and skip:
        table = table[~table["seed"].isin(list(skip))]
        table = table if not table.empty else None
    stacked = with_main_run(table, inputs, seed)
    if stacked is None:  # no sweep: this run alone
        stacked = inputs["agreement"].table.assign(seed=seed, task="agreement")
    cells, seeds = seed_cells(stacked)
    target = target_cells(cells)
    claims = [ours >= 0 for _, _, ours in check_claims(lookup(cells))]
    frames = sentence_frames(paths, list(inputs), seed)
    # the ledger once the run wrote per-sentence correlations (its Table 1-3 claims need them)
    has_ledger = "correlations" in frames
    verdicts = ledger(frames, seed=seed)["verdict"].value_counts() if has_ledger else pd.Series(dtype=int)
    faith = inputs["sst2"].faithfulness
    comp = faith[faith["metric"] == "comprehensiveness"].sort_values("layer").groupby("method").last()
    cost = (
        inputs["sst2"].cost.set_index("method")["vs_gradient"]
        if inputs["sst2"].cost is not None
        else pd.Series()
    )
    return {
        "accuracy": main["accuracy"],
        "seed": seed,
        "sweep_accuracy": {j["seed"]: j["accuracy"]["agreement"]["accuracy"] for j in sweep},
        "paper_accuracy": PAPER_ACCURACY["agreement"],
        "curve": dict(sorted(curve.items())),
        "seeds": seeds,
        "within": int(target["within"].sum()),
        "cells": len(target),
        "claims_hold": sum(claims),
        "claims": len(claims),
        "ledger": {v: int(verdicts.get(v, 0)) for v in ("holds", "fails", "inconclusive")},
        "faithfulness_n": int(comp["n"].max()),
        "comprehensiveness": {m: float(comp.loc[m, "mean"]) for m in FAITHFUL if m in comp.index},
        "cost": {m: float(cost[m]) for m in FAITHFUL if m in cost.index},
    }


def report_code(paths: StudyPaths, root: Path) -> Mapping[str, Any] | None:
    """The code that wrote the committed report: :func:`attnflow.sweep.code_state_at` of the
    ``report`` stage's commit in ``reports/stage_times.csv`` (None when the table or the commit is
    missing). The paragraph pools the seeds that report pooled, whatever the checkout's code."""
    from attnflow.report.stage_times import read_table
    from attnflow.sweep import code_state_at

    if not paths.stage_times.is_file():
        return None
    rows = read_table(paths.stage_times)
    commits = rows.loc[rows["stage"] == "report", "commit"].dropna().astype(str)
    return code_state_at(root, commits.iloc[-1]) if len(commits) else None


def paragraph(f: dict[str, Any]) -> str:
    """The paragraph's markdown (wrapped at about 100 characters)."""
    others = ", ".join(f"{a:.3f}" for _, a in sorted(f["sweep_accuracy"].items()))
    seeds_text = (
        f" (seeds {', '.join(str(s) for s in sorted(f['sweep_accuracy']))} of the sweep: {others})"
        if others
        else ""
    )
    points = list(f["curve"].items())
    rises = all(b[1] > a[1] for a, b in itertools.pairwise(points))
    curve = ", ".join(f"{a:.3f} at {n / 1000:.0f}k" for n, a in points)
    comp = f["comprehensiveness"]
    best = max(comp, key=comp.get)

    def method(m: str) -> str:
        x = f"{LABELS.get(m, m)} {comp[m]:.2f}"
        if m in f["cost"] and m in ("attnlrp", "integrated_gradients"):  # the two gradient-based picks
            ratio = f["cost"][m]
            x += f" at {ratio:.1f}×" if ratio < 10 else f" at {ratio:.0f}×"
            x += " the cost of one batched gradient" if m == "attnlrp" else ""
        return x

    text = (
        f"At a glance (the authors' code path on the sample the paper's captions state, a 2-core CPU; written by "
        f"`python -m pipelines.glance` from `reports/`): the agreement student reaches {f['accuracy']:.3f} test "
        f"accuracy at seed {f['seed']}{seeds_text}; paper {f['paper_accuracy']:.2f}. Its learning curve "
        f"({curve} training items) {'rises with the data' if rises else 'does not rise with the data'}. "
        f"As a mean over seeds {f['seeds']}, {f['within']} of the {f['cells']} rollout and flow cells of Tables 1-2 "
        f"lie within ±{TOLERANCE:.2f} of the paper"
        + (
            "."
            if sum(f.get("ledger", {}).values())
            else f" and {f['claims_hold']} of the study's {f['claims']} table rules hold (the report's claims section)."
        )
        + _ledger_text(f.get("ledger", {}))
        + f" Faithfulness on SST-2 ({f['faithfulness_n']} dev "
        f"sentences, AOPC comprehensiveness at the last layer, higher is better): "
        f"{', '.join(method(m) for m in comp)}; the most comprehensive is {LABELS.get(best, best)} "
        "(the report's faithfulness section has every method, both tasks and the cost of each)."
    )
    return _wrap(text)


def _ledger_text(counts: Mapping[str, int]) -> str:
    """The claims ledger's counts, failures included ("" when it measured nothing)."""
    total = sum(counts.values())
    if not total:
        return ""
    return (
        f" Of the {total} claims of the paper's text measured here (the report's claims ledger: an interval "
        f"over seeds and sentences each), {counts['holds']} hold, {counts['fails']} fail and "
        f"{counts['inconclusive']} are inconclusive."
    )


def _wrap(text: str, width: int = 100) -> str:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def with_paragraph(text: str, body: str, where: Path, markers: tuple[str, str] = MARKERS) -> str:
    """``text`` with the body between the markers replaced (ValueError unless they appear once)."""
    pattern = re.compile(re.escape(markers[0]) + ".*?" + re.escape(markers[1]), re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(
            f"{where}: the markers {markers[0].strip()} ... {markers[1]} must appear exactly once"
        )
    return pattern.sub(lambda _: markers[0] + body + "\n" + markers[1], text)


def refresh(
    path: Path, body: str, *, check: bool, what: str, command: str, markers: tuple[str, str] = MARKERS
) -> int:
    """Put ``body`` between the markers of ``path`` (written atomically) and return 0; with ``check``
    write nothing and return 1, saying what is stale and ``command``, when the body differs."""
    text = path.read_text(encoding="utf-8")
    new = with_paragraph(text, body, path, markers)
    if new == text:
        return 0
    if check:
        print(f"{path}: {what} is stale: run {command}")
        return 1
    write_text(path, new)
    return 0
