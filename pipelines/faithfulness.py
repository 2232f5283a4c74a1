"""Stage ``faithfulness@TASK``: perturbation tests of every method and agreement between methods."""

from __future__ import annotations

import pandas as pd
from omegaconf import DictConfig

from attnflow.attribution.faithfulness import faithfulness_study
from attnflow.devices import resolve_device
from attnflow.io import align_ids, load_ragged, read_parquet, write_json, write_parquet
from attnflow.metrics.tables import faithfulness_tree
from attnflow.models import load_classifier
from attnflow.tasks import get_task
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.faithfulness, list(cfg.explain.methods)
    inputs = [paths.samples(task), paths.maps(task), paths.importance(task), paths.model(task)]
    with _stage.stage_run(cfg, "faithfulness", task, inputs=inputs) as mlrun:
        samples = read_parquet(paths.samples(task))
        joined = {}  # maps and importance joined to the samples on sample_id
        for path in (paths.maps(task), paths.importance(task)):
            arrays, ids = load_ragged(path, with_ids=True)
            order = align_ids(ids, samples["sample_id"], what=str(path), against=str(paths.samples(task)))
            joined[path] = {k: [v[i] for i in order] for k, v in arrays.items()}
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        result = faithfulness_study(
            model, samples["input_ids"].tolist(), {m: joined[paths.maps(task)][m] for m in methods},
            joined[paths.importance(task)], sample_ids=samples["sample_id"], n_samples=cfg.task[task].faithfulness.n_samples,
            layers=list(opts.layers), seed=cfg.seed, top_k=opts.top_k, n_boot=opts.n_boot, pad_id=encoder.pad_id,
            keep_positions=get_task(task).special_positions, batch_size=opts.batch_size, device=device, progress=True,
            replace_id=None if opts.removal == "delete" else getattr(encoder, f"{opts.removal}_id"),
        )  # fmt: skip
        for path, table in ((paths.faithfulness(task), result.scores), (paths.perturbation_curves(task), result.curves),
                            (paths.method_agreement(task), result.agreement)):  # fmt: skip
            write_parquet(path, table.assign(task=task))
        tree = faithfulness_tree(result.scores)  # the last layer and the references
        write_json(paths.faithfulness_metrics(task), tree)
        cells = result.scores.itertuples()  # every value a metric: faithfulness/<metric>/<method>[/L<k>]
        mlrun.log_metrics(
            {
                f"faithfulness/{c.metric}/{c.method}" + ("" if pd.isna(c.layer) else f"/L{c.layer}"): c.mean
                for c in cells
            }
        )


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.faithfulness TASK")
