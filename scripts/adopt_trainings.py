"""Put the trainings of a finished sweep into the stage cache, as if the sweep had stored them.

    python scripts/adopt_trainings.py multirun/abnar2020/2026-11-27_17-48-40   # every job of that sweep

A sweep run by code older than the stage cache (pipelines/study.py, ``hydra.callbacks.reuse``)
trained without storing. Its trainings are taken under the key a sweep of this checkout computes
(``study.train_key`` in the job's folder: this checkout's training code files, the job's prepared
data and params, this machine) only when that key is true for them:

- the job finished its training (model folder and timing present) and recorded its code
  (``provenance.json``), without uncommitted changes;
- the training is whole: its exported model loads and its metrics and timing are readable (a
  truncated or altered weights file is refused, naming it; the stage cache then records the
  sha256 of every file it stores);
- the training's code files (``dvc.yaml``'s deps of ``train``) are the same at the job's commit as in
  this checkout (``git diff --quiet <commit> -- <files>``);
- this is the machine that ran the sweep (the caller's word: a job records no machine; run it where
  the sweep ran).

Prints one line per (job, task): stored, or why not. Exit 1 when any was refused.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnflow import stage_cache  # noqa: E402
from attnflow.io import read_json  # noqa: E402
from attnflow.paths import StudyPaths  # noqa: E402
from attnflow.sweep import PROVENANCE_FILE  # noqa: E402
from pipelines import _config, dvc_deps, study  # noqa: E402


def same_training_code(commit: str) -> bool:
    """Whether ``train``'s code files are the same at ``commit`` as in this working tree."""
    files = dvc_deps.stage_deps("train", [])
    done = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", commit, "--", *files], check=False)
    return done.returncode == 0


def damaged_training(paths: StudyPaths, task: str) -> str | None:
    """Why the finished training of ``task`` is not whole, in one line naming the file: its exported
    model does not load (a truncated or altered weights file, a damaged manifest), or its metrics
    or timing are not readable JSON; None when it is whole."""
    from attnflow.models import load_classifier

    checks = ((load_classifier, paths.model(task)), (read_json, paths.train_metrics(task)),
              (read_json, paths.train_timing(task)))  # fmt: skip
    for check, path in checks:
        try:
            check(path)
        except Exception as exc:  # whatever the loaders raise: the training is not stored
            first = (str(exc).splitlines() or [""])[0]
            return first if str(path) in first else f"{path}: does not load ({type(exc).__name__}: {first})"
    return None


def adopt(job: Path, cache: Path) -> list[tuple[str, str]]:
    """(task, what happened) for each task of one job folder."""
    provenance = read_json(job / PROVENANCE_FILE) if (job / PROVENANCE_FILE).is_file() else None
    if not provenance or not provenance.get("commit") or provenance.get("dirty"):
        return [("*", "refused: no provenance.json, or the job ran uncommitted code")]
    if not same_training_code(provenance["commit"]):
        return [
            (
                "*",
                f"refused: the training code at {provenance['commit'][:12]} differs from this checkout's (or is not known here)",
            )
        ]
    cfg = _config.load(job / "params.yaml")
    out = []
    here = Path.cwd()
    try:
        os.chdir(job)  # the job's paths are relative to its folder, as when it ran
        paths = StudyPaths.from_config(cfg.paths)
        for task in cfg.tasks:
            outputs = {"model": paths.model_dir(task), "timing": paths.train_timing(task)}
            if not all(p.exists() for p in outputs.values()) or not paths.train_metrics(task).is_file():
                out.append((task, "refused: the job did not finish this training"))
                continue
            broken = damaged_training(StudyPaths.from_config(cfg.paths, root=job), task)
            if broken:
                out.append((task, f"refused: {broken}"))
                continue
            key = study.train_key(cfg, task)
            record = {
                "commit": provenance["commit"],
                "task": task,
                "seed": cfg.seed,
                "adopted_from": str(job),
            }
            stage_cache.store(cache, key, outputs, record)
            out.append((task, f"stored as {key[:12]} (trained by {provenance['commit'][:12]})"))
    finally:
        os.chdir(here)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a sweep folder (multirun/<study>/<time>)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "train", help="the stage cache")
    args = parser.parse_args(argv)
    if not args.sweep.is_dir():
        parser.error(f"{args.sweep}: not a folder (a sweep folder: multirun/<study>/<time>)")
    jobs = sorted((p for p in args.sweep.iterdir() if (p / "params.yaml").is_file()), key=lambda p: p.name)
    if not jobs:
        parser.error(f"{args.sweep}: no job folder (with params.yaml) in it")
    refused = False
    for job in jobs:
        for task, what in adopt(job.resolve(), args.cache.resolve()):
            print(f"{job.name} {task}: {what}")
            refused |= what.startswith("refused")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
