"""Stage ``faithfulness@TASK``: perturbation tests of every method and agreement between methods; a task
whose rows rule is not "cls" has its task-row methods scored at the CLS row too (``<method>_at_cls``)."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.attribution.faithfulness_rows import faithfulness_both_rows
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
    rows = cfg.task[task].rows  # not "cls": the task-row methods are read at the CLS row too
    inputs = [paths.samples(task), paths.maps(task), paths.importance(task), paths.model(task)]
    inputs += [paths.attentions(task)] if rows != "cls" else []  # the CLS-row maps' source
    with _stage.stage_run(cfg, "faithfulness", task, inputs=inputs) as mlrun:
        samples = read_parquet(paths.samples(task))
        ids, against = samples["sample_id"], str(paths.samples(task))  # joined on sample_id
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        result, cost = faithfulness_both_rows(
            model, encoder, samples["input_ids"].tolist(), load_study_maps(paths.maps(task), ids, against=against),
            load_aligned(paths.importance(task), ids, against=against), methods=methods, sample_ids=ids,
            task_rows=rows, keep_positions=get_task(task).special_positions,
            load_attentions=lambda: load_aligned(paths.attentions(task), ids, against=against)["attn"],
            residual=cfg.explain.residual, heads=cfg.explain.heads,
            importance_options=study_options(_config.to_dict(cfg.attribution), cfg.task[task], encoder),
            n_samples=cfg.task[task].faithfulness.n_samples, layers=list(opts.layers), seed=cfg.seed,
            top_k=opts.top_k, n_boot=opts.n_boot, batch_size=opts.batch_size, device=device, progress=True,
            replace_id=None if opts.removal == "delete" else getattr(encoder, f"{opts.removal}_id"),
        )  # fmt: skip
        tables = {paths.faithfulness(task): result.scores, paths.perturbation_curves(task): result.curves,
                  paths.method_agreement(task): result.agreement, paths.method_cost(task): cost}  # fmt: skip
        for path, table in tables.items():
            write_parquet(path, table.assign(task=task))
        # the last layer's cells and the references, for `dvc metrics`
        write_json(paths.faithfulness_metrics(task), faithfulness_tree(result.scores))
        for protocol in result.curves["protocol"].unique():
            wide = perturbation_curves_frame(result.curves, protocol)
            write_text(paths.faithfulness_curves(task) / f"{protocol}.csv", wide.to_csv(index=False))
        costs = {f"cost/{c.method}/vs_gradient": c.vs_gradient for c in cost.itertuples()}
        mlrun.log_metrics({**result.metric_cells(), **costs})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.faithfulness TASK")
