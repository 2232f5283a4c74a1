"""Seed sweeps: stack the correlation tables of a sweep's jobs into one table, and say which failed.

A sweep (``python -m pipelines.study -m seed=0,1,2``) runs each job in its own folder
``<sweep>/<job number>/`` with its ``params.yaml`` and the same layout as ``dvc repro``. A job is
*finished* when every task's correlation table exists; a failed job left ``error.txt``. The stacked
table (one row per job and cell, columns of the correlation table plus ``seed`` and ``job``) goes to
``reports/sweep/correlations.csv``, the jobs' faithfulness tables to ``reports/sweep/faithfulness.csv``;
the report groups them by cell. Reading and writing are apart (:func:`gather_jobs`, :func:`write_jobs`):
the files are written beside their targets and swapped in together, and a sweep without a finished
job raises :class:`NothingToAggregate` before anything is written, so committed tables are never
replaced by less.

Provenance: each job writes ``provenance.json`` (:func:`code_state`: the commit, a dirty flag and a
digest of the code in ``src/``, ``pipelines/`` and ``conf/``) before its first stage; the stacked
tables carry the job's ``commit`` and ``jobs.json`` the whole record, so the report can name the code
behind every number and refuse to mix codes (:func:`mixed_code`).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from attnflow.io import json_text, read_json, read_parquet, write_together
from attnflow.paths import StudyPaths

__all__ = [
    "CODE_DIRS",
    "PROVENANCE_FILE",
    "NothingToAggregate",
    "SweepJobs",
    "aggregate_files",
    "changed_since",
    "code_state",
    "code_state_at",
    "failures",
    "gather_jobs",
    "mixed_code",
    "published_files",
    "stack_jobs",
    "write_jobs",
]

CODE_DIRS = ("src", "pipelines", "conf")  # the code a result depends on; docs, tests, reports are not
PROVENANCE_FILE = "provenance.json"  # in each job's folder
_JUNK = ("__pycache__", ".egg-info", ".pyc", ".so")  # build outputs, when git cannot list the files


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _code_files(root: Path, folder: str) -> list[str]:
    """The files of ``folder`` that make up the code: git's tracked and not-ignored untracked files
    (build outputs are ignored), else every file but obvious build outputs."""
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", folder)
    if listed is not None:
        names = {n for n in listed.split("\0") if n}
        return sorted(n for n in names if (root / n).is_file())  # a deleted tracked file is not code
    base = root / folder
    return sorted(
        p.relative_to(root).as_posix()
        for p in base.rglob("*")
        if p.is_file() and not any(j in part for part in p.parts for j in _JUNK)
    )


def code_state(root: str | Path, dirs: Sequence[str] = CODE_DIRS) -> dict[str, Any]:
    """Which code is at ``root``: ``commit`` (HEAD, or None outside git), ``dirty`` (files of
    ``dirs`` differ from HEAD, untracked ones included) and ``code``: per folder, the sha256 over its
    files' paths and bytes. Equal digests mean the same code, whatever the commit (a commit that
    changes only docs keeps them); a dirty tree still gets an exact digest.
    """
    root = Path(root)
    head = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *dirs)
    code = {}
    for folder in dirs:
        h = hashlib.sha256()
        for name in _code_files(root, folder):
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256((root / name).read_bytes()).digest())
        code[folder] = h.hexdigest()[:16]
    return {
        "commit": head.strip() if head else None,
        "dirty": bool(status.strip()) if status is not None else None,
        "code": code,
    }


def code_state_at(root: str | Path, commit: str, dirs: Sequence[str] = CODE_DIRS) -> dict[str, Any] | None:
    """:func:`code_state` of the tree of ``commit`` (read from git, the working tree untouched): the
    same digests a run of that commit recorded; None when git cannot read it. What a reader of the
    committed results compares sweep jobs with: the code that wrote the report, not the checkout's."""
    root = Path(root)
    full = _git(root, "rev-parse", "--verify", f"{commit}^{{commit}}")
    if full is None:
        return None
    code = {}
    for folder in dirs:
        listed = _git(root, "ls-tree", "-r", "-z", "--full-tree", full.strip(), "--", folder)
        if listed is None:
            return None
        entries = sorted((line.split("\t", 1)[1], line.split()[2]) for line in listed.split("\0") if line)
        h = hashlib.sha256()
        for name, blob in entries:
            done = subprocess.run(
                ["git", "-C", str(root), "cat-file", "blob", blob], capture_output=True, check=True
            )
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256(done.stdout).digest())
        code[folder] = h.hexdigest()[:16]
    return {"commit": full.strip(), "dirty": False, "code": code}


def changed_since(root: str | Path, commit: str, files: Sequence[str]) -> list[str] | None:
    """The paths among ``files`` whose content differs between ``commit`` and the working tree
    (``git diff --name-only COMMIT -- FILES``; folders cover the files under them); None when git
    cannot tell (no repository, an unknown commit). Empty: the code those files make up is the same."""
    if not commit or not files:
        return None if not commit else []
    out = _git(Path(root), "diff", "--name-only", commit.split("+")[0], "--", *files)
    return None if out is None else sorted(line for line in out.splitlines() if line)


def mixed_code(states: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """One line per code folder whose digest differs between the named runs (a run without a record
    counts as differing: its code is unknown); empty when every run ran the same code.

    >>> a = {"commit": "aaa", "dirty": False, "code": {"src": "1", "conf": "2"}}
    >>> b = {"commit": "bbb", "dirty": False, "code": {"src": "1", "conf": "3"}}
    >>> mixed_code({"seed 0": a, "job 1": b})
    ['conf/: seed 0 (aaa) differs from job 1 (bbb)']
    """
    if not states:
        return []
    names = list(states)
    unknown = [n for n in names if not states[n] or not states[n].get("code")]
    if unknown:
        return [f"{', '.join(unknown)}: no record of the code that ran (run before provenance was recorded)"]
    label = {n: _label(states[n]) for n in names}
    lines = []
    folders = sorted({f for n in names for f in states[n]["code"]})
    for folder in folders:
        first = names[0]
        others = [n for n in names[1:] if states[n]["code"].get(folder) != states[first]["code"].get(folder)]
        lines += [f"{folder}/: {first} ({label[first]}) differs from {n} ({label[n]})" for n in others]
    return lines


def _label(state: Mapping[str, Any]) -> str:
    commit = (state.get("commit") or "no commit")[:12]
    return f"{commit}+dirty" if state.get("dirty") else commit


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "failed (no message)"


def _accuracy(path: Path) -> dict[str, Any]:
    """A job's accuracies from its train_metrics.json: test, teacher, per attractor count, and the
    number of training items (a learning curve's x)."""
    if not path.is_file():
        return {}
    metrics = read_json(path)
    attractors = metrics.get("extra_eval", {}).get("attractors", {})
    return {
        "accuracy": metrics.get("accuracy"),
        "teacher_accuracy": (metrics.get("teacher") or {}).get("accuracy"),
        "accuracy_by_attractors": attractors.get("accuracy_by_attractors"),
        "n_train": metrics.get("n_train"),
    }


class NothingToAggregate(ValueError):
    """A sweep with no finished job (or no job at all): nothing is written; the message names the
    sweep folder and the jobs' errors in one line."""


@dataclass
class SweepJobs:
    """What :func:`gather_jobs` read from a sweep's folders: ``payload`` (the content of jobs.json),
    the finished jobs' correlation tables stacked (``table``) and their faithfulness tables (``faithfulness``)."""

    payload: dict[str, Any]
    table: pd.DataFrame
    faithfulness: pd.DataFrame
    sentences: pd.DataFrame | None = None  # per-sentence correlations, when the jobs wrote them

    @property
    def finished(self) -> int:
        return len(self.payload["jobs"]) - len(self.payload["failed"])


def gather_jobs(
    sweep_dir: Path,
    paths: Mapping[str, Any],
    tasks: Sequence[str],
    *,
    error_file: str = "error.txt",
    reuse_file: str = "reuse.json",
) -> SweepJobs:
    """Read every job of ``sweep_dir`` (see :func:`stack_jobs`); writes nothing. Raises
    :class:`NothingToAggregate` when the folder holds no job or no job finished."""
    import yaml

    sweep_dir = Path(sweep_dir)
    jobs = sorted(  # a job that failed before writing its params.yaml (a refused config) still counts
        (p for p in sweep_dir.iterdir() if (p / "params.yaml").is_file() or (p / error_file).is_file())
        if sweep_dir.is_dir()
        else (),
        key=lambda p: (len(p.name), p.name),
    )
    if not jobs:
        raise NothingToAggregate(
            f"{sweep_dir}: no job folder (with params.yaml or {error_file}) to aggregate"
        )
    records, tables, faithfulness, sentences = [], [], [], []
    for job in jobs:
        params_file = job / "params.yaml"
        params = yaml.safe_load(params_file.read_text(encoding="utf-8")) if params_file.is_file() else {}
        job_paths = StudyPaths.from_config(paths, root=job)
        overrides = job / ".hydra" / "overrides.yaml"
        given = yaml.safe_load(overrides.read_text()) if overrides.is_file() else []
        seed = params.get("seed", next((o.split("=", 1)[1] for o in given if o.startswith("seed=")), None))
        provenance = read_json(job / PROVENANCE_FILE) if (job / PROVENANCE_FILE).is_file() else None
        commit = _label(provenance) if provenance else None
        record = {
            "job": job.name,
            "seed": int(seed) if seed is not None else None,
            "overrides": " ".join(given),
            "recipe": " ".join(
                o for o in given if not o.startswith("seed=")
            ),  # what the job varies besides the seed
            "provenance": provenance,  # the code that ran the job (None: not recorded)
            "training": read_json(job / reuse_file) if (job / reuse_file).is_file() else None,
        }
        done = all(job_paths.correlations(t).is_file() for t in tasks)
        if (job / error_file).is_file():
            record.update(status="failed", error=_last_line(job / error_file))
        elif not done:
            record.update(status="incomplete", error="no correlation table for every task")
        else:
            record["status"] = "finished"
            record["accuracy"] = {t: _accuracy(job_paths.train_metrics(t)) for t in tasks}
            tables += [
                read_parquet(job_paths.correlations(t)).assign(
                    seed=record["seed"], job=job.name, overrides=record["recipe"], commit=commit
                )
                for t in tasks
            ]
            faithfulness += [
                read_parquet(job_paths.faithfulness(t)).assign(
                    seed=record["seed"], job=job.name, task=t, commit=commit
                )
                for t in tasks
                if job_paths.faithfulness(t).is_file()
            ]
            sentences += [
                read_parquet(job_paths.sentence_correlations(t)).assign(seed=record["seed"], job=job.name)
                for t in tasks
                if job_paths.sentence_correlations(t).is_file()
            ]
        records.append(record)
    payload = {
        "jobs": records,
        "failed": [r for r in records if r["status"] != "finished"],
        "seeds": sorted(r["seed"] for r in records if r["status"] == "finished"),
    }
    if not tables:
        raise NothingToAggregate(
            f"{sweep_dir}: none of the {len(records)} job(s) finished, nothing to aggregate: {failures(payload)}"
        )
    faith = pd.concat(faithfulness, ignore_index=True) if faithfulness else pd.DataFrame()
    stacked_sentences = pd.concat(sentences, ignore_index=True) if sentences else None
    return SweepJobs(payload, pd.concat(tables, ignore_index=True), faith, stacked_sentences)


def failures(payload: Mapping[str, Any], *, shown: int = 3) -> str:
    """The failed jobs of a jobs.json payload in one line: ``job 2 (seed=2): ValueError: boom; ...``."""
    failed = payload["failed"]
    named = [f"job {j['job']} ({j['overrides'] or 'no overrides'}): {j['error']}" for j in failed[:shown]]
    more = [f"and {len(failed) - shown} more"] if len(failed) > shown else []
    return "; ".join(named + more)


def aggregate_files(folder: Path) -> dict[str, Path]:
    """The files of an aggregate in ``folder``: the stacked correlation and faithfulness tables,
    the jobs' record and the stacked per-sentence correlations (the names :class:`StudyPaths` gives
    them below ``reports/<name>/``)."""
    return {
        "table": folder / "correlations.csv",
        "faithfulness": folder / "faithfulness.csv",
        "jobs": folder / "jobs.json",
        "sentences": folder / "sentences.parquet",
    }


def published_files(out: StudyPaths, name: str = "sweep") -> dict[str, Path]:
    """The files of the aggregate ``name`` below ``reports/`` (``reports/<name>/``), keyed as
    :func:`aggregate_files` keys them."""
    return {
        "table": out.sweep_table(name),
        "faithfulness": out.sweep_faithfulness(name),
        "jobs": out.sweep_jobs_file(name),
        "sentences": out.sweep_sentences(name),
    }


def write_jobs(gathered: SweepJobs, files: Mapping[str, Path]) -> None:
    """Write a gathered sweep to ``files`` (:func:`aggregate_files`): every file beside its target
    first, swapped in together, so a failure leaves the earlier aggregate whole. A sweep without
    per-sentence tables removes an earlier sweep's, once the others are in (it would not match them)."""
    texts: dict[Path, str | bytes] = {
        Path(files["table"]): gathered.table.to_csv(index=False),
        Path(files["faithfulness"]): _csv(gathered.faithfulness),
        Path(files["jobs"]): json_text(gathered.payload),
    }
    if gathered.sentences is not None:
        texts[Path(files["sentences"])] = gathered.sentences.to_parquet(index=False)
    write_together(texts)
    if gathered.sentences is None:
        Path(files["sentences"]).unlink(missing_ok=True)


def _csv(frame: pd.DataFrame) -> str:
    """A table as CSV; an empty file for a table without columns (pandas would write one blank
    line, which no CSV reader accepts; the report reads an empty file as no table)."""
    return frame.to_csv(index=False) if len(frame.columns) else ""


def stack_jobs(
    sweep_dir: Path,
    paths: Mapping[str, Any],
    tasks: Sequence[str],
    out: StudyPaths,
    *,
    error_file: str = "error.txt",
    reuse_file: str = "reuse.json",
    name: str = "sweep",
) -> dict[str, Any]:
    """Write ``out.sweep_table(name)`` (stacked tables of the finished jobs, with their ``seed``,
    ``job`` and the job's ``overrides`` other than the seed) and ``out.sweep_jobs_file(name)`` (every
    job: seed, overrides, recipe (the overrides but the seed), provenance, ``training`` (the job's
    ``reuse_file``: per task, whether its training was taken from the stage cache and which commit
    trained it), status, error, and each task's test / teacher / per-attractor accuracy);
    return the latter's content. A sweep with no finished job raises :class:`NothingToAggregate`
    and leaves the files as they were; the three files are swapped in together."""
    files = published_files(out, name)  # a bad name: refused first
    gathered = gather_jobs(sweep_dir, paths, tasks, error_file=error_file, reuse_file=reuse_file)
    write_jobs(gathered, files)
    return gathered.payload
