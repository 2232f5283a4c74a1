"""Stage ``report``: one report over all tasks: Tables 1-3 beside the paper, curves, maps, accuracy."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.report import build_report
from attnflow.report.inputs import input_paths
from pipelines import _config


def run(cfg: DictConfig) -> None:
    reports, outputs = Path(cfg.paths.reports), Path(cfg.paths.outputs)
    inputs = [p for task in cfg.tasks for p in input_paths(task, reports, outputs).values() if p.is_file()]
    config = _config.to_dict(cfg)
    with tracking.stage_run(config, stage="report", inputs=inputs) as mlrun:
        report = build_report(
            tasks=list(cfg.tasks),
            reports=reports,
            outputs=outputs,
            config=config,
            examples=list(cfg.report.examples),
            n_examples=cfg.report.n_examples,
            prepared=cfg.paths.prepared,  # only to say where an example that was not captured is
        )
        mlrun.log_metrics(report.cells)  # "<task>/corr/<importance>/<explainer>/L<k>", ...
        for path in report.files:
            mlrun.log_artifact(path, artifact_path="figures" if path in report.figures else None)


def main() -> None:
    run(_config.load())


if __name__ == "__main__":
    main()
