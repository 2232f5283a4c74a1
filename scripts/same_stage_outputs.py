"""The study's stage outputs, bit for bit, from an older revision's code run on today's models and data.

    python scripts/same_stage_outputs.py --base af3f8bc                 # capture + explain, both tasks
    python scripts/same_stage_outputs.py --base af3f8bc --stages capture --tasks agreement

What it answers: would the code of `--base` have written the same files as the outputs in this
checkout (`outputs/<stage>/<task>/`, from `dvc repro` of the current code)? The trained models,
the prepared data and the config are held fixed (the base's own `conf/`, this checkout's
`models/` and `data/`), so a difference can only come from code. The base is checked out with
`git worktree add` into a temporary folder, its C++ max-flow kernels are compiled with its own
CMakeLists.txt (cmake + ninja; pybind11 is installed into the folder), and each stage runs as the
base's `python -m pipelines.<stage> <task>` in a subprocess that imports the base's attnflow (the
editable install's redirect to this checkout is switched off there). Its MLflow runs go to the
temporary folder.

Compared: every array of every .safetensors file (name, dtype, shape, bytes) and every .parquet
table (pandas `equals`) the base wrote, against the same file here. Prints one line per file and
exits 1 when anything differs or is missing here, 2 when the base could not be built or run.
Takes about as long as the stages (capture + explain of both tasks: ~6 min on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pandas as pd
from safetensors.numpy import load_file

# the bit-for-bit comparison of scripts/same_numbers.py (this folder is on the path when the
# script runs)
from same_numbers import bit_identical, max_abs_diff

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("capture", "explain")
TASKS = ("agreement", "sst2")
# Runs one stage module of the base: its attnflow first on the path (same_numbers.use_site drops
# the editable finder), then its tree (pipelines/).
RUNNER = """
import runpy, sys
from pathlib import Path
scripts, site, tree, module = sys.argv[1:5]
sys.path.insert(0, scripts)
from same_numbers import use_site
use_site(Path(site))
sys.path.insert(1, tree)
sys.argv = [module, *sys.argv[5:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _run(cmd: list[str], **kw) -> None:
    subprocess.run(cmd, check=True, **kw)


def build_base(rev: str, work: Path) -> tuple[Path, Path]:
    """(tree, site): `rev` checked out at work/tree; its attnflow with its compiled kernels in work/site."""
    tree, site, build = work / "tree", work / "site", work / "build"
    _run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(tree), rev])
    tools = work / "tools"
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(tools), "pybind11"])
    pybind11_dir = subprocess.run(
        [sys.executable, "-c", "import pybind11; print(pybind11.get_cmake_dir())"],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tools)},
    ).stdout.strip()  # fmt: skip
    _run(
        ["cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         "-DSKBUILD_PROJECT_NAME=attnflow", "-DSKBUILD_PROJECT_VERSION=0.0.0",
         f"-Dpybind11_DIR={pybind11_dir}", f"-DPython_EXECUTABLE={sys.executable}"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    _run(["cmake", "--build", str(build)], stdout=subprocess.DEVNULL)
    shutil.copytree(tree / "src" / "attnflow", site / "attnflow")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for lib in build.glob(f"_kernels{suffix}"):
        shutil.copy2(lib, site / "attnflow" / "explain" / "_maxflow" / lib.name)
    for shared in ("data", "models"):  # today's prepared data and trained models
        (tree / shared).symlink_to(ROOT / shared, target_is_directory=True)
    return tree, site


def run_stage(tree: Path, site: Path, stage: str, task: str, work: Path) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    scripts = str(Path(__file__).resolve().parent)
    _run(
        [sys.executable, "-c", RUNNER, scripts, str(site), str(tree), f"pipelines.{stage}", task],
        cwd=tree,
        env=env,
    )


def compare_file(old: Path, new: Path) -> tuple[int, list[str]]:
    """(items compared, the names that differ, each with its largest absolute difference) of one
    output file."""
    if not new.exists():
        return 1, [f"{new} is missing here"]
    if old.suffix == ".parquet":
        return 1, [] if pd.read_parquet(old).equals(pd.read_parquet(new)) else ["the table"]
    if old.suffix == ".safetensors":
        a, b = load_file(old), load_file(new)
        bad = [
            f"{k} (max |d| {f'{max_abs_diff(a[k], b[k]):.1e}' if k in a and k in b else 'missing'})"
            for k in sorted(set(a) | set(b))
            if k not in a or k not in b or not bit_identical(a[k], b[k])
        ]
        return len(set(a) | set(b)), bad
    return 1, [] if old.read_bytes() == new.read_bytes() else ["the bytes"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/same_stage_outputs.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--base", required=True, help="the revision whose code runs the stages")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="same_stage_outputs_"))
    try:
        try:
            tree, site = build_base(args.base, work)
            for stage in args.stages:  # in pipeline order: explain reads the base's own capture
                for task in args.tasks:
                    run_stage(tree, site, stage, task, work)
        except subprocess.CalledProcessError as exc:
            print(f"same_stage_outputs: the base failed to build or run: {' '.join(map(str, exc.cmd[:6]))}")
            return 2
        items = differ = 0
        for stage in args.stages:
            for task in args.tasks:
                for old in sorted((tree / "outputs" / stage / task).rglob("*")):
                    if not old.is_file():
                        continue
                    here = ROOT / old.relative_to(tree)
                    n, bad = compare_file(old, here)
                    items, differ = items + n, differ + len(bad)
                    print(
                        f"{here.relative_to(ROOT)}: {n} compared, {len(bad)} differ {bad[:5] if bad else ''}"
                    )
        print(f"base {args.base} vs this checkout's outputs: {items} arrays / tables, {differ} differ")
        return 1 if differ or items == 0 else 0
    finally:
        if (work / "tree").exists():
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "tree")], check=False
            )
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)


if __name__ == "__main__":
    raise SystemExit(main())
