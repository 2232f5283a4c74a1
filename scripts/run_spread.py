"""How far two runs of the study apart lie, against the seed spread: seed 0's configured raw,
rollout and flow cells (Tables 1-3) of the working tree against those of a commit.

    python scripts/run_spread.py --base 4c13413

Reads ``reports/<task>/correlations.parquet`` from the working tree and from ``git show
<base>:<path>``, and the base's seeds from ``reports/sweep/correlations.csv``. Prints per task the
median and largest |difference| of a cell's mean between the two runs, beside the median and
largest standard deviation of the same cell over the base's seeds (its seed 0 and sweep seeds),
and how many cells moved by more than two of those deviations. Used for a run on another kind
of CPU (docs/determinism.md).
"""

from __future__ import annotations

import argparse
import io
import subprocess

import pandas as pd

TASKS = ("agreement", "sst2")
KEY = ["importance", "method", "layer"]
METHODS = ("raw", "rollout", "flow")


def _git(path: str, rev: str) -> bytes:
    return subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, check=True).stdout


def configured(table: pd.DataFrame) -> pd.DataFrame:
    """The all-heads rows of the configured variant for raw, rollout and flow."""
    keep = (table["variant"] == "configured") & table["head"].isna() & table["method"].isin(METHODS)
    return table[keep]


def spread(base: str, task: str) -> pd.DataFrame:
    """Per cell: |now - base| of seed 0's mean, and the sd of the mean over the base's seeds."""
    now = configured(pd.read_parquet(f"reports/{task}/correlations.parquet")).set_index(KEY)["mean"]
    then = configured(pd.read_parquet(io.BytesIO(_git(f"reports/{task}/correlations.parquet", base))))
    sweep = pd.read_csv(io.BytesIO(_git("reports/sweep/correlations.csv", base)))
    seeds = pd.concat([configured(sweep[sweep["task"] == task])[[*KEY, "mean"]], then[[*KEY, "mean"]]])
    out = pd.DataFrame(
        {"diff": (now - then.set_index(KEY)["mean"]).abs(), "seed_sd": seeds.groupby(KEY)["mean"].std()}
    )
    return out.dropna()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit whose run to compare with")
    args = parser.parse_args()
    print("| task | cells | median / largest change | median / largest seed sd | cells beyond 2 sd |")
    print("| --- | --- | --- | --- | --- |")
    for task in TASKS:
        d = spread(args.base, task)
        print(
            f"| {task} | {len(d)} | {d['diff'].median():.3f} / {d['diff'].max():.3f} | "
            f"{d['seed_sd'].median():.3f} / {d['seed_sd'].max():.3f} | {int((d['diff'] > 2 * d['seed_sd']).sum())} |"
        )


if __name__ == "__main__":
    main()
