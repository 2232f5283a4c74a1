"""How far two runs of the study apart lie, against the seed spread: seed 0's configured raw,
rollout and flow cells (Tables 1-3) of the working tree against those of a commit.

    python scripts/run_spread.py --base 4c13413

Reads ``reports/<task>/correlations.parquet`` from the working tree and from ``git show
<base>:<path>`` (``same_tables.read``), and the base's seeds from ``reports/sweep/correlations.csv``. Prints per task the
median and largest |difference| of a cell's mean between the two runs, beside the median and
largest standard deviation of the same cell over the base's seeds (its seed 0 and sweep seeds),
and how many cells moved by more than two of those deviations. Used for a run on another kind
of CPU (docs/determinism.md).
"""

from __future__ import annotations

import argparse

import pandas as pd
from same_tables import read

TASKS = ("agreement", "sst2")
KEY = ["importance", "method", "layer"]
METHODS = ("raw", "rollout", "flow")


def configured(table: pd.DataFrame) -> pd.DataFrame:
    """The all-heads rows of the configured variant for raw, rollout and flow."""
    keep = (table["variant"] == "configured") & table["head"].isna() & table["method"].isin(METHODS)
    return table[keep]


def table(path: str, base: str | None) -> pd.DataFrame:
    """``same_tables.read``, refusing a table absent from the working tree (base None) or from base."""
    found = read(path, base)
    if found is None:
        raise SystemExit(f"{path}: not found {'in the working tree' if base is None else f'at {base}'}")
    return found


def spread(base: str, task: str) -> pd.DataFrame:
    """Per cell: |now - base| of seed 0's mean, and the sd of the mean over the base's seeds."""
    now = configured(table(f"reports/{task}/correlations.parquet", None)).set_index(KEY)["mean"]
    then = configured(table(f"reports/{task}/correlations.parquet", base))
    sweep = table("reports/sweep/correlations.csv", base)
    seeds = pd.concat([configured(sweep[sweep["task"] == task])[[*KEY, "mean"]], then[[*KEY, "mean"]]])
    out = pd.DataFrame(
        {"diff": (now - then.set_index(KEY)["mean"]).abs(), "seed_sd": seeds.groupby(KEY)["mean"].std()}
    )
    return out.dropna()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit whose run to compare with")
    args = parser.parse_args()
    spreads = {task: spread(args.base, task) for task in TASKS}  # every table read before any line
    print("| task | cells | median / largest change | median / largest seed sd | cells beyond 2 sd |")
    print("| --- | --- | --- | --- | --- |")
    for task, d in spreads.items():
        print(
            f"| {task} | {len(d)} | {d['diff'].median():.3f} / {d['diff'].max():.3f} | "
            f"{d['seed_sd'].median():.3f} / {d['seed_sd'].max():.3f} | {int((d['diff'] > 2 * d['seed_sd']).sum())} |"
        )


if __name__ == "__main__":
    main()
