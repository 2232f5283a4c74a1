"""Stage ``correlate@TASK``: per-sample Spearman of every map with every importance, summarised."""

from __future__ import annotations

import pandas as pd
from omegaconf import DictConfig

from attnflow.attribution.samples import blank_switches
from attnflow.explanation_file import load_study_maps
from attnflow.io import load_aligned, load_ragged, write_json, write_parquet, write_text
from attnflow.metrics.tables import (
    CorrelationSettings,
    configured,
    correlation_frame,
    curves_frame,
    metrics_tree,
    switch_frame,
)
from pipelines import _config, _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.correlate, list(cfg.explain.methods)
    with _stage.stage_run(cfg, "correlate", task, inputs=[paths.maps(task), paths.importance(task)]) as mlrun:
        importance, ids = load_ragged(paths.importance(task), with_ids=True)
        maps = load_study_maps(
            paths.maps(task), ids, against=str(paths.importance(task))
        )  # joined on sample_id
        if missing := [m for m in methods if m not in maps]:
            raise ValueError(f"{paths.maps(task)}: no maps for {missing}; re-run the explain stage")
        settings = CorrelationSettings(opts.spearman, opts.undefined, dict(opts.include_cls))
        switched = {}
        if paths.switched_importance(task).is_file():  # blank-out under each attribution switch
            loaded = load_aligned(paths.switched_importance(task), ids, against=str(paths.importance(task)))
            flips = blank_switches(_config.to_dict(cfg.attribution))
            switched = {
                f"attribution.{name}": ("blank_out", scores, flips[name]["blank_positions"] == "all")
                for name, scores in loaded.items() if name in flips
            }  # fmt: skip
        common = dict(undefined=opts.undefined, seed=cfg.seed, task=task)
        table = pd.concat([
            correlation_frame(
                {m: maps[m] for m in methods}, importance, exclude=settings.exclude(list(importance)),
                method=opts.spearman, n_boot=opts.n_boot, ci=opts.ci,
                head_maps={m: maps[f"{m}_heads"] for m in methods if f"{m}_heads" in maps}, **common,
            ),
            switch_frame({m: maps[m] for m in methods}, importance, settings=settings, switched_importance=switched,
                         cls_blanked=cfg.attribution.blank_positions == "all", seed=cfg.seed, task=task),
        ], ignore_index=True)  # fmt: skip
        write_parquet(paths.correlations(task), table)
        write_json(paths.correlations_metrics(task), metrics_tree(table))
        for kind in importance:
            write_text(paths.curves(task) / f"{kind}.csv", curves_frame(table, kind).to_csv(index=False))
        cells = configured(table).itertuples()
        mlrun.log_metrics({f"corr/{c.importance}/{c.method}/L{c.layer}": c.mean for c in cells})
        mlrun.log_artifact(paths.correlations(task))


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.correlate TASK")
