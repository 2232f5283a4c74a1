"""Stage ``report``: one report over all tasks: Tables 1-3 beside the paper, curves, maps, accuracy."""

from __future__ import annotations

import pandas as pd
from omegaconf import DictConfig

from attnflow.report import build_report
from attnflow.report.inputs import check_inputs, input_paths
from attnflow.report.stage_times import with_this_run
from attnflow.sweep import code_state
from pipelines import _config, _stage, stage_times


def run(cfg: DictConfig) -> None:
    paths = _stage.paths(cfg)
    check_inputs(list(cfg.tasks), paths)  # one line naming what is missing, before any run or file
    inputs = [p for task in cfg.tasks for p in input_paths(task, paths).values() if p.is_file()]
    inputs += [paths.sweep] if paths.sweep.is_file() else []
    code = code_state(_config.ROOT)
    with _stage.stage_run(cfg, "report", inputs=inputs) as mlrun:
        report = build_report(
            tasks=list(cfg.tasks),
            paths=paths,
            config=_config.to_dict(cfg),
            code=code,
            strict=True,
            stages=stage_runs(cfg, code),
        )
        mlrun.log_metrics(report.cells)  # "<task>/corr/<importance>/<method>/L<k>" (step = layer), ...
        # the parent has the cells from the task stages; it gets the deltas to the paper and the report
        mlrun.log_metrics({k: v for k, v in report.cells.items() if "/delta/" in k}, parent=True)
        for path in report.files:
            if path.suffix in (".md", ".html"):
                mlrun.log_artifact(path, parent=True)


def stage_runs(cfg: DictConfig, code: dict) -> pd.DataFrame | None:
    """The stages' runs of this config with whether their code is this checkout's, this report's
    run in place of the last; None untracked."""
    if not cfg.tracking.enabled:
        return None
    try:
        return with_this_run(stage_times.stage_code(cfg), "report", code)
    except ValueError:  # no experiment yet: nothing ran tracked
        return None


if __name__ == "__main__":
    _stage.main_all(run)
