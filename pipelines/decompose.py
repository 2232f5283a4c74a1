"""Stage ``decompose@TASK``: the norm- and decomposition-based methods (attention norm, GlobEnc,
ALTI, value zeroing, DecompX) in the analogues of Tables 1-3: each method's row at every layer for
the study's samples, correlated per layer with blank-out and input gradients as the correlate stage
correlates raw attention, rollout and flow; the methods not defined for the task's model are named
with why."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.compare.layers import SKIPPED, TABLE, decomposition_maps, decomposition_table
from attnflow.devices import resolve_device
from attnflow.io import load_aligned, read_parquet, write_json, write_parquet
from attnflow.metrics.tables import CorrelationSettings, metrics_tree
from attnflow.models import load_classifier
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts = _stage.paths(cfg), cfg.correlate
    with _stage.stage_run(
        cfg, "decompose", task, inputs=[paths.samples(task), paths.importance(task)]
    ) as mlrun:
        samples = read_parquet(paths.samples(task))
        importance = load_aligned(
            paths.importance(task), samples["sample_id"], against=str(paths.samples(task))
        )
        model, encoder = load_classifier(paths.model(task), device=resolve_device(cfg.trainer.device))
        maps, skipped = decomposition_maps(model, samples["input_ids"].tolist(), rows=cfg.task[task].rows,
                                           target=cfg.capture.target, pad_id=encoder.pad_id,
                                           residual=cfg.explain.residual, heads=cfg.explain.heads)  # fmt: skip
        table = decomposition_table(maps, importance, task=task, n_boot=opts.n_boot, ci=opts.ci, seed=cfg.seed,
                                    settings=CorrelationSettings(opts.spearman, opts.undefined, dict(opts.include_cls)),
                                    cls_blanked=cfg.attribution.blank_positions == "all")  # fmt: skip
        write_parquet(paths.task_reports(task) / TABLE, table.assign(task=task))
        tree = metrics_tree(table) if len(table) else {}
        write_json(paths.task_reports(task) / SKIPPED, {"skipped": skipped, "correlations": tree})
        mlrun.log_metrics({"corr": tree})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.decompose TASK")
