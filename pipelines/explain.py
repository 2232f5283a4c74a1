"""Stage ``explain@TASK``: every method's explanation row at every layer (and per head)."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.data.subsets import seeded_subset
from attnflow.explain.samples import explain_samples
from attnflow.explanation_file import save_study_maps
from attnflow.io import load_aligned, load_ragged
from attnflow.methods import needed_inputs, resolve
from pipelines import _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, opts, methods = _stage.paths(cfg), cfg.explain, list(cfg.explain.methods)
    extra_file = [paths.relevance(task)] if needed_inputs(methods) else []
    with _stage.stage_run(cfg, "explain", task, inputs=[paths.attentions(task), *extra_file]) as mlrun:
        captured, ids = load_ragged(paths.attentions(task), with_ids=True)
        # attention gradients / LRP relevance for the class-specific methods, joined on sample_id
        extra = load_aligned(extra_file[0], ids, against=str(paths.attentions(task))) if extra_file else {}
        common = dict(
            methods=resolve(methods),
            residual=opts.residual,
            heads=opts.heads,
            rows=cfg.task[task].rows,
            progress=True,
        )
        maps = explain_samples(captured["attn"], extra=extra, cls_self=opts.cls_self, **common)
        save_study_maps(paths.maps(task), maps, ids)
        chosen = (
            seeded_subset(len(ids), opts.per_head_samples, cfg.seed, what="explain.per_head_samples")
            if opts.per_head
            else []
        )
        if len(chosen):  # Appendix A.1's per-head maps, of a seeded subset: their own file and ids
            heads = explain_samples([captured["attn"][i] for i in chosen], heads_only=True, **common)
            save_study_maps(paths.head_maps(task), heads, ids[chosen])
        else:  # none asked for: no stale file of an earlier run for correlate to read
            paths.head_maps(task).unlink(missing_ok=True)
        mlrun.log_metrics({"n_samples": len(ids), "n_per_head_samples": len(chosen)})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.explain TASK")
