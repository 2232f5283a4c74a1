"""Stage ``correlate@TASK``: per-sample Spearman of every map with every importance, summarised."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.attribution.samples import switched_blank_out
from attnflow.explanation_file import load_head_maps, load_study_maps
from attnflow.io import align_ids, load_ragged, write_json, write_parquet, write_text
from attnflow.metrics.tables import (
    CorrelationSettings,
    configured,
    curves_frame,
    metrics_tree,
    sentence_frame,
    study_frame,
)
from pipelines import _config, _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.correlate, list(cfg.explain.methods)
    with _stage.stage_run(cfg, "correlate", task, inputs=[paths.maps(task), paths.importance(task)]) as mlrun:
        importance, ids = load_ragged(paths.importance(task), with_ids=True)
        against = str(paths.importance(task))  # joined on sample_id
        maps = load_study_maps(paths.maps(task), ids, against=against)
        if missing := [m for m in methods if m not in maps]:
            raise ValueError(f"{paths.maps(task)}: no maps for {missing}; re-run the explain stage")
        heads = load_head_maps(paths.head_maps(task), ids, importance, against=against)  # of a subset
        switched, switch_samples = {}, None
        if (path := paths.switched_importance(task)).is_file():  # blank-out under each attribution switch
            loaded, own = load_ragged(path, with_ids=True)  # of a seeded subset: attribution.switch_samples
            switch_samples = align_ids(ids, own, what=against, against=str(path), subset=True)
            switched = switched_blank_out(loaded, _config.to_dict(cfg.attribution))
        settings = CorrelationSettings(opts.spearman, opts.undefined, dict(opts.include_cls))
        table = study_frame(
            maps, importance, methods=methods, task=task, switched_importance=switched, switch_samples=switch_samples,
            settings=settings,
            cls_blanked=cfg.attribution.blank_positions == "all", n_boot=opts.n_boot, ci=opts.ci, seed=cfg.seed,
            heads=heads,
        )  # fmt: skip
        write_parquet(paths.correlations(task), table)
        sentences = sentence_frame(
            maps, importance, methods=methods, task=task, settings=settings, sample_ids=ids
        )
        write_parquet(paths.sentence_correlations(task), sentences)
        write_json(paths.correlations_metrics(task), metrics_tree(table))
        for kind in importance:
            write_text(paths.curves(task) / f"{kind}.csv", curves_frame(table, kind).to_csv(index=False))
        cells = configured(table).itertuples()
        mlrun.log_metrics({f"corr/{c.importance}/{c.method}/L{c.layer}": c.mean for c in cells})
        mlrun.log_artifact(paths.correlations(task))


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.correlate TASK")
