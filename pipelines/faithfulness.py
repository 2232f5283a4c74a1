"""Stage ``faithfulness@TASK``: perturbation tests of every method and agreement between methods."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.attribution.faithfulness import faithfulness_study
from attnflow.devices import resolve_device
from attnflow.io import load_aligned, read_parquet, write_json, write_parquet
from attnflow.metrics.tables import faithfulness_tree
from attnflow.models import load_classifier
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.faithfulness, list(cfg.explain.methods)
    inputs = [paths.samples(task), paths.maps(task), paths.importance(task), paths.model(task)]
    with _stage.stage_run(cfg, "faithfulness", task, inputs=inputs) as mlrun:
        samples = read_parquet(paths.samples(task))
        ids, against = samples["sample_id"], str(paths.samples(task))  # joined on sample_id
        maps, importance = (
            load_aligned(p, ids, against=against) for p in (paths.maps(task), paths.importance(task))
        )
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        result = faithfulness_study(
            model, samples["input_ids"].tolist(), {m: maps[m] for m in methods}, importance, sample_ids=ids,
            n_samples=cfg.task[task].faithfulness.n_samples,
            layers=list(opts.layers), seed=cfg.seed, top_k=opts.top_k, n_boot=opts.n_boot, pad_id=encoder.pad_id,
            keep_positions=get_task(task).special_positions, batch_size=opts.batch_size, device=device, progress=True,
            replace_id=None if opts.removal == "delete" else getattr(encoder, f"{opts.removal}_id"),
        )  # fmt: skip
        outputs = {paths.faithfulness(task): result.scores, paths.perturbation_curves(task): result.curves}
        for path, table in {**outputs, paths.method_agreement(task): result.agreement}.items():
            write_parquet(path, table.assign(task=task))
        write_json(
            paths.faithfulness_metrics(task), faithfulness_tree(result.scores)
        )  # last layer, references
        mlrun.log_metrics(result.metric_cells())


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.faithfulness TASK")
