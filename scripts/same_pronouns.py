"""The pronoun test's committed outputs against those of an older commit (Figure 4 analogue).

    python scripts/same_pronouns.py --base dcf1ace    # the working tree's outputs vs dcf1ace's

Reads ``reports/pronouns/*`` from the working tree and from ``git show <base>:<path>``, and the
maps (``outputs/explain/pronouns/maps.safetensors``) from the working tree and from the DVC cache
by the hash that ``<base>:dvc.lock`` gives them. Prints, per method, whether its maps are equal bit
for bit and else the largest difference; how many outranks flags (referent, model_choice, first)
and "correct" flags changed; the largest change of a sentence's logits and of IG's convergence
delta; and whether the shares table and ``summary.json`` are equal bit for bit. Exit 0.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from attnflow.io import load_ragged

ROOT = Path(__file__).resolve().parents[1]
MAPS = "outputs/explain/pronouns"
REPORTS = "reports/pronouns"


def git_bytes(base: str, path: str) -> bytes:
    return subprocess.run(["git", "show", f"{base}:{path}"], cwd=ROOT, capture_output=True, check=True).stdout


def cached_maps(base: str) -> Path:
    """The maps file of `base`, in the DVC cache (the directory's listing, then the file's hash)."""
    lock = yaml.safe_load(git_bytes(base, "dvc.lock"))
    (md5,) = [o["md5"] for o in lock["stages"]["pronouns"]["outs"] if o["path"] == MAPS]
    cache = ROOT / ".dvc" / "cache" / "files" / "md5"
    listing = json.loads((cache / md5[:2] / md5[2:]).read_text())
    (entry,) = [e for e in listing if e["relpath"] == "maps.safetensors"]
    return cache / entry["md5"][:2] / entry["md5"][2:]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the commit to compare with")
    base = parser.parse_args().base
    old, new = load_ragged(cached_maps(base)), load_ragged(ROOT / MAPS / "maps.safetensors")
    for method in old:
        pairs = list(zip(old[method], new[method], strict=True))
        same = all(np.array_equal(a, b) for a, b in pairs)
        diff = max(float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float)))) for a, b in pairs)
        top = max(float(np.max(np.abs(a))) for a, _ in pairs)
        print(
            f"maps {method:22s} bit-identical: {same}; largest |difference| {diff:.3g} (largest |value| {top:.3g})"
        )

    def table(name: str, base_: str | None) -> pd.DataFrame:
        path = f"{REPORTS}/{name}"
        return pd.read_parquet(io.BytesIO(git_bytes(base_, path)) if base_ else ROOT / path)

    s_old, s_new = table("sentences.parquet", base), table("sentences.parquet", None)
    print(
        "sentences: 'correct' flags changed:",
        int((s_old["correct"] != s_new["correct"]).sum()),
        "of",
        len(s_new),
    )
    for col in ("logit_right", "logit_wrong", "ig_delta", "ig_difference"):
        print(f"sentences: largest |change| of {col}: {float(np.abs(s_old[col] - s_new[col]).max()):.3g}")
    c_old, c_new = table("scores.parquet", base), table("scores.parquet", None)
    for col in ("referent", "model_choice", "first"):
        flips = int((c_old[col].to_numpy() != c_new[col].to_numpy()).sum())
        print(f"scores: {col} flags changed: {flips} of {len(c_new)}")
    print(
        "shares.parquet bit-identical:", table("shares.parquet", base).equals(table("shares.parquet", None))
    )
    summary_old = json.loads(git_bytes(base, f"{REPORTS}/summary.json"))
    print("summary.json identical:", summary_old == json.loads((ROOT / REPORTS / "summary.json").read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
