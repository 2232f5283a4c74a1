"""Stage ``capture@TASK``: run the trained model on the study samples; keep attentions and outputs,
and what the class-specific explainers need (attention gradients, LRP relevance) when asked for."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.capture import capture_split, class_relevance
from attnflow.devices import resolve_device
from attnflow.io import read_parquet, save_ragged, write_parquet
from attnflow.method_inputs import needed_inputs
from attnflow.metrics.accuracy import labelled_accuracy
from attnflow.models import load_classifier
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, samples_cfg = _stage.paths(cfg), cfg.capture, cfg.task[task].capture
    split = get_task(task).split_file(paths.prepared_data(task), samples_cfg.split)
    with _stage.stage_run(cfg, "capture", task, inputs=[split, paths.model(task)]) as mlrun:
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        common = dict(batch_size=opts.batch_size, device=device)
        samples, attentions = capture_split(
            model, encoder, read_parquet(split), n_samples=samples_cfg.n_samples, seed=cfg.seed,
            max_length=opts.max_length, dtype=opts.dtype, **common,
        )  # fmt: skip
        write_parquet(paths.samples(task), samples)
        ids = samples["sample_id"].to_numpy()
        save_ragged(
            paths.attentions(task), {"attn": attentions}, ids=ids, metadata={"axes": "layer,head,query,key"}
        )
        if needs := needed_inputs(cfg.explain.methods):  # the class-specific explainers' inputs
            extra = class_relevance(
                model, samples["input_ids"].tolist(), samples["label"].to_numpy(), needs=needs,
                target=opts.target, pad_id=encoder.pad_id, progress=True, **common,
            )  # fmt: skip
            save_ragged(paths.relevance(task), extra, ids=ids, metadata={"target": str(opts.target)})
        n, length = len(samples), float(samples["length"].mean())
        mlrun.log_metrics(
            {
                "n_samples": n,
                "mean_length": length,
                "accuracy": labelled_accuracy(samples["label"], samples["pred"]),
            }
        )


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.capture TASK")
