"""Reliability round 5 (issue 57), committed results: a failing run never takes them with it.

A seed sweep whose every job failed once rewrote the committed ``reports/sweep/correlations.csv``
(406,835 bytes) and ``faithfulness.csv`` as empty files and said it "aggregated the others"; an
exception in the aggregate became a Hydra warning and the sweep exited 0; the report stage with
missing inputs exited 0, deleted 11 of 19 committed figures and dropped rows from ``headline.json``.
Now outputs are replaced only by the whole result of a successful run (written beside, swapped in at
the end); nothing to aggregate, or a missing input, ends the step in one line naming it, touching
nothing; every failing sweep exits non-zero.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from attnflow.io import ArtifactError
from attnflow.paths import StudyPaths
from attnflow.sweep import NothingToAggregate, stack_jobs

PATHS = {"raw": "data/raw", "prepared": "data/prepared", "models": "models", "capture": "outputs/capture",
         "explain": "outputs/explain", "attribute": "outputs/attribute", "reports": "reports"}  # fmt: skip
COMMITTED = {  # what an earlier, successful sweep left in reports/sweep/
    "correlations.csv": "task,method,layer,mean,seed\nagreement,flow,1,0.5,0\n",
    "faithfulness.csv": "task,method,metric,mean,seed\nagreement,flow,aopc,0.2,0\n",
    "jobs.json": '{"jobs": [], "failed": [], "seeds": [0]}\n',
}


def _job(sweep: Path, number: int, seed: int, *, mean: float | None = None, error: str | None = None) -> None:
    job = sweep / str(number)
    (job / ".hydra").mkdir(parents=True)
    (job / "params.yaml").write_text(yaml.safe_dump({"seed": seed}))
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}"]))
    if error:
        (job / "error.txt").write_text(f"Traceback ...\n{error}\n")
    if mean is not None:
        table = StudyPaths.from_config(PATHS, root=job).correlations("agreement")
        table.parent.mkdir(parents=True)
        pd.DataFrame([{"task": "agreement", "method": "flow", "layer": 1, "mean": mean}]).to_parquet(table)
        sentences = StudyPaths.from_config(PATHS, root=job).sentence_correlations("agreement")
        pd.DataFrame([{"task": "agreement", "sentence": 3, "rho": mean}]).to_parquet(sentences)


def _committed(root: Path) -> dict[str, bytes]:
    folder = root / "reports" / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in COMMITTED.items():
        (folder / name).write_text(text)
    return _snapshot(root)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / "reports").rglob("*"))
        if p.is_file()
    }


def _end(root: Path, sweep: Path, **options) -> SystemExit | None:
    """Run the sweep's end hook as Hydra would, from ``root``; the SystemExit it ends with, or None."""
    from pipelines.study import AggregateSeeds

    config = OmegaConf.create(
        {"study": "s", "tasks": ["agreement"], "paths": PATHS, "hydra": {"sweep": {"dir": str(sweep)}}}
    )
    try:
        AggregateSeeds(**options).on_multirun_end(config)
    except SystemExit as exc:
        return exc
    return None


def test_a_sweep_whose_every_job_failed_leaves_the_committed_tables_and_exits_in_one_line(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    before = _committed(tmp_path)
    sweep = tmp_path / "multirun"
    _job(sweep, 0, 0, error="ValueError: boom")
    _job(sweep, 1, 1, error="RuntimeError: out of memory")
    ended = _end(tmp_path, sweep)
    assert ended is not None and ended.code not in (0, None)
    line = str(ended.code)
    assert "\n" not in line and "none of the 2 job(s) finished" in line and "aggregated" not in line
    assert "job 0 (seed=0): ValueError: boom" in line and str(sweep) in line
    assert _snapshot(tmp_path) == before  # byte for byte: nothing emptied, nothing rewritten


def test_stack_jobs_with_nothing_finished_raises_and_writes_nothing(tmp_path):
    before = _committed(tmp_path)
    sweep = tmp_path / "multirun"
    _job(sweep, 0, 0, error="ValueError: boom")
    with pytest.raises(NothingToAggregate, match=r"none of the 1 job\(s\) finished"):
        stack_jobs(sweep, PATHS, ["agreement"], StudyPaths.from_config(PATHS, root=tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NothingToAggregate, match="no job folder"):
        stack_jobs(empty, PATHS, ["agreement"], StudyPaths.from_config(PATHS, root=tmp_path))
    assert _snapshot(tmp_path) == before


def test_a_sweep_where_some_jobs_failed_exits_non_zero_and_stacks_the_others_beside(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _committed(tmp_path)
    sweep = tmp_path / "multirun"
    _job(sweep, 0, 0, mean=0.25)
    _job(sweep, 1, 1, error="ValueError: boom")
    ended = _end(tmp_path, sweep)
    assert ended is not None and ended.code not in (0, None) and "\n" not in str(ended.code)
    assert "1 of 2 job(s) failed" in str(ended.code) and "left as it was" in str(ended.code)
    assert _snapshot(tmp_path) == before  # an incomplete sweep does not replace a complete one
    beside = sweep / "aggregate"
    assert pd.read_csv(beside / "correlations.csv")["mean"].tolist() == [0.25]
    assert json.loads((beside / "jobs.json").read_text())["seeds"] == [0]


def test_partial_true_publishes_the_finished_jobs_and_still_exits_non_zero(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _committed(tmp_path)
    sweep = tmp_path / "multirun"
    _job(sweep, 0, 0, mean=0.25)
    _job(sweep, 1, 1, error="ValueError: boom")
    ended = _end(tmp_path, sweep, partial=True)
    assert ended is not None and ended.code not in (0, None) and "aggregated the other 1" in str(ended.code)
    assert pd.read_csv(tmp_path / "reports" / "sweep" / "correlations.csv")["mean"].tolist() == [0.25]
    assert (
        tmp_path / "reports" / "sweep" / "faithfulness.csv"
    ).read_text() == ""  # no table: empty, readable


def test_a_sweep_whose_jobs_all_finished_replaces_the_tables_and_ends_quietly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _committed(tmp_path)
    sweep = tmp_path / "multirun"
    _job(sweep, 0, 0, mean=0.25)
    _job(sweep, 1, 1, mean=0.75)
    assert _end(tmp_path, sweep) is None
    assert pd.read_csv(tmp_path / "reports" / "sweep" / "correlations.csv")["mean"].tolist() == [0.25, 0.75]
    sentences = pd.read_parquet(tmp_path / "reports" / "sweep" / "sentences.parquet")
    assert sentences[["seed", "rho"]].values.tolist() == [[0, 0.25], [1, 0.75]]  # stacked with the rest
    assert not list(tmp_path.joinpath("reports", "sweep").glob(".*.tmp"))  # no temporary file left


def test_an_unforeseen_error_in_the_aggregate_is_an_exit_not_a_hydra_warning(tmp_path, monkeypatch):
    """Hydra turns an Exception raised by a callback into a warning and exits 0; SystemExit passes."""
    from hydra._internal.callbacks import Callbacks

    monkeypatch.chdir(tmp_path)
    before = _committed(tmp_path)
    sweep = tmp_path / "multirun"
    _job(sweep, 0, 0, mean=0.25)
    StudyPaths.from_config(PATHS, root=sweep / "0").correlations("agreement").write_bytes(b"PAR1 truncated")
    config = OmegaConf.create(
        {
            "study": "s",
            "tasks": ["agreement"],
            "paths": PATHS,
            "hydra": {"sweep": {"dir": str(sweep)}},
            "callbacks": {"aggregate": {"_target_": "pipelines.study.AggregateSeeds"}},
        }
    )
    callbacks = Callbacks(OmegaConf.create({"hydra": {"callbacks": config.callbacks}}))
    with pytest.raises(SystemExit) as ended:
        callbacks.on_multirun_end(config=config)
    assert "correlations.parquet" in str(ended.value.code) and "\n" not in str(ended.value.code)
    assert _snapshot(tmp_path) == before


def test_a_single_run_that_fails_exits_non_zero_with_its_error_recorded(tmp_path, monkeypatch):
    from pipelines import study

    monkeypatch.chdir(tmp_path)

    def boom(cfg):
        raise ValueError("boom\nsecond line")

    monkeypatch.setattr(study, "localize", boom)
    with pytest.raises(SystemExit) as ended:
        study.main.__wrapped__(OmegaConf.create({}))
    assert str(ended.value.code).startswith("error: the run failed (ValueError: boom)")
    assert "ValueError: boom" in (tmp_path / study.ERROR_FILE).read_text()
    monkeypatch.setattr(study, "_in_sweep", lambda: True)  # a sweep's job: recorded, the others run
    assert study.main.__wrapped__(OmegaConf.create({})) is None


# --- the report stage ------------------------------------------------------------------------------


def _study(root: Path) -> dict[str, bytes]:
    """Both tasks' stage outputs (the report tests' fixture), completed with the committed files of
    the roles it lacks, and a committed report: figures, headline.json, report.md."""
    import shutil

    from tests.unit.report.conftest import write_stage_outputs

    write_stage_outputs(root)
    for task in ("agreement", "sst2"):
        for name in ("train_timing.json", "faithfulness.parquet", "perturbation_curves.parquet",
                     "method_agreement.parquet", "method_cost.parquet"):  # fmt: skip
            shutil.copyfile(ROOT / "reports" / task / name, root / "reports" / task / name)
    figures = root / "reports" / "figures"
    figures.mkdir(parents=True)
    for name in ("maps_agreement_sample_0.png", "curves_sst2_blank_out.png", "heads_sst2.png"):
        (figures / name).write_bytes(b"\x89PNG committed " + name.encode())
    (root / "reports" / "headline.json").write_text('{"agreement": {"flow": 0.7}, "sst2": {"flow": 0.6}}\n')
    (root / "reports" / "report.md").write_text("# the committed report\n")
    return _snapshot(root)


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "lost",
    [
        "outputs/explain/sst2/maps.safetensors",
        "outputs/capture/agreement/samples.parquet",
        "reports/sst2/faithfulness.parquet",
        "reports/agreement/correlations.parquet",
    ],
)
def test_the_report_with_a_missing_input_refuses_in_one_line_and_touches_nothing(tmp_path, lost):
    from attnflow.report import build_report
    from attnflow.report.inputs import MissingInputs
    from tests.unit.report.conftest import study_paths

    _study(tmp_path)
    (tmp_path / lost).unlink()
    before = _snapshot(tmp_path)
    with pytest.raises(MissingInputs) as refused:
        build_report(tasks=["agreement", "sst2"], paths=study_paths(tmp_path), config={}, strict=True)
    assert str(refused.value).startswith(f"{tmp_path / lost}: report input not found")
    assert "\n" not in str(refused.value)
    assert _snapshot(tmp_path) == before


def test_an_optional_part_present_in_part_is_refused_by_name(tmp_path):
    from attnflow.report.inputs import check_inputs
    from tests.unit.report.conftest import study_paths

    _study(tmp_path)
    paths = study_paths(tmp_path)
    check_inputs(["agreement", "sst2"], paths)  # no generation study at all: fine
    paths.generation.mkdir(parents=True)
    (paths.generation / "shares.parquet").write_bytes(b"x")  # its tables without their maps
    with pytest.raises(ArtifactError, match=r"generation/faithfulness\.parquet: report input not found"):
        check_inputs(["agreement", "sst2"], paths)


def test_the_report_stage_refuses_before_it_opens_a_run_or_writes(tmp_path, monkeypatch):
    from pipelines import _config
    from pipelines import report as report_stage

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _study(tmp_path)
    (tmp_path / "reports" / "sst2" / "correlations.parquet").unlink()
    before = _snapshot(tmp_path)
    with pytest.raises(ArtifactError, match=r"^reports/sst2/correlations\.parquet: report input not found"):
        report_stage.run(_config.compose(["report.n_examples=1"]))
    assert _snapshot(tmp_path) == before and not (tmp_path / "mlflow.db").exists()


def _one_figure(ctx) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1])
    ctx.figure(fig, "curves_sst2_blank_out.png", "a curve")


def _fails(ctx) -> None:
    raise RuntimeError("a section fails after another drew its figure")


def test_a_report_that_fails_half_way_changes_no_figure_and_no_text(tmp_path, monkeypatch):
    from attnflow.report import build
    from tests.unit.report.conftest import study_paths

    before = _study(tmp_path)
    monkeypatch.setattr(build, "SECTIONS", (_one_figure, _fails))
    with pytest.raises(RuntimeError, match="a section fails"):
        build.build_report(tasks=["agreement", "sst2"], paths=study_paths(tmp_path), config={})
    assert _snapshot(tmp_path) == before  # the drawn figure waited beside, and is gone
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]


def test_a_whole_report_swaps_in_its_figures_and_then_drops_the_stale_ones(tmp_path, monkeypatch):
    from attnflow.report import build
    from tests.unit.report.conftest import study_paths

    _study(tmp_path)
    monkeypatch.setattr(build, "SECTIONS", (_one_figure,))
    report = build.build_report(
        tasks=["agreement", "sst2"], paths=study_paths(tmp_path), config={}, strict=True
    )
    figures = tmp_path / "reports" / "figures"
    assert sorted(p.name for p in figures.iterdir()) == ["curves_sst2_blank_out.png"]
    assert (figures / "curves_sst2_blank_out.png").read_bytes().startswith(b"\x89PNG\r\n")
    assert report.figures == [figures / "curves_sst2_blank_out.png"]
    assert "curves_sst2_blank_out.png" in (tmp_path / "reports" / "report.md").read_text()
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]


def test_the_report_entry_point_exits_non_zero_with_one_line(tmp_path, monkeypatch):
    from pipelines import _config, _stage
    from pipelines import report as report_stage

    monkeypatch.chdir(tmp_path)
    _study(tmp_path)
    (tmp_path / "outputs" / "explain" / "agreement" / "maps.safetensors").unlink()
    cfg = _config.compose(["tracking.enabled=false"])
    monkeypatch.setattr(_config, "load", lambda *a, **k: cfg)
    with pytest.raises(SystemExit) as ended:
        _stage.main_all(report_stage.run)
    line = str(ended.value.code)
    assert line.startswith("error: outputs/explain/agreement/maps.safetensors: report input not found")
    assert "\n" not in line


def test_write_together_leaves_every_target_as_it_was_when_one_cannot_be_written(tmp_path):
    from attnflow.io import write_together

    first, blocked = tmp_path / "a.csv", tmp_path / "file" / "b.csv"
    first.write_text("committed\n")
    (tmp_path / "file").write_text("a file where a folder would be")
    with pytest.raises(OSError):
        write_together({first: "new\n", blocked: "new\n"})
    assert first.read_text() == "committed\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "file"]  # no temporary left
