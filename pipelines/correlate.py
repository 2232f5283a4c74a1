"""Stage ``correlate@TASK``: per-sample Spearman of every map with every importance, summarised."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from omegaconf import DictConfig

from attnflow import tracking
from attnflow.io import load_ragged, write_json, write_text
from attnflow.metrics import correlation_table
from pipelines import _config, _stage

STATS = ("mean", "std", "ci_low", "ci_high", "n", "n_undefined")


def nest(rows: list[dict]) -> dict:
    """Rows to ``{importance: {explainer: {"L<k>": {mean, std, ...}}}}`` (the DVC metrics layout)."""
    out: dict = {}
    for r in rows:
        cell = out.setdefault(r["importance"], {}).setdefault(r["explainer"], {})
        cell[f"L{r['layer']}"] = {k: r[k] for k in STATS}
    return out


def curves_csv(rows: list[dict], importance: str, explainers: list[str]) -> str:
    """Per-layer mean correlation, one column per explainer (a DVC plot)."""
    table = {(r["explainer"], r["layer"]): r["mean"] for r in rows if r["importance"] == importance}
    layers = sorted({layer for _, layer in table})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["layer", *explainers])
    for layer in layers:
        writer.writerow([layer, *(round(table[(e, layer)], 6) for e in explainers)])
    return buf.getvalue()


# The hidden choices of the correlation itself, re-scored without bootstrap for the report:
# the Spearman formula, and whether CLS is in the ranks (authors: out for blank-out, in for gradients).
CLS_VARIANTS = {"authors": None, "all in": False, "all out": True}


def sensitivity(maps: dict, importance: dict, *, undefined: str, seed: int) -> dict:
    """``{"spearman=<m>, CLS <variant>": nested means}`` for every variant of the two choices."""
    out = {}
    for method in ("average", "dense_noties"):
        for label, drop in CLS_VARIANTS.items():
            exclude = {
                k: ((0,) if k == "blank_out" else ()) if drop is None else ((0,) if drop else ())
                for k in importance
            }
            rows = correlation_table(
                maps, importance, exclude=exclude, method=method, undefined=undefined, n_boot=0, seed=seed
            )
            out[f"spearman={method}, CLS {label}"] = nest(rows)
    return out


def run(cfg: DictConfig, task: str) -> None:
    opts = cfg.correlate
    explained = Path(cfg.paths.outputs) / "explain" / task / "maps.safetensors"
    importance_file = Path(cfg.paths.outputs) / "attribute" / task / "importance.safetensors"
    reports = Path(cfg.paths.reports) / task
    with tracking.stage_run(
        _config.to_dict(cfg), stage="correlate", dataset=task, inputs=[explained, importance_file]
    ) as mlrun:
        maps = load_ragged(explained)
        importance = load_ragged(importance_file)
        if not all(maps.get(m) for m in cfg.explain.methods) or not all(importance.values()):
            raise ValueError(
                f"{explained} / {importance_file}: no samples to correlate "
                f"(check capture.{task}.n_samples and the {cfg.capture[task].split} split)"
            )
        exclude = {kind: () if opts.include_cls[kind] else (0,) for kind in importance}
        main = {m: maps[m] for m in cfg.explain.methods}
        per_head = {
            f"{m}@h{h}": [a[:, h] for a in maps[f"{m}_heads"]]
            for m in cfg.explain.methods
            if f"{m}_heads" in maps
            for h in range(maps[f"{m}_heads"][0].shape[1])
        }
        options = dict(
            exclude=exclude, method=opts.spearman, undefined=opts.undefined, ci=opts.ci, seed=cfg.seed
        )
        rows = correlation_table(main, importance, n_boot=opts.n_boot, **options)
        head_rows = correlation_table(per_head, importance, n_boot=0, **options) if per_head else []
        write_json(reports / "correlations.json", nest(rows))
        write_json(reports / "correlations_per_head.json", nest(head_rows))  # {} without per-head maps
        write_json(
            reports / "sensitivity.json",
            sensitivity(main, importance, undefined=opts.undefined, seed=cfg.seed),
        )
        for kind in importance:
            write_text(reports / "curves" / f"{kind}.csv", curves_csv(rows, kind, list(main)))
        mlrun.log_metrics({f"corr/{r['importance']}/{r['explainer']}/L{r['layer']}": r["mean"] for r in rows})
        mlrun.log_artifact(reports / "correlations.json")


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.correlate {agreement|sst2}")
