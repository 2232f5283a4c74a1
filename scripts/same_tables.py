"""The study's committed tables against those of an older commit: which rows are equal bit for bit.

    python scripts/same_tables.py --base c5222a7      # the tables of HEAD's working tree vs c5222a7's

Reads, from the working tree and from ``git show <base>:<path>``, the correlation tables of each
task (``reports/<task>/correlations.parquet``: the configured all-heads rows -- Tables 1-3 --, the
sensitivity variants of the correlation and of the attribution, and the per-head rows apart), the faithfulness and method-agreement tables, and the
sweep's tables (``reports/sweep/*.csv``, the ``commit`` column left out). Prints, per table, the
rows compared, whether they are equal bit for bit, and else the largest difference of a mean.
Exit 0; a table missing on either side is named.
"""

from __future__ import annotations

import argparse
import io
import subprocess
from pathlib import Path

import pandas as pd
from same_numbers import max_abs_diff

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("agreement", "sst2")


def read(path: str, base: str | None) -> pd.DataFrame | None:
    """The table at ``path`` in the working tree (base None) or in commit ``base``; None if absent."""
    if base is None:
        file = ROOT / path
        data = file.read_bytes() if file.is_file() else None
    else:
        got = subprocess.run(["git", "show", f"{base}:{path}"], cwd=ROOT, capture_output=True)
        data = got.stdout if got.returncode == 0 else None
    if data is None:
        return None
    table = pd.read_parquet(io.BytesIO(data)) if path.endswith(".parquet") else pd.read_csv(io.BytesIO(data))
    return table.drop(columns=[c for c in ("commit",) if c in table.columns])


def compare(old: pd.DataFrame, new: pd.DataFrame) -> tuple[int, bool, float]:
    """(rows, equal bit for bit, largest |difference| of ``mean`` where the rows line up, else nan;
    a mean that is NaN on one side only counts as inf, as in same_numbers.max_abs_diff)."""
    old, new = old.reset_index(drop=True), new.reset_index(drop=True)
    if old.equals(new):
        return len(new), True, 0.0
    if len(old) != len(new) or "mean" not in new:
        return len(new), False, float("nan")
    return len(new), False, max_abs_diff(old["mean"].to_numpy(float), new["mean"].to_numpy(float))


def parts(path: str, table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A correlation table as its configured all-heads rows (Tables 1-3), its sensitivity variants
    (``correlate.*`` re-scorings; ``attribution.*`` recomputed importance with its reference) and its
    per-head rows; other tables whole."""
    if path.endswith("correlations.parquet") or path.endswith("correlations.csv"):
        heads = table[table["head"].isna()]
        variant = heads["variant"].astype(str)
        return {
            f"{path} (all heads, configured)": heads[variant == "configured"],
            f"{path} (correlate.* switches)": heads[variant.str.startswith("correlate.")],
            f"{path} (attribution.* switches)": heads[
                ~variant.isin(["configured"]) & ~variant.str.startswith("correlate.")
            ],
            f"{path} (per head)": table[table["head"].notna()],
        }
    return {path: table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the older commit")
    args = parser.parse_args()
    paths = [f"reports/{t}/{name}" for t in TASKS for name in
             ("correlations.parquet", "faithfulness.parquet", "method_agreement.parquet")]  # fmt: skip
    paths += ["reports/sweep/correlations.csv", "reports/sweep/faithfulness.csv"]
    print(f"| table | rows | bit-identical to {args.base} | largest change of a mean |")
    print("| --- | --- | --- | --- |")
    for path in paths:
        old, new = read(path, args.base), read(path, None)
        if old is None or new is None:
            print(f"| {path} | missing {'at ' + args.base if old is None else 'here'} | | |")
            continue
        old_parts = parts(path, old)
        for name, table in parts(path, new).items():
            rows, same, diff = compare(old_parts[name], table)
            print(f"| {name} | {rows} | {'yes' if same else 'no'} | {diff:.2g} |")


if __name__ == "__main__":
    main()
