"""The one bridge from a model to what the methods need: ``forward(model, batch, needs) -> Captured``.

The study's capture and class-specific inputs (`attnflow.capture`), the Python API and CLI
(`attnflow.hf`), the captum / ferret adapters (`attnflow.compare`) and the cost table all call
this function; none runs a model for attentions on its own. `needs` are the names of the method
records' needs (`attnflow.methods`):

    "attentions"      A (B, L, H, T, T) post-softmax, axes [batch, layer, head, query, key]
    "attn_grad"       ∂ z_c / ∂ A of the target logit z_c, same shape
    "attn_relevance"  R(A), the LRP relevance of every attention map (`attnflow.lrp`, Chefer et al.
                      2021), same shape

Padding (the batch's attention_mask = 0) is exactly 0 in every row and column of each of them.
Two kinds of model, one place each:

- attnflow's study classifiers (`attnflow.models`: ``model(ids, mask, output_attentions=True)``
  returns a ClassifierOutput): the attentions of that call without gradients; attn_grad and
  attn_relevance from one LRP pass (`attnflow.lrp.lrp_relevance`, which differentiates its forward);
- any Hugging Face model: `attnflow.bridge.hf.forward_attentions` (eager attention switched on for
  the call, `attnflow.bridge.eager`; device, language-model positions), the attention gradients from
  the same forward; attn_relevance from `attnflow.lrp.lrp_relevance`.

A layer below the API: `attnflow.hf` (explain_text, the CLI) imports this package, never the
reverse, so the capture stage depends on neither the explainers nor the display code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from attnflow.modes import eval_mode

from .captured import Captured, zero_padding

__all__ = ["NEEDS", "Captured", "forward", "is_study_model", "zero_padding"]

NEEDS = ("attentions", "attn_grad", "attn_relevance")


def is_study_model(model: Any) -> bool:
    """Whether `model` is one of attnflow's study classifiers (`attnflow.models.TransformerClassifier`)."""
    from attnflow.models.output import TransformerClassifier

    return isinstance(model, TransformerClassifier)


def forward(
    model: Any,
    batch: Mapping[str, Any] | torch.Tensor,
    needs: Sequence[str] = ("attentions",),
    *,
    target: Any = "predicted",
    positions: torch.Tensor | None = None,
) -> Captured:
    """Run `model` once on `batch` and return what `needs` asks for (see the module docstring).

    batch: the tokenizer's dict (input_ids, attention_mask, token_type_ids, ...) or pixel_values.
    target: the class the class-specific needs explain: "predicted" (arg-max), an int, one per
    sample; for Hugging Face models also a callable (attn_grad only) or None (no target: the
    attentions alone). positions: language models, the scored position of each sample.
    """
    needs = tuple(needs)
    if unknown := sorted(set(needs) - set(NEEDS)):
        raise ValueError(f"unknown need(s) {unknown}; the bridge makes {', '.join(NEEDS)}")
    if target is None and {"attn_grad", "attn_relevance"} & set(needs):
        raise ValueError(
            f"{sorted({'attn_grad', 'attn_relevance'} & set(needs))} explain a class: pass a target"
        )
    if is_study_model(model):
        return _study_forward(model, batch, needs, target)
    return _hf_forward(model, batch, needs, target, positions)


def _lrp_target(target: Any) -> Any:
    if isinstance(target, str):
        if target != "predicted":
            raise ValueError(f"target must be 'predicted', a class index or one per sample, got {target!r}")
        return None
    if callable(target) and not isinstance(target, torch.Tensor):
        raise ValueError(
            "attn_relevance (LRP) explains a class: pass target='predicted', an int or one per sample"
        )
    return target


def _study_forward(model: Any, batch: Any, needs: tuple[str, ...], target: Any) -> Captured:
    if not isinstance(batch, Mapping) or "input_ids" not in batch:
        raise ValueError(
            "attnflow's study classifiers take token inputs: a dict with input_ids and attention_mask"
        )
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    valid = None if mask is None else mask.bool()
    got = Captured(logits=None, attentions=None, attention_mask=valid)
    if "attentions" in needs:
        with eval_mode(model):
            with torch.no_grad():
                out = model(ids, mask, output_attentions=True)
        if out.attentions is None:
            raise ValueError(f"{type(model).__name__} returned no attentions; load it with eager attention")
        got.logits, got.attentions = out.logits, zero_padding(out.attentions, valid)
    if {"attn_grad", "attn_relevance"} & set(needs):
        from attnflow.lrp import lrp_relevance

        res = lrp_relevance(model, ids, mask, target=_lrp_target(target))
        got.target = res.target
        got.inputs = {name: getattr(res, name) for name in needs if name != "attentions"}
        if got.logits is None:
            got.logits = res.logits
    return got


def _hf_forward(
    model: Any, batch: Any, needs: tuple[str, ...], target: Any, positions: torch.Tensor | None
) -> Captured:
    from .hf import forward_attentions

    grad = "attn_grad" in needs
    out = forward_attentions(model, batch, target=target, positions=positions, attention_grads=grad)
    if grad:
        out.inputs["attn_grad"] = out.attention_grads
    if "attn_relevance" in needs:
        from attnflow.lrp import lrp_relevance

        if not isinstance(batch, Mapping) or "input_ids" not in batch:
            raise ValueError("attn_relevance (LRP) needs text inputs (input_ids)")
        _lrp_target(target)
        types = {"token_type_ids": batch["token_type_ids"]} if "token_type_ids" in batch else {}
        try:
            res = lrp_relevance(
                model, batch["input_ids"], batch.get("attention_mask"), target=out.target, **types
            )
        except TypeError as exc:  # no LRP rules for this architecture
            raise ValueError(str(exc)) from exc
        out.inputs["attn_relevance"] = res.attn_relevance
    return out
