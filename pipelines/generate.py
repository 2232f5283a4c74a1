"""Stage ``generate``: rollout, flow, raw attention and Chefer's rule over the tokens a small LM
generates, under every causal option, with the first-token share and a deletion faithfulness check."""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.devices import resolve_device
from attnflow.generate import generation_study, save_generations
from attnflow.hf import load_model
from attnflow.io import write_json, write_parquet
from pipelines import _stage


def run(cfg: DictConfig) -> None:
    paths, opts = _stage.paths(cfg), cfg.generate
    with _stage.stage_run(cfg, "generate", inputs=[paths.language_model]) as mlrun:
        model, tokenizer = load_model(str(paths.language_model), device=resolve_device(cfg.trainer.device))
        study = generation_study(
            model, tokenizer, dict(opts.prompts), methods=list(opts.methods), sinks=list(opts.sinks),
            receptive_fields=list(opts.receptive_fields), max_new_tokens=opts.max_new_tokens, ks=list(opts.ks),
            n_random=opts.n_random, seed=cfg.seed,
        )  # fmt: skip
        write_parquet(paths.generation / "shares.parquet", study.shares)
        write_parquet(paths.generation / "faithfulness.parquet", study.faithfulness)
        for name, grid in study.explanations.items():
            save_generations(list(grid.values()), paths.generations / f"{name}.safetensors")
        summary = study.summary()  # means over prompts and tokens: DVC metrics and MLflow
        write_json(paths.generation / "summary.json", summary)
        mlrun.log_metrics(summary)


if __name__ == "__main__":
    _stage.main_all(run)
