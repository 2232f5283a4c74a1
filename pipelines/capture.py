"""Stage ``capture@TASK``: run the trained model on the study samples; keep attentions and outputs."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.capture import accuracy, capture_split, resolve_device
from attnflow.io import read_parquet, save_ragged, write_parquet
from attnflow.models import load_classifier
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts = _stage.paths(cfg), cfg.task[task].capture
    split = get_task(task).split_file(paths.prepared_data(task), opts.split)
    with _stage.stage_run(cfg, "capture", task, inputs=[split, paths.model(task)]) as mlrun:
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        samples, attentions = capture_split(
            model,
            encoder,
            read_parquet(split),
            n_samples=opts.n_samples,
            seed=cfg.seed,
            batch_size=cfg.capture.batch_size,
            max_length=cfg.capture.max_length,
            dtype=cfg.capture.dtype,
            device=device,
        )
        write_parquet(paths.samples(task), samples)
        ids = samples["sample_id"].to_numpy()
        save_ragged(
            paths.attentions(task), {"attn": attentions}, ids=ids, metadata={"axes": "layer,head,query,key"}
        )
        metrics = {
            "n_samples": len(samples),
            "mean_length": float(samples["length"].mean()),
            "accuracy": accuracy(samples),
        }
        mlrun.log_metrics(metrics)


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.capture TASK")
