"""Stage ``explain@TASK``: every method's explanation row at every layer (and per head)."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.explain.samples import explain_samples
from attnflow.io import load_ragged, save_ragged
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts = _stage.paths(cfg), cfg.explain
    with _stage.stage_run(cfg, "explain", task, inputs=[paths.attentions(task)]) as mlrun:
        captured, ids = load_ragged(paths.attentions(task), with_ids=True)
        maps = explain_samples(
            captured["attn"],
            methods=list(opts.methods),
            residual=opts.residual,
            heads=opts.heads,
            rows=cfg.task[task].rows,
            per_head=opts.per_head,
            progress=True,
        )
        save_ragged(paths.maps(task), maps, ids=ids)
        mlrun.log_metrics({"n_samples": len(ids)})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.explain TASK")
