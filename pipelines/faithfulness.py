"""Stage ``faithfulness@TASK``: perturbation tests of every method and agreement between methods."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.attribution.comparators import compare_on_subset
from attnflow.attribution.faithfulness import faithfulness_study, faithfulness_subset
from attnflow.attribution.samples import study_options
from attnflow.devices import resolve_device
from attnflow.explanation_file import load_study_maps
from attnflow.io import load_aligned, read_parquet, write_json, write_parquet, write_text
from attnflow.metrics.tables import faithfulness_tree, perturbation_curves_frame
from attnflow.models import load_classifier
from attnflow.tasks import get_task
from pipelines import _config, _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.faithfulness, list(cfg.explain.methods)
    inputs = [paths.samples(task), paths.maps(task), paths.importance(task), paths.model(task)]
    with _stage.stage_run(cfg, "faithfulness", task, inputs=inputs) as mlrun:
        samples = read_parquet(paths.samples(task))
        ids, against = samples["sample_id"], str(paths.samples(task))  # joined on sample_id
        maps = load_study_maps(paths.maps(task), ids, against=against)
        importance = load_aligned(paths.importance(task), ids, against=against)
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        n_samples, keep = cfg.task[task].faithfulness.n_samples, get_task(task).special_positions
        subset = [
            samples["input_ids"].iloc[i] for i in faithfulness_subset(len(samples), n_samples, cfg.seed)
        ]
        extra, cost = compare_on_subset(
            model, encoder, subset, methods=methods, task_rows=cfg.task[task].rows, keep_positions=keep,
            importance_options=study_options(_config.to_dict(cfg.attribution), cfg.task[task], encoder), device=device,
        )  # fmt: skip
        result = faithfulness_study(
            model, samples["input_ids"].tolist(), {m: maps[m] for m in methods}, importance, sample_ids=ids,
            n_samples=n_samples, subset_scores=extra,
            layers=list(opts.layers), seed=cfg.seed, top_k=opts.top_k, n_boot=opts.n_boot, pad_id=encoder.pad_id,
            keep_positions=keep, batch_size=opts.batch_size, device=device, progress=True,
            replace_id=None if opts.removal == "delete" else getattr(encoder, f"{opts.removal}_id"),
        )  # fmt: skip
        outputs = {paths.faithfulness(task): result.scores, paths.perturbation_curves(task): result.curves}
        for path, table in {**outputs, paths.method_agreement(task): result.agreement}.items():
            write_parquet(path, table.assign(task=task))
        write_json(
            paths.faithfulness_metrics(task), faithfulness_tree(result.scores)
        )  # last layer, references
        write_parquet(paths.method_cost(task), cost.assign(task=task))
        for protocol in result.curves["protocol"].unique():
            wide = perturbation_curves_frame(result.curves, protocol)
            write_text(paths.faithfulness_curves(task) / f"{protocol}.csv", wide.to_csv(index=False))
        mlrun.log_metrics(result.metric_cells())
        mlrun.log_metrics({f"cost/{c.method}/vs_gradient": c.vs_gradient for c in cost.itertuples()})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.faithfulness TASK")
