"""``lrp_relevance``: one entry point that dispatches on the model's architecture."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ._result import LRPResult, PassOptions, unbatch

__all__ = ["FAMILIES", "SUPPORTED", "LRPFamily", "lrp_relevance", "register_lrp_family"]


@dataclass(frozen=True)
class LRPFamily:
    """One model family the LRP rules cover: a data row of `FAMILIES`.

    name: its key. classes: the model class names it covers (the model's class or any base class).
    relevance: ``relevance(model, ids (B, T), keep (B, T) bool, options: PassOptions, *,
    token_type_ids) -> LRPResult``, the relevance-aware forward that reuses the model's weights.
    positions: the model's longest input. default_keep: the real tokens when no attention_mask is
    given (default: every token). token_types: it takes token_type_ids. label: how the refusal
    lists it.
    """

    name: str
    classes: tuple[str, ...]
    relevance: Callable[..., LRPResult]
    positions: Callable[[nn.Module], int]
    default_keep: Callable[[nn.Module, Tensor], Tensor] | None = None
    token_types: bool = False
    label: str = ""


def _agreement(model: nn.Module, ids: Tensor, keep: Tensor, opt: PassOptions, **_: Any) -> LRPResult:
    from .agreement import agreement_relevance

    return agreement_relevance(model, ids, keep, opt)


def _bert(
    model: nn.Module, ids: Tensor, keep: Tensor, opt: PassOptions, *, token_type_ids: Any = None
) -> LRPResult:
    from .encoders import bert_relevance

    return bert_relevance(model, ids, keep, opt, token_type_ids=token_type_ids)


def _distilbert(model: nn.Module, ids: Tensor, keep: Tensor, opt: PassOptions, **_: Any) -> LRPResult:
    from .encoders import distilbert_relevance

    return distilbert_relevance(model, ids, keep, opt)


# The families with rules, by name; `register_lrp_family` adds one. Matched by class name (the
# model's or a base class's), in this order.
FAMILIES: dict[str, LRPFamily] = {}


def register_lrp_family(family: LRPFamily) -> None:
    """Add (or replace) a model family of the LRP rules: ``lrp_relevance`` and the class-specific
    methods (``chefer_lrp``) then explain its models. See docs/develop/add-a-method.md."""
    if not family.classes or not callable(family.relevance):
        raise ValueError(f"LRP family {family.name!r}: name its model classes and its relevance function")
    FAMILIES[family.name] = family


for _family in (
    LRPFamily("agreement", ("AgreementTransformer",), _agreement, lambda m: m.config.block_size,
              default_keep=lambda m, ids: ids != m.config.pad_id, label="AgreementTransformer (attnflow.models)"),
    LRPFamily("bert", ("BertForSequenceClassification",), _bert, lambda m: m.config.max_position_embeddings,
              token_types=True, label="BertForSequenceClassification (BERT family, e.g. the packaged MiniLM)"),
    LRPFamily("distilbert", ("DistilBertForSequenceClassification",), _distilbert,
              lambda m: m.config.max_position_embeddings, label="DistilBertForSequenceClassification"),
):  # fmt: skip
    register_lrp_family(_family)

# The built-in families, as the refusal lists them (FAMILIES holds any registered since).
SUPPORTED = tuple(f.label for f in FAMILIES.values())


def _unwrap(model: nn.Module) -> nn.Module:
    """attnflow's HFClassifier holds the transformers model as ``.hf``."""
    from attnflow.models.hf import HFClassifier

    return model.hf if isinstance(model, HFClassifier) else model


def _family(model: nn.Module) -> LRPFamily:
    names = {cls.__name__ for cls in type(model).__mro__}
    for family in FAMILIES.values():
        if names & set(family.classes):
            return family
    raise TypeError(
        f"lrp_relevance has no LRP rules for {type(model).__name__}; supported: "
        f"{', '.join(f.label or f.name for f in FAMILIES.values())}. Add a family with "
        "attnflow.lrp.register_lrp_family(LRPFamily(...)) (docs/develop/add-a-method.md)"
    )


def lrp_relevance(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    target: int | Any | None = None,
    token_type_ids: Tensor | None = None,
    dtype: torch.dtype = torch.float64,
    alpha: float = 1.0,
) -> LRPResult:
    """LRP relevance of every attention map, attention gradients and input relevance of a classifier.

    Chefer, Gur & Wolf (CVPR 2021), with the rules of their public code: Linear αβ (α = 1,
    β = 0, bias ignored); LayerNorm, GELU, ReLU, tanh, softmax and dropout identity; residual
    Add = LRP-0 per operand, each rescaled to its share |ΣR_u| / (|ΣR_u| + |ΣR_v|) of ΣR; the two
    attention matmuls = LRP-0 on both operands, both halved; a tensor used twice sums its
    relevances. Starting from the one-hot ``target`` logit, the relevance that reaches the input
    embeddings sums to 1 per sample (conservation; within ~1e-6 in float64).

    model: AgreementTransformer, BertForSequenceClassification (BERT family, MiniLM included) or
    DistilBertForSequenceClassification, or attnflow's HFClassifier around either; any train/eval
    mode (dropout is treated as identity: eval semantics). input_ids: (B, T) or (T,) for one
    sample; attention_mask: same shape, 1 = real token (None: every token real, or for the
    agreement model the positions not holding ``pad_id``, as its forward); position 0 (the
    classifier's token) must be real. Batches with padding are explained in one pass, each
    sample exactly as alone; padded positions are 0 in every output.
    target: None (each sample's predicted class), an int, or one int per sample.
    token_type_ids: BERT only. dtype: of the relevance pass (the forward uses the model's dtype,
    so the logits equal the model's own). alpha: of the αβ rule (β = α - 1).

    >>> from attnflow.models import AgreementConfig, AgreementTransformer
    >>> _ = torch.manual_seed(0)
    >>> model = AgreementTransformer(AgreementConfig(vocab_size=10, n_layer=2, n_head=2, n_embd=8)).eval()
    >>> out = lrp_relevance(model, torch.tensor([[2, 5, 6, 0]]), torch.tensor([[1, 1, 1, 0]]), target=1)
    >>> tuple(out.attn_relevance.shape), round(out.input_relevance.sum().item(), 6)
    ((1, 2, 2, 4, 4), 1.0)
    >>> out.input_relevance[0, 3].item()  # padding
    0.0
    """
    model = _unwrap(model)
    family = _family(model)
    if not isinstance(input_ids, Tensor) or input_ids.dtype.is_floating_point or input_ids.ndim not in (1, 2):
        raise ValueError("input_ids must be an integer tensor of shape (batch, tokens) or (tokens,)")
    batched = input_ids.ndim == 2
    device = next(model.parameters()).device
    ids = (input_ids if batched else input_ids[None]).to(device)
    if ids.shape[1] == 0 or ids.shape[0] == 0:
        raise ValueError(f"input_ids has an empty axis: shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        keep = (
            family.default_keep(model, ids) if family.default_keep else torch.ones_like(ids, dtype=torch.bool)
        )
    else:
        mask = torch.as_tensor(attention_mask, device=device)
        mask = mask if batched else mask[None]
        if mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask must have the shape of input_ids {tuple(ids.shape)}, got {tuple(mask.shape)}"
            )
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("attention_mask must hold 0 / 1 (1 = real token)")
        keep = mask.bool()
    if not bool(keep[:, 0].all()):
        raise ValueError("position 0 (the token the classifier reads) must be a real token in every sample")
    limit = family.positions(model)
    if ids.shape[1] > limit:
        raise ValueError(f"sequence length {ids.shape[1]} exceeds the model's {limit} positions")
    if token_type_ids is not None and not family.token_types:
        raise ValueError("token_type_ids apply to BERT-family models only")
    opt = PassOptions(target=target, dtype=dtype, alpha=alpha)
    tt = None if token_type_ids is None else (token_type_ids if batched else token_type_ids[None]).to(device)
    result = family.relevance(model, ids, keep, opt, token_type_ids=tt)
    return result if batched else unbatch(result)
