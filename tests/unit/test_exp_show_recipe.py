"""The README's `dvc exp show` recipe keeps the columns it promises: the experiment, its seed and the
headline. dvc protects the columns that ``re.match`` (anchored at the start) one of the ``--keep``
patterns, and names a key that several files share by its file (``params.yaml:seed``, since the
reports' data_summary.json and train_metrics.json also hold a ``seed``): ``seed$`` alone kept none."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Column names of `dvc exp show --csv` on this repository (the seed is in three files)
COLUMNS = [
    "Experiment", "rev", "typ", "Created", "parent", "State", "Executor",
    "reports/agreement/data_summary.json:seed", "reports/agreement/train_metrics.json:seed",
    "reports/sst2/train_metrics.json:seed", "params.yaml:seed", "agr.acc", "agr.rollout", "agr.flow",
    "sst2.acc", "sst2.rollout", "sst2.flow", "agreement.accuracy", "task.sst2.train.lr",
]  # fmt: skip


def _recipes() -> list[list[str]]:
    """Every `dvc exp show --drop ...` line of the README and the MLflow page, as argv."""
    lines = [line for doc in ("README.md", "docs/mlflow.md")
             for line in re.findall(r"(dvc exp show --drop [^`\n]*)", (ROOT / doc).read_text())]  # fmt: skip
    assert len(lines) == 2, lines
    return [shlex.split(line, comments=True) for line in lines]


def _shown(argv: list[str], columns: list[str]) -> list[str]:
    """What dvc keeps (dvc/commands/experiments/show.py): a column matched by --keep is protected,
    the others matched by --drop go."""
    keep = re.compile("|".join(argv[i + 1] for i, a in enumerate(argv) if a == "--keep"))
    drop = re.compile("|".join(argv[i + 1] for i, a in enumerate(argv) if a == "--drop"))
    return [c for c in columns if keep.match(c) or not drop.match(c)]


def test_the_documented_exp_show_recipe_keeps_the_seed_and_the_headline():
    for argv in _recipes():
        shown = _shown(argv, COLUMNS)
        assert shown == ["Experiment", "params.yaml:seed", "agr.acc", "agr.rollout", "agr.flow",
                         "sst2.acc", "sst2.rollout", "sst2.flow"]  # fmt: skip


def test_the_recipe_also_keeps_a_seed_named_alone():
    # a repository whose reports hold no seed: dvc names the column plain `seed`
    assert all("seed" in _shown(argv, ["Experiment", "seed", "lr"]) for argv in _recipes())
