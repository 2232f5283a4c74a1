"""Stage ``pronouns``: the paper's Figure 4 as an analogue on the packaged causal LM. Which of two
gendered antecedents (minimal pairs, swapped) do raw attention, rollout and flow (plain and with the
decoder corrections), AttnLRP and integrated gradients point to at the position that predicts the
pronoun; does the model prefer the right pronoun, and which antecedent does its choice rest on?"""

from __future__ import annotations

from omegaconf import DictConfig

from attnflow.devices import resolve_device
from attnflow.hf import load_model
from attnflow.pronouns import pronoun_sentences, pronoun_study, save_pronoun_study
from pipelines import _stage


def run(cfg: DictConfig) -> None:
    paths, opts = _stage.paths(cfg), cfg.pronouns
    with _stage.stage_run(cfg, "pronouns", inputs=[paths.language_model]) as mlrun:
        model, tokenizer = load_model(str(paths.language_model), device=resolve_device(cfg.trainer.device))
        items = pronoun_sentences(opts.n_sentences, seed=cfg.seed)  # n/2 minimal pairs: n must be even
        study = pronoun_study(
            model, tokenizer, items, methods=list(opts.methods), prefix=opts.prefix, ig_steps=opts.ig_steps,
            ig_batch_size=opts.batch_size, batch_size=opts.batch_size, progress=True,
        )  # fmt: skip
        summary = save_pronoun_study(
            study, paths.pronouns, paths.pronoun_maps, reduce=opts.reduce, n_boot=opts.n_boot, seed=cfg.seed
        )
        mlrun.log_metrics(summary)  # accuracy, causal reference, each method's shares (plain, corrected)


if __name__ == "__main__":
    _stage.main_all(run)
