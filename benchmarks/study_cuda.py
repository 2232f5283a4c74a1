"""The whole study (every stage of ``dvc repro``) on a CUDA machine, each stage timed, against the CPU times.

    # on the GPU machine (the carried wheels on PYTHONPATH, see benchmarks/device_stage.sh):
    python3 benchmarks/study_cuda.py --out $OUT --mirror /root/stash/mirror --commit <sha>
    # here, no GPU: the per-stage table of CPU seconds (reports/stage_times.csv), GPU seconds, speed-up
    python benchmarks/study_cuda.py --compare path/to/study_cuda.csv
    # a plumbing check on the CPU (tiny run; its times mean nothing):
    python benchmarks/study_cuda.py --out /tmp/o --allow-cpu --set task.agreement.train.train_subset=500 ...

What runs: the default study config (conf/, as ``python -m pipelines.compose`` composes it) with only
where-it-runs keys changed: ``tracking.enabled=false`` and ``data.mirrors=[--mirror]``; ``--set`` adds
Hydra overrides (none for the real run). As ``pipelines/study.py`` does, params.yaml is written into a
fresh work folder (``--work``) and each stage module's ``run`` is called there, in dvc.yaml's order:
download, prepare, train, capture, explain, attribute, correlate, faithfulness (each for every task),
then convert_lm, generate, pronouns, report. ``trainer=auto`` puts training (bf16-mixed) and the
models of capture / attribute / faithfulness / generate / pronouns (``trainer.device=auto``) on the
GPU; the flow solver and the other numpy maps run on the machine's CPU cores.

Timing: the wall seconds of ``run(cfg, task)``, between two ``torch.cuda.synchronize()``; the CPU
times (reports/stage_times.csv) are the ``wall_time_s`` that each stage's MLflow run logged, which
also spans the stage's body only (no interpreter start or imports), plus the MLflow logging of that
run. One process runs every stage (``dvc repro`` starts one per stage), so the global torch settings
a stage changes (Lightning's ``deterministic=True`` turns on ``torch.use_deterministic_algorithms``)
are put back after it; only the CUDA context start (about a second) is paid once, by the first
stage that touches the GPU. A failed stage is recorded with its error, and the later stages of its
task are skipped; the other task, the LM stages and (if its inputs exist) report still run.

Output, written as each stage ends (a timeout keeps what finished): ``<out>/study_cuda.csv``
(stage, task, seconds, status, peak GPU memory, error) and ``<out>/study_cuda.json`` (device,
torch / CUDA / Python versions, commit, overrides, the rows); at the end ``<out>/reports.tgz``, the
work folder's reports/ (metrics, tables, report.md) to compare the results with the CPU run.

MLflow: ``attnflow.tracking.runs`` imports mlflow when it is imported, even with tracking off, and
the GPU image has no mlflow. With ``tracking.enabled=false`` no MLflow function is ever called
(``stage_run`` yields a run whose methods do nothing, and no Lightning MLflow logger is made), so
when ``import mlflow`` fails this script registers a stand-in module (:func:`mlflow_stand_in`): it
provides the two names imported at module level, ``mlflow.entities.Metric`` and ``Param``, and
raises on any use. Real mlflow (mlflow-skinny and about 20 dependencies) would add about 30 MB to
carry and only its import time to the run.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import importlib
import importlib.machinery
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
import traceback
import types
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK_STAGES = ("download", "prepare", "train", "capture", "explain", "attribute", "correlate", "faithfulness")
LM_STAGES = ("convert_lm", "generate", "pronouns")
STUDY_STAGES = (*TASK_STAGES, *LM_STAGES, "report")
TRAINING = ("train",)  # the stages the comparison totals apart
RESULTS_CSV = "study_cuda.csv"
RESULTS_JSON = "study_cuda.json"
FIELDS = ("stage", "task", "seconds", "status", "peak_gpu_gib", "error")
CPU_TIMES = ROOT / "reports" / "stage_times.csv"
CPU_MACHINE = "2 cores, the last `dvc repro` (MLflow on)"
GIB = 1024**3


class _MlflowEntity:
    """``mlflow.entities.Metric`` / ``Param`` of the stand-in: making one raises (tracking is off)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{type(self).__name__}: MLflow is not installed here; tracking.enabled=false")


def mlflow_stand_in() -> bool:
    """Register a stand-in ``mlflow`` (and ``mlflow.entities``) when the real one cannot be imported.

    Returns True when the stand-in was registered. It holds ``mlflow.entities.Metric`` and ``Param``
    (the names imported at module level; making one raises); any other name raises AttributeError,
    so ``hasattr`` probes (``inspect``, libraries) see nothing. Each module has a ``__spec__``, so
    ``importlib.util.find_spec`` answers; neither has package metadata, so ``importlib.metadata``
    (Lightning, transformers) calls mlflow absent.
    """
    try:
        import mlflow  # noqa: F401
    except ImportError:
        pass
    else:
        return False

    def missing(attr: str, module: str) -> None:
        raise AttributeError(
            f"module {module!r} (stand-in for MLflow: tracking is off) has no attribute {attr!r}"
        )

    modules = {}
    for name in ("mlflow", "mlflow.entities"):
        module = types.ModuleType(name, "Stand-in for MLflow (benchmarks/study_cuda.py): tracking is off.")
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=name == "mlflow")
        module.__getattr__ = lambda attr, name=name: missing(attr, name)  # type: ignore[method-assign]
        modules[name] = sys.modules[name] = module
    modules["mlflow"].entities = modules["mlflow.entities"]  # type: ignore[attr-defined]
    for entity in ("Metric", "Param"):
        setattr(modules["mlflow.entities"], entity, type(entity, (_MlflowEntity,), {}))
    return True


def _git_commit(given: str | None) -> str | None:
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None  # the device gets the working tree without .git: pass --commit
    return out.stdout.strip()


def _sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextlib.contextmanager
def _torch_state() -> Iterator[None]:
    """Put back the global torch settings a stage changes (each stage has its own process under DVC)."""
    import torch

    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    cudnn = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn


def _device() -> dict[str, object]:
    import torch

    info: dict[str, object] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info |= {
            "device": props.name,
            "gpu_gib": round(props.total_memory / GIB, 1),
            "bf16": torch.cuda.is_bf16_supported(),
        }
    else:
        info |= {"device": f"cpu ({platform.processor() or platform.machine()})"}
    return info


class Recorder:
    """Rows of stage times, appended to the csv and rewritten into the json as each stage ends."""

    def __init__(self, out: Path, meta: dict[str, object]) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.csv, self.json, self.meta, self.rows = out / RESULTS_CSV, out / RESULTS_JSON, meta, []
        with self.csv.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerow(FIELDS)
        self._dump()

    def add(self, row: dict[str, object]) -> None:
        self.rows.append(row)
        with self.csv.open("a", newline="", encoding="utf-8") as f:
            csv.writer(f).writerow([row.get(k, "") for k in FIELDS])
        self._dump()
        print(
            f"[study_cuda] {row['stage']}@{row['task'] or 'all'}: {row['status']} {row['seconds']} s",
            flush=True,
        )

    def finish(self) -> None:
        self.meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._dump()

    def _dump(self) -> None:
        tmp = self.json.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.meta, "rows": self.rows}, indent=1), encoding="utf-8")
        tmp.replace(self.json)


def _timed(stage: str, task: str | None, call) -> dict[str, object]:
    import torch

    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    row: dict[str, object] = {"stage": stage, "task": task or "", "status": "ok", "error": ""}
    _sync()
    start = time.perf_counter()
    try:
        with _torch_state():
            call()
        _sync()
    except BaseException as exc:  # recorded; Ctrl-C / SIGTERM still stop the run below
        row["status"] = "failed"
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        traceback.print_exc()
        if not isinstance(exc, Exception):
            row["seconds"] = round(time.perf_counter() - start, 2)
            raise
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2) if on_gpu else ""
    return row


def run_study(args: argparse.Namespace) -> int:
    """Compose the config, write params.yaml into the work folder, run and time every stage there."""
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        sys.exit(
            "study_cuda: no CUDA device (torch.cuda.is_available() is False); --allow-cpu for a plumbing check"
        )
    # trainer.deterministic=true on CUDA: cuBLAS needs a fixed workspace, set before its first call
    # (Lightning sets the same value when it finds none; here the first GPU stage is not Lightning's)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    stand_in = mlflow_stand_in()
    sys.path.insert(0, str(ROOT))  # pipelines/ is not installed
    from pipelines import _config

    mirror = Path(args.mirror).resolve()
    overrides = ["tracking.enabled=false", f"data.mirrors=[{mirror}]", *args.set]
    cfg = _config.compose(overrides)
    tasks = list(args.tasks or cfg.tasks)
    work = Path(args.work).resolve()
    if work.exists() and any(work.iterdir()):
        sys.exit(f"study_cuda: {work} already holds files; choose a new --work folder")
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # every path of conf/paths is relative: the outputs land here
    _config.write(cfg, Path("params.yaml"))
    from attnflow.sweep import code_state

    meta = {
        "commit": _git_commit(args.commit),
        "code": code_state(ROOT)["code"],  # the tree's src/ pipelines/ conf/ (attnflow runs from its wheel)
        "overrides": overrides,
        "tasks": tasks,
        "mlflow_stand_in": stand_in,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **_device(),
    }
    print(f"[study_cuda] {json.dumps(meta)}", flush=True)
    recorder = Recorder(Path(args.out).resolve(), meta)
    wanted = set(args.stages or STUDY_STAGES)
    # (stage, task, group): a failed stage skips the later stages of its group (a task, or the LM's)
    jobs = [(s, t, t) for s in TASK_STAGES for t in tasks] + [(s, None, "lm") for s in LM_STAGES]
    failed: set[str] = set()
    for stage, task, group in [*jobs, ("report", None, None)]:
        if stage not in wanted:
            continue
        if group in failed:
            skipped = {"seconds": "", "status": "skipped", "error": "an earlier stage failed"}
            recorder.add({"stage": stage, "task": task or "", **skipped})
            continue
        module = importlib.import_module(f"pipelines.{stage}")
        call = functools.partial(module.run, cfg, task) if task else functools.partial(module.run, cfg)
        row = _timed(stage, task, call)
        recorder.add(row)
        if row["status"] != "ok" and group is not None:
            failed.add(group)
    recorder.finish()
    _pack_reports(work / str(cfg.paths.reports), Path(args.out).resolve() / "reports.tgz")
    return 1 if any(r["status"] != "ok" for r in recorder.rows) else 0


def _pack_reports(reports: Path, into: Path, limit: int = 8 * 1024**2) -> None:
    """The work folder's reports/ (small files only), to check the GPU results against the CPU ones."""
    if not reports.is_dir():
        return
    with tarfile.open(into, "w:gz") as tar:
        for path in sorted(reports.rglob("*")):
            if path.is_file() and path.stat().st_size <= limit:
                tar.add(path, arcname=str(path.relative_to(reports.parent)))


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def compare(results: Path, cpu_times: Path = CPU_TIMES) -> str:
    """The per-stage markdown table: CPU seconds, GPU seconds, speed-up; totals for training and the
    rest (docs/performance.md shows it: ``python benchmarks/tables.py``)."""
    cpu = {(r["stage"], r["task"]): (float(r["seconds"]), r.get("commit", "")) for r in _read_rows(cpu_times)}
    gpu_rows = _read_rows(results)
    meta_path = results.with_name(RESULTS_JSON)
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    cpu_commits = sorted({commit for _, commit in cpu.values() if commit})
    lines = [
        f"GPU: {meta.get('device', '?')} with {meta.get('cpu_count', '?')} CPU cores, torch "
        f"{meta.get('torch', '?')}, CUDA {meta.get('cuda', '?')}, commit {str(meta.get('commit'))[:12]} "
        f"(`{results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}`). CPU: {CPU_MACHINE}, "
        f"commit {', '.join(cpu_commits) or '?'} (`reports/stage_times.csv`).",
        "",
    ]
    extra = [o for o in meta.get("overrides", []) if not o.startswith(("tracking.", "data.mirrors"))]
    if extra:  # a shortened run: its times are no speed-up of the study
        lines += [f"**Not the default study config** ({' '.join(extra)}): the times are not comparable.", ""]
    lines += [
        "| stage | task | CPU s | GPU s | speed-up | peak GPU GiB | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    totals: dict[str, list[float]] = {"training": [0.0, 0.0], "non-training": [0.0, 0.0]}
    for row in gpu_rows:
        c = cpu.get((row["stage"], row["task"]), (None, ""))[0]
        ok = row["status"] == "ok" and row["seconds"] != ""
        g = float(row["seconds"]) if ok else None
        note = "" if ok else f"{row['status']}: {row['error']}"[:80]
        speed = f"{c / g:.1f}x" if (c is not None and g) else "-"
        lines.append(
            f"| {row['stage']} | {row['task'] or '-'} | {'-' if c is None else f'{c:.1f}'} | "
            f"{'-' if g is None else f'{g:.1f}'} | {speed} | {row.get('peak_gpu_gib') or '-'} | {note} |"
        )
        if c is not None and g is not None:
            group = totals["training" if row["stage"] in TRAINING else "non-training"]
            group[0] += c
            group[1] += g
    totals["all"] = [sum(v[0] for v in totals.values()), sum(v[1] for v in totals.values())]
    lines.append("")
    for name, (c, g) in totals.items():
        lines.append(f"- {name}: CPU {c:.1f} s, GPU {g:.1f} s, speed-up {c / g if g else float('nan'):.1f}x")
    missing = sorted(set(cpu) - {(r["stage"], r["task"]) for r in gpu_rows})
    if missing:
        lines.append("- not run on the GPU: " + ", ".join(f"{s}@{t or 'all'}" for s, t in missing))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for study_cuda.csv / .json / reports.tgz (the device's $OUT)")
    parser.add_argument(
        "--work", default="/tmp/attnflow-study-cuda", help="a new folder: params.yaml and every output"
    )
    parser.add_argument(
        "--mirror", default=str(ROOT.parent / "shared" / "data"), help="the data mirror folder"
    )
    parser.add_argument("--commit", help="the commit that runs (the device's copy has no .git)")
    parser.add_argument("--tasks", nargs="+", help="default: the config's tasks")
    parser.add_argument("--stages", nargs="+", choices=STUDY_STAGES, help="default: all of them")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a Hydra override (repeatable)"
    )
    parser.add_argument("--allow-cpu", action="store_true", help="run without CUDA (plumbing check)")
    parser.add_argument(
        "--compare", type=Path, metavar="CSV", help="print the table for this study_cuda.csv and exit"
    )
    parser.add_argument("--cpu-times", type=Path, default=CPU_TIMES)
    args = parser.parse_args()
    if args.compare:
        print(compare(args.compare, args.cpu_times))
        return 0
    if not args.out:
        parser.error("--out is required (or --compare CSV)")
    return run_study(args)


if __name__ == "__main__":
    sys.exit(main())
