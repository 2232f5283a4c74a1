"""Which code produced each table: the commit of this run and of every sweep job, and the rule that
never pools seeds whose code differs in ``src/``, ``pipelines/`` or ``conf/``: such jobs are left
out of every seed table and named in the report (``report.allow_mixed_code`` pools them anyway).

This run's code is the checkout the report stage runs in: ``dvc repro`` re-runs every stage whose
declared code changed, so after it the task stages' outputs come from that code. A sweep job's code
is the ``provenance.json`` it wrote when it started (:func:`attnflow.sweep.code_state`). A job may
take its training from the sweep's stage cache (a training of the same code files, data, params and
machine, see ``pipelines/study.py``); the section names those trainings and the commit that ran them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnflow.sweep import CODE_DIRS, mixed_code

from ..context import Context, get
from ..document import Heading, Paragraph, Table
from ..stage_times import SAME_CODE
from ..tables import Grid

__all__ = ["left_out", "pooled_conflicts", "reused_trainings", "section", "stage_blocks"]

MAIN = "this run"


def _label(state: Mapping[str, Any] | None) -> str:
    if not state or not state.get("code"):
        return "not recorded"
    commit = (state.get("commit") or "no commit")[:12]
    return f"{commit} (uncommitted changes)" if state.get("dirty") else commit


def _finished(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in jobs if j.get("status") == "finished"]


def _seed(name: str) -> int | None:
    """The seed in a seed_runs name, "sweep job 3 (seed 2)" -> 2."""
    tail = name.rsplit("(seed ", 1)[-1].rstrip(")")
    return int(tail) if tail.lstrip("-").isdigit() else None


def seed_runs(ctx: Context) -> dict[str, Mapping[str, Any] | None]:
    """This run and every finished job of the seed sweep, by name, with the code each ran."""
    runs: dict[str, Mapping[str, Any] | None] = {f"{MAIN} (seed {ctx.config.get('seed')})": ctx.code}
    for job in _finished(ctx.sweep_jobs):
        runs[f"sweep job {job['job']} (seed {job.get('seed')})"] = job.get("provenance")
    return runs


def left_out(
    code: Mapping[str, Any] | None, jobs: list[dict[str, Any]], *, allow: bool
) -> dict[int, list[str]]:
    """Seed -> why, for every finished sweep job whose code differs from this run's (or is not
    recorded); empty when `allow` (report.allow_mixed_code) or when this run's code is unknown."""
    if code is None or allow:
        return {}
    main = "this run"
    out = {}
    for job in _finished(jobs):
        lines = mixed_code(
            {main: code, f"sweep job {job['job']} (seed {job.get('seed')})": job.get("provenance")}
        )
        if lines:
            out[int(job.get("seed"))] = lines
    return out


def pooled_conflicts(ctx: Context) -> list[str]:
    """The code differences between this run and the jobs pooled anyway (report.allow_mixed_code)."""
    if ctx.code is None or not get(ctx.config, "report.allow_mixed_code"):
        return []
    return mixed_code(seed_runs(ctx))


def reused_trainings(jobs: list[dict[str, Any]]) -> list[str]:
    """One line per finished job that took a training from the stage cache: its tasks and the commit
    that trained each ("sweep job 0 (seed 1): agreement, sst2 trained by abc123def456")."""
    lines = []
    for job in _finished(jobs):
        taken = {
            t: r for t, r in (job.get("training") or {}).items() if isinstance(r, dict) and r.get("reused")
        }
        by = {}
        for task, record in taken.items():
            by.setdefault((record.get("trained_by") or "an unrecorded commit")[:12], []).append(task)
        parts = [f"{', '.join(tasks)} trained by {commit}" for commit, tasks in by.items()]
        if parts:
            lines.append(f"sweep job {job['job']} (seed {job.get('seed')}): {'; '.join(parts)}")
    return lines


def stage_blocks(stages: Any, head: str) -> list[Any]:
    """The stages behind this run's outputs: the commit each ran at and whether its declared code
    files are this checkout's (``code`` of :func:`attnflow.report.stage_times.with_code`), and one
    sentence saying whether a single commit stands behind every number."""
    rows = [[r.stage, r.task or "once", r.commit or "not recorded", r.code] for r in stages.itertuples()]
    other = [f"{r.stage}@{r.task or 'once'}" for r in stages.itertuples() if r.code != SAME_CODE]
    text = (
        f"Every stage of this run has the code of {head}: a stage that ran at an earlier commit declares "
        "code files that are byte-identical in this checkout (what `dvc status` checks as well)."
        if not other
        else f"**Stages whose declared code differs from this checkout ({head}):** {', '.join(other)}."
    )
    grid = Grid(header=["stage", "task", "ran at", "its code in this checkout"], rows=rows,
                caption="The stage runs behind this run's outputs")  # fmt: skip
    return [Paragraph(text), Table(grid)]


def section(ctx: Context) -> None:
    ctx.add(Heading("Provenance", 2))
    rows = [["Tables 1-3 and every per-task section", MAIN, _label(ctx.code)]]
    rows += [
        [
            "Seeds (left out: other code)" if _seed(name) in ctx.left_out else "Seeds (pooled)",
            name,
            _label(state),
        ]
        for name, state in seed_runs(ctx).items()
        if MAIN not in name
    ]
    rows += [
        ["Recipes (side by side)", f"recipe job {j['job']} ({j.get('recipe') or 'defaults'})", _label(j.get("provenance"))]
        for j in _finished(ctx.recipe_jobs)
    ]  # fmt: skip
    ctx.add(
        Paragraph(
            f"The code behind each table: the commit that ran it; runs compared by a digest of {', '.join(f'{d}/' for d in CODE_DIRS)}."
        ),
        Table(Grid(header=["table", "run", "commit"], rows=rows, caption="Code behind each table")),
    )
    if ctx.stages is not None and not ctx.stages.empty:
        ctx.add(*stage_blocks(ctx.stages, _label(ctx.code)))
    if reused := reused_trainings(ctx.sweep_jobs):
        ctx.add(
            Paragraph(
                "Trainings taken from the sweep's stage cache (a run of the same training code files, "
                "data, params and machine; the job ran every later stage): " + "; ".join(reused) + "."
            )
        )
    if ctx.left_out:
        why = "; ".join(line for lines in ctx.left_out.values() for line in lines)
        ctx.add(
            Paragraph(
                f"**Seeds {', '.join(map(str, sorted(ctx.left_out)))} are left out of every seed table:** they "
                f"ran other code than this run ({why}). Re-run them with this code (python -m pipelines.study "
                "-m seed=1,2) or set report.allow_mixed_code=true to pool them anyway."
            )
        )
    if ctx.code is None:
        return
    pooled = pooled_conflicts(ctx)
    if pooled:
        ctx.add(
            Paragraph(
                "**Mixed code, reported because report.allow_mixed_code is set:** " + "; ".join(pooled) + "."
            )
        )
    recipes = {f"recipe job {j['job']}": j.get("provenance") for j in _finished(ctx.recipe_jobs)}
    if recipes and (other := mixed_code({MAIN: ctx.code, **recipes})):
        ctx.add(Paragraph("The recipe comparison ran other code than this run: " + "; ".join(other) + "."))
