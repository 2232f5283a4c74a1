"""Stage ``correlate@TASK``: per-sample Spearman of every map with every importance, summarised."""

from __future__ import annotations

import pandas as pd
from omegaconf import DictConfig

from attnflow.io import load_aligned, load_ragged, write_json, write_parquet, write_text
from attnflow.metrics.tables import (
    configured,
    correlation_frame,
    curves_frame,
    metrics_tree,
    sensitivity_frame,
)
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.correlate, list(cfg.explain.methods)
    with _stage.stage_run(cfg, "correlate", task, inputs=[paths.maps(task), paths.importance(task)]) as mlrun:
        importance, ids = load_ragged(paths.importance(task), with_ids=True)
        maps = load_aligned(paths.maps(task), ids, against=str(paths.importance(task)))  # joined on sample_id
        if missing := [m for m in methods if m not in maps]:
            raise ValueError(f"{paths.maps(task)}: no maps for {missing}; re-run the explain stage")
        exclude = {kind: () if opts.include_cls[kind] else (0,) for kind in importance}
        options = dict(undefined=opts.undefined, seed=cfg.seed, task=task)
        table = pd.concat([
            correlation_frame(
                {m: maps[m] for m in methods}, importance, exclude=exclude, method=opts.spearman, n_boot=opts.n_boot,
                ci=opts.ci, head_maps={m: maps[f"{m}_heads"] for m in methods if f"{m}_heads" in maps}, **options,
            ),
            sensitivity_frame({m: maps[m] for m in methods}, importance, **options),
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
