"""Stage ``explain@TASK``: every method's explanation row at every layer (and per head)."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.explain.samples import explain_samples
from attnflow.io import align_ids, load_ragged, save_ragged
from attnflow.method_inputs import needed_inputs
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.explain, list(cfg.explain.methods)
    extra_file = [paths.relevance(task)] if needed_inputs(methods) else []
    with _stage.stage_run(cfg, "explain", task, inputs=[paths.attentions(task), *extra_file]) as mlrun:
        captured, ids = load_ragged(paths.attentions(task), with_ids=True)
        extra = {}
        if extra_file:  # attention gradients / LRP relevance, joined on sample_id
            relevance, extra_ids = load_ragged(extra_file[0], with_ids=True)
            order = align_ids(extra_ids, ids, what=str(extra_file[0]), against=str(paths.attentions(task)))
            extra = {k: [relevance[k][i] for i in order] for k in needed_inputs(methods)}
        maps = explain_samples(
            captured["attn"], methods=methods, residual=opts.residual, heads=opts.heads,
            rows=cfg.task[task].rows, per_head=opts.per_head, extra=extra, cls_self=opts.cls_self, progress=True,
        )  # fmt: skip
        save_ragged(paths.maps(task), maps, ids=ids)
        mlrun.log_metrics({"n_samples": len(ids)})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.explain TASK")
