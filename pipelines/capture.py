"""Stage ``capture@TASK``: run the trained model on the study samples; keep attentions and outputs,
and what the class-specific explainers need (attention gradients, LRP relevance) when asked for."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.capture import capture_study
from attnflow.devices import resolve_device
from attnflow.io import read_parquet, save_ragged, write_parquet
from attnflow.method_inputs import needed_inputs
from attnflow.models import load_classifier
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, samples_cfg = _stage.paths(cfg), cfg.capture, cfg.task[task].capture
    split = get_task(task).split_file(paths.prepared_data(task), samples_cfg.split)
    with _stage.stage_run(cfg, "capture", task, inputs=[split, paths.model(task)]) as mlrun:
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        got = capture_study(
            model, encoder, read_parquet(split), n_samples=samples_cfg.n_samples, seed=cfg.seed,
            select=samples_cfg.select,
            needs=needed_inputs(cfg.explain.methods), target=opts.target, batch_size=opts.batch_size,
            max_length=opts.max_length, dtype=opts.dtype, device=device,
        )  # fmt: skip
        ids = got.samples["sample_id"].to_numpy()
        write_parquet(paths.samples(task), got.samples)
        save_ragged(
            paths.attentions(task),
            {"attn": got.attentions},
            ids=ids,
            metadata={"axes": "layer,head,query,key"},
        )
        if got.extra:  # attention gradients and LRP relevance of the class explained
            save_ragged(paths.relevance(task), got.extra, ids=ids, metadata={"target": str(opts.target)})
        mlrun.log_metrics(got.metrics())


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.capture TASK")
