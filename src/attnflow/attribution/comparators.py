"""The rankings the faithfulness table compares attention methods with, and what each costs.

Per sample, one score per token (T_i,) of the predicted class's logit z_c:

    input_x_gradient      Σ_h e_th ∂z_c/∂e_th                        one forward + one backward
    integrated_gradients  Σ_h (e_th − e'_th) ∫₀¹ ∂z_c(e' + α(e − e'))/∂e_th dα   captum, n_steps points
    attnlrp               AttnLRP input relevance (attnflow.attnlrp)   one forward + one backward per batch
    attention_norm, globenc, alti, value_zeroing, decompx
                          the norm- and decomposition-based methods (attnflow.methods) at the [CLS]
                          row of the last layer, through `attnflow.hf.explain_batch` on the Hugging
                          Face model inside the study's classifier (`HFClassifier.hf`)

e are the word embeddings; the IG baseline e' replaces every token but the kept positions (CLS,
SEP / EOS) by padding. AttnLRP has rules for the Hugging Face classes of
``attnflow.attnlrp.ARCHITECTURES``; for any other model (the agreement encoder) it is skipped with
the reason, as are the decomposition methods (they read a Hugging Face encoder's own vectors;
DecompX also its pooler and classification head). ``method_costs`` times every method of the table on the same sentences, in seconds per
sentence and as a multiple of one gradient (``input_x_gradient``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.batches import length_batches, pad_batch
from attnflow.modes import eval_mode

__all__ = [
    "COMPARATORS",
    "DECOMPOSITION",
    "GRADIENT",
    "comparator_scores",
    "compare_on_subset",
    "cost_steps",
    "decomposition_rows",
    "method_costs",
]

GRADIENT = "input_x_gradient"  # the unit of cost: one forward and one backward
# the norm- and decomposition-based methods (issue 56), scored on the study's Hugging Face classifier
DECOMPOSITION = ("attention_norm", "globenc", "alti", "value_zeroing", "decompx")
COMPARATORS = (GRADIENT, "integrated_gradients", "attnlrp", *DECOMPOSITION)
IG_STEPS = 50  # captum's default number of integration points
WARMUP = 1  # sentences each method runs on, untimed, before it is timed


def _logits_fn(model: Any) -> Callable[..., torch.Tensor]:
    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = model(input_ids=ids, attention_mask=mask)
        return out.logits if hasattr(out, "logits") else out

    return forward


def _input_x_gradient(model: Any, ids: torch.Tensor, mask: torch.Tensor, **_: Any) -> torch.Tensor:
    from .input_gradients import input_gradients

    return input_gradients(model, ids, mask, target="logit", target_class="predicted",
                           reduction="grad_x_input", signed=True)  # fmt: skip


def _integrated_gradients(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, *, keep_positions: Sequence[int], pad_id: int, **_: Any
) -> torch.Tensor:
    from captum.attr import LayerIntegratedGradients

    forward = _logits_fn(model)
    lengths = mask.sum(-1)
    keep = ~mask.bool()  # padding stays padding
    for p in keep_positions:  # CLS, SEP / EOS stay in the baseline
        at = torch.full_like(lengths, p) if p >= 0 else lengths + p
        keep[torch.arange(ids.shape[0]), at] = True
    base = torch.where(keep, ids, torch.full_like(ids, pad_id))
    with torch.no_grad():
        target = forward(ids, mask).argmax(-1)
    lig = LayerIntegratedGradients(forward, model.get_input_embeddings())
    attr = lig.attribute(
        ids, baselines=base, target=target, additional_forward_args=(mask,), n_steps=IG_STEPS
    )
    return attr.sum(-1)  # (B, T)


def _attnlrp(model: Any, ids: torch.Tensor, mask: torch.Tensor, **_: Any) -> torch.Tensor:
    from attnflow.attnlrp.maps import attnlrp_maps

    hf = getattr(model, "hf", model)
    valid = mask.bool().cpu().numpy()
    maps = attnlrp_maps(hf, ids, valid, targets=[None] * ids.shape[0])  # the predicted class, one pass
    out = torch.zeros(ids.shape, dtype=torch.float64)
    for b, m in enumerate(maps):
        out[b, torch.from_numpy(valid[b])] = torch.from_numpy(m[-1])  # input relevance
    return out


def decomposition_rows(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, methods: Sequence[str], *, rows: str = "auto",
    target: Any = "predicted", residual: float = 0.5, heads: str = "mean",
) -> list[dict[str, np.ndarray]]:  # fmt: skip
    """Per sample of the padded batch ``ids``, ``{method: (L, T_b) float64}``: each method's map at
    every layer on the sample's real tokens, ``rows`` being the rows explained ("auto": the record's
    rule), in one forward (`attnflow.hf.explain_batch` on the Hugging Face model in ``model``)."""
    from attnflow.hf import explain_batch

    _, results = explain_batch(getattr(model, "hf", model), {"input_ids": ids, "attention_mask": mask},
                               methods=list(methods), layer=-1, rows=rows, residual=residual, heads=heads,
                               target=target, extra_inputs=None)  # fmt: skip
    return [{m: np.asarray(res["maps"][m], dtype=np.float64) for m in methods} for res in results]


def _decomposition(name: str) -> Callable[..., torch.Tensor]:
    def score(model: Any, ids: torch.Tensor, mask: torch.Tensor, **_: Any) -> torch.Tensor:
        """The method's map at the [CLS] row of the last layer, each sample on its real tokens."""
        out = torch.zeros(ids.shape, dtype=torch.float64)
        for b, maps in enumerate(decomposition_rows(model, ids, mask, [name])):
            out[b, mask[b].bool().cpu()] = torch.from_numpy(maps[name][-1])
        return out

    return score


_SCORERS: dict[str, Callable[..., torch.Tensor]] = {
    GRADIENT: _input_x_gradient,
    "integrated_gradients": _integrated_gradients,
    "attnlrp": _attnlrp,
    **{name: _decomposition(name) for name in DECOMPOSITION},
}


def unavailable(model: Any, name: str) -> str | None:
    """Why `name` cannot run on `model`, or None when it can."""
    if name == "attnlrp":
        from attnflow.attnlrp import ARCHITECTURES  # the built-in classes and any registered

        hf = getattr(model, "hf", model)
        if type(hf).__name__ not in ARCHITECTURES:
            return f"no AttnLRP rules for {type(hf).__name__} (supported: {', '.join(ARCHITECTURES)})"
    if name == "integrated_gradients":
        from importlib.util import find_spec

        if find_spec("captum") is None:
            return "captum is not installed (pip install captum)"
    if name in DECOMPOSITION:
        return _decomposition_unavailable(model, name)
    return None


def _decomposition_unavailable(model: Any, name: str) -> str | None:
    from attnflow.methods.decompx import check_model
    from attnflow.needs.value_path import family

    hf = getattr(model, "hf", None)
    if hf is None:
        return f"{name} reads a Hugging Face model's own vectors; {type(model).__name__} holds none"
    try:
        kind = family(hf)
        if name == "decompx":
            check_model(hf)
    except ValueError as exc:
        return str(exc)
    if name in ("globenc", "alti") and kind != "encoder":
        return f"{name} is defined for post-LayerNorm encoders; {type(hf).__name__} is a {kind} decoder"
    return None


def comparator_scores(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
    keep_positions: Sequence[int] = (0,),
    names: Sequence[str] = COMPARATORS,
    batch_size: int = 16,
    device: str | torch.device = "cpu",
) -> tuple[dict[str, list[np.ndarray]], dict[str, float], dict[str, str]]:
    """({name: [(T_i,) scores]}, {name: seconds per sentence}, {name: why skipped}) on `input_ids`."""
    if unknown := sorted(set(names) - set(_SCORERS)):
        raise ValueError(f"unknown comparator(s) {unknown}; known: {list(_SCORERS)}")
    rows = [np.asarray(r) for r in input_ids]
    scores: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    skipped: dict[str, str] = {}
    with eval_mode(model):
        for name in names:
            if reason := unavailable(model, name):
                skipped[name] = reason
                continue
            out: list[Any] = [None] * len(rows)
            start = time.perf_counter()
            for idx in length_batches([len(r) for r in rows], batch_size):
                ids, mask = pad_batch([rows[i] for i in idx], pad_id)
                values = _SCORERS[name](model, ids.to(device), mask.to(device), keep_positions=keep_positions,
                                        pad_id=pad_id)  # fmt: skip
                for row, i in enumerate(idx):
                    out[i] = values[row, : len(rows[i])].detach().double().cpu().numpy()
            seconds[name] = (time.perf_counter() - start) / max(len(rows), 1)
            scores[name] = out
    return scores, seconds, skipped


def method_costs(
    steps: Mapping[str, Callable[[], Any]], n_sentences: int, *, repeats: int = 1
) -> dict[str, float]:
    """Seconds per sentence of each named step (a call that computes one method for `n_sentences`
    sentences), the best of `repeats` calls."""
    out = {}
    for name, step in steps.items():
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
        out[name] = best / max(n_sentences, 1)
    return out


def cost_steps(
    model: Any,
    input_ids: Sequence[Sequence[int]],
    *,
    methods: Sequence[str],
    task_rows: str,
    importance_options: Mapping[str, Mapping[str, Any]],
    pad_id: int,
    batch_size: int = 16,
    device: str | torch.device = "cpu",
) -> dict[str, Callable[[], Any]]:
    """One timed step per attention method (the capture forward, the class-specific inputs it
    needs, and the explainer on every sample's rows, as the study computes it) and per importance
    score (blank-out, input gradients: the attribute stage's call with its options)."""
    from attnflow.bridge import forward
    from attnflow.explain.apply import RowSpec, apply
    from attnflow.methods import METHODS

    from .samples import attribute_samples

    rows = [np.asarray(r) for r in input_ids]
    spec = RowSpec(task_rows, task=True)  # the task's rows; class-specific methods read CLS

    def attention_step(method: str) -> list[np.ndarray]:
        record = METHODS[method]
        maps: list[np.ndarray] = []
        for idx in length_batches([len(r) for r in rows], batch_size):
            ids, mask = pad_batch([rows[i] for i in idx], pad_id)
            batch = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
            got = forward(
                model, batch, ("attentions", *record.needs)
            )  # the class-specific inputs: predicted class
            att = got.attentions.float().cpu().numpy()
            extra = {k: got.need(k).float().cpu().numpy() for k in record.needs}
            per_sample = apply([record], att, extra, spec, valid=mask.bool().cpu().numpy(), batched=False)
            maps += [sample[method] for sample in per_sample]  # (L, T_i), in batch order
        return maps

    steps: dict[str, Callable[[], Any]] = {m: (lambda m=m: attention_step(m)) for m in methods}
    for name, options in importance_options.items():
        steps[name] = lambda name=name, options=options: attribute_samples(
            model, rows, [0] * len(rows), options={name: options}, pad_id=pad_id, device=device
        )
    return steps


def compare_on_subset(
    model: Any,
    encoder: Any,
    subset: Sequence[Sequence[int]],
    *,
    methods: Sequence[str],
    task_rows: str,
    keep_positions: Sequence[int],
    importance_options: Mapping[str, Mapping[str, Any]],
    device: str | torch.device = "cpu",
    batch_size: int = 16,
) -> tuple[dict[str, list[np.ndarray]], Any]:
    """The comparators' scores on the faithfulness subset, and the cost table of every method:
    one row per method (method, seconds_per_sentence, vs_gradient, n, skipped: the reason a
    comparator could not run, else "")."""
    import pandas as pd

    common = dict(pad_id=encoder.pad_id, batch_size=batch_size, device=device)
    # Each comparator runs once: the pass that scores the subset is the pass that is timed. The
    # first calls compile kernels and fill caches, so every method runs once on one sentence
    # first (WARMUP, untimed); the attention methods and importance scores are then timed once.
    warm = list(subset[:WARMUP])
    comparator_scores(model, warm, keep_positions=keep_positions, **common)
    scores, seconds, skipped = comparator_scores(model, subset, keep_positions=keep_positions, **common)
    kwargs = dict(methods=methods, task_rows=task_rows, importance_options=importance_options, **common)
    method_costs(cost_steps(model, warm, **kwargs), len(warm))
    seconds.update(method_costs(cost_steps(model, subset, **kwargs), len(subset)))
    unit = seconds[GRADIENT]
    rows = [
        {"method": m, "seconds_per_sentence": s, "vs_gradient": s / unit, "skipped": ""}
        for m, s in seconds.items()
    ]
    rows += [{"method": m, "seconds_per_sentence": np.nan, "vs_gradient": np.nan, "skipped": why}
             for m, why in skipped.items()]  # fmt: skip
    return scores, pd.DataFrame(rows).assign(n=len(subset))
