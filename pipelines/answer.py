"""Stage ``answer``: a generated answer attributed to its prompt, side by side with FlashTrace, on
the packaged causal LM. Items with known sources (arithmetic, two-fact questions, a fact retrieved
from SST-2's training sentences), the items the model answers right scored by RISE, MAS and
recovery@10 %, timed, with bootstrap intervals and each tool's paired difference to the reference."""

from __future__ import annotations

import pandas as pd
from omegaconf import DictConfig

from attnflow.answer import build_items, compare_tools, run_meta, save_answer_study
from attnflow.devices import resolve_device
from attnflow.hf import load_model
from pipelines import _stage


def run(cfg: DictConfig) -> None:
    paths, opts = _stage.paths(cfg), cfg.answer
    train = paths.prepared_data("sst2") / "train.parquet"  # the retrieval task's filler sentences
    with _stage.stage_run(cfg, "answer", inputs=[paths.language_model, train]) as mlrun:
        device = resolve_device(cfg.trainer.device)
        model, tokenizer = load_model(str(paths.language_model), device=device)
        filler = (
            pd.read_parquet(train, columns=["text"])["text"].tolist() if "retrieval" in opts.tasks else []
        )
        items = build_items(list(opts.tasks), opts.n_items, tokenizer=tokenizer, filler=filler,
                            lengths=list(opts.lengths), seed=cfg.seed)  # fmt: skip
        rows, kept = compare_tools(model, tokenizer, items, list(opts.methods), device=device,
                                   ig_steps=opts.ig_steps, full_curve=opts.full_curve, steps=opts.steps)  # fmt: skip
        meta = run_meta(device, model="SmolLM2-135M-Instruct", full_curve=opts.full_curve, steps=opts.steps,
                        reference=opts.reference)  # fmt: skip
        metrics = save_answer_study(rows, kept, paths.answer, reference=opts.reference, n_boot=opts.n_boot,
                                    seed=cfg.seed, meta=meta)  # fmt: skip
        mlrun.log_metrics(metrics)


if __name__ == "__main__":
    _stage.main_all(run)
