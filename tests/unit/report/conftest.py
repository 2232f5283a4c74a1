"""A fixed, small set of stage outputs for the report: two tasks, numbers chosen by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnflow.io import save_ragged
from attnflow.paths import StudyPaths
from attnflow.report.paper import TABLES

OFFSET = 0.03  # every cell not set by hand is the paper's mean + OFFSET, so its Δ is +0.03

# Cells set by hand: (task, importance, explainer, layer) -> (mean, std, ci_low, ci_high)
HAND = {
    # paper 0.69 ± 0.27: Δ = 0.59 - 0.69 = -0.10; paper mean outside [0.57, 0.61]
    ("agreement", "blank_out", "raw", 1): (0.59, 0.30, 0.57, 0.61),
    # paper 0.70 ± 0.25: Δ = 0.00; paper mean inside [0.68, 0.72] -> marked match
    ("agreement", "blank_out", "flow", 3): (0.70, 0.25, 0.68, 0.72),
    # paper -0.11 ± 0.49: Δ = 0.95 - (-0.11) = +1.06 > 2 * 0.49 = 0.98 -> marked far
    ("agreement", "blank_out", "raw", 3): (0.95, 0.05, 0.94, 0.96),
    # paper 0.54 ± 0.31 (Table 2 rollout L6): Δ = 0.40 - 0.54 = -0.14
    ("agreement", "input_gradients", "rollout", 6): (0.40, 0.33, 0.38, 0.42),
}
N = 40  # samples per cell


def correlations(task: str) -> pd.DataFrame:
    """The configured all-heads cells for layers 1-6 of every method (and two heads of flow on agreement)."""
    rows = []
    for importance in ("blank_out", "input_gradients"):
        paper = next((t for t in TABLES if (t.task, t.importance) == (task, importance)), None)
        for method in ("raw", "rollout", "flow"):
            for layer in range(1, 7):
                base = paper.cells[method][layer][0] if paper and layer in paper.layers else 0.1 * layer
                mean, std, lo, hi = HAND.get(
                    (task, importance, method, layer), (base + OFFSET, 0.2, base + 0.01, base + 0.05)
                )
                rows.append(_row(task, importance, method, None, layer, mean, std, lo, hi))
    if task == "agreement":  # flow head 0 = 0.1 * layer, head 1 = -0.1 * layer
        rows += [
            _row(task, "blank_out", "flow", h, k, (0.1 if h == 0 else -0.1) * k, 0.1)
            for h in range(2)
            for k in range(1, 7)
        ]
    return pd.DataFrame(rows).astype({"head": "Int64"})


def _row(task, importance, method, head, layer, mean, std, lo=float("nan"), hi=float("nan")) -> dict:
    return dict(task=task, importance=importance, method=method, head=head, layer=layer, variant="configured",
                mean=mean, std=std, ci_low=lo, ci_high=hi, n=N, n_undefined=0)  # fmt: skip


SAMPLES = {
    "agreement": [  # (text, label, pred, n_attractors)
        ("the dogs near the car", 1, 1, 1),
        ("the article on NNP large systems", 0, 0, 1),
        ("the keys to the cabinet", 1, 0, 1),
    ],
    "sst2": [("a fine film", 1, 1, -1), ("dull and long", 0, 0, -1)],
}


def write_stage_outputs(root: Path, tasks=("agreement", "sst2"), *, with_train: bool = True) -> None:
    """reports/<task>/correlations.parquet, train_metrics.json, data_summary.json; samples and maps."""
    rng = np.random.default_rng(0)
    for task in tasks:
        rep = root / "reports" / task
        rep.mkdir(parents=True, exist_ok=True)
        correlations(task).to_parquet(rep / "correlations.parquet", index=False)
        if with_train:
            metrics = {
                "task": task,
                "eval_split": "test" if task == "agreement" else "dev",
                "accuracy": 0.9375,
                "n_eval": 160,
                "val_accuracy": 0.95,
                "epochs": 3,
                "train_wall_s": 12.5,
            }
            if task == "agreement":
                metrics["accuracy_by_attractors"] = {"0": 0.975, "1": 0.9, "2": 0.8}
                metrics["n_by_attractors"] = {"0": 80, "1": 60, "2": 20}
            (rep / "train_metrics.json").write_text(json.dumps(metrics))
        (rep / "data_summary.json").write_text(
            json.dumps({"task": task, "test": {"n": 160, "singular": 90, "plural": 70}})
        )
        rows = SAMPLES[task]
        tokens = [["<cls>", *text.split()] for text, *_ in rows]
        frame = pd.DataFrame(
            {
                "text": [r[0] for r in rows],
                "label": [r[1] for r in rows],
                "sample_id": [10 * i + 3 for i in range(len(rows))],
                "tokens": tokens,
                "input_ids": [list(range(len(t))) for t in tokens],
                "length": [len(t) for t in tokens],
                "pred": [r[2] for r in rows],
                "probs": [[0.2, 0.8] if r[2] == 1 else [0.8, 0.2] for r in rows],
                "n_attractors": [r[3] for r in rows],
            }
        )
        cap = root / "outputs" / "capture" / task
        cap.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(cap / "samples.parquet", index=False)
        maps = {}
        for method in ("raw", "rollout", "flow"):
            arrays = []
            for t in tokens:
                m = rng.random((6, len(t)))
                arrays.append(m / m.sum(axis=1, keepdims=True))  # (L, T), rows sum to 1
            maps[method] = arrays
        save_ragged(root / "outputs" / "explain" / task / "maps.safetensors", maps, ids=frame["sample_id"])


@pytest.fixture()
def stage_outputs(tmp_path) -> Path:
    """Both tasks' outputs under ``tmp_path`` (reports/, outputs/)."""
    write_stage_outputs(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def make_stage_outputs():
    """``make_stage_outputs(root, tasks=..., with_train=...)``: the writer, for partial set-ups."""
    return write_stage_outputs


def study_paths(root: Path) -> StudyPaths:
    """The default layout below ``root`` (as conf/paths/default.yaml)."""
    import yaml

    conf = yaml.safe_load(
        (Path(__file__).resolve().parents[3] / "conf" / "paths" / "default.yaml").read_text()
    )
    return StudyPaths.from_config(conf, root=root)
