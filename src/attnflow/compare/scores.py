"""``token_attributions``: one attnflow method as a per-token score of every input sequence.

The common core of the captum and ferret adapters: token ids in, (batch, token) scores out, so
that other tools' harnesses (captum's metrics, ferret's evaluators) can treat an attention
method like any feature-attribution method. Attention methods ("raw", "rollout", "flow",
"chefer", "chefer_lrp") give the explained query row of one layer, exactly the row that
`attnflow.hf.explain_texts` puts in ``maps[method][layer]``; "attnlrp" gives AttnLRP's relevance of
the word embeddings (`attnflow.attnlrp.attnlrp`, ``input_relevance``), which has no layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attnflow.methods import EXPLAINER_INPUTS
from attnflow.methods import METHODS as RECORDS
from attnflow.modes import eval_mode, keeps_logits

__all__ = ["METHODS", "logits_forward", "token_attributions"]

# Every method the adapters expose: attnflow.explain's registry plus AttnLRP.
METHODS: tuple[str, ...] = tuple(RECORDS)  # every method record (attnflow.methods)
# Row choices of attnflow.hf.explain_texts that name no position.


def logits_forward(model: Any) -> Any:
    """The model as captum wants a forward function: ``f(input_ids, attention_mask=None,
    token_type_ids=None) -> logits (B, C)``, in eval mode (dropout off; the flag is restored).

    Language models (logits (B, T, V)) give the next-token logits after the last real token; one
    whose forward takes ``logits_to_keep`` (transformers' causal LMs) computes its output layer at
    those positions only (a vocabulary of 49k is a fifth of a small LM's work at every position).
    """
    keeps = keeps_logits(model)

    def forward(
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        kwargs = {"attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        last = _last_real(attention_mask, input_ids.shape).to(input_ids.device)  # (B,)
        kept = torch.unique(last) if keeps else None  # sorted positions
        if kept is not None:
            kwargs["logits_to_keep"] = kept
        with eval_mode(model):
            logits = model(input_ids=input_ids, **kwargs).logits
        if logits.ndim == 3:  # (B, T or len(kept), V): the position after the last real token
            at = last if kept is None else torch.searchsorted(kept, last)
            logits = logits[torch.arange(logits.shape[0], device=logits.device), at.to(logits.device)]
        return logits

    return forward


def method_options(
    method: str,
    *,
    layer: int = -1,
    rows: str | int = "auto",
    residual: float = 0.5,
    heads: str | int = "mean",
) -> dict[str, Any]:
    """The options of `token_attributions` for `method` (checked against the records), as the
    captum and ferret adapters keep them: layer (-1: the last), rows ("auto": [CLS], or a
    decoder's last token), residual (0.5), heads ("mean")."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    return {"layer": layer, "rows": rows, "residual": residual, "heads": heads}


def token_attributions(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    method: str = "rollout",
    layer: int = -1,
    rows: str | int = "auto",
    residual: float = 0.5,
    heads: str | int = "mean",
    target: Any = "predicted",
    token_type_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, T) float64 score of every token of every sequence under one attnflow method; padding 0.

    Attention methods: score[b, j] = maps[method][layer, j] of `attnflow.hf.explain_texts` for the
    explained query row (rows: "auto" = [CLS] for encoders / the last token for decoders, "cls",
    "last", "max", "mean" or a position), computed from one eager forward on the sequence's real
    tokens. "chefer" / "chefer_lrp" explain `target` ("predicted", a class, one class per sample);
    the other attention methods do not depend on it. "attnlrp": score[b] = AttnLRP's relevance
    R(e) = e ⊙ ∂logit/∂e of the word embeddings, summed over hidden (layer, rows, residual and
    heads do not apply; the model must be one `attnflow.attnlrp` supports).

    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> _ = torch.manual_seed(0)
    >>> model = BertForSequenceClassification(BertConfig(vocab_size=10, hidden_size=8,
    ...     num_hidden_layers=2, num_attention_heads=2, intermediate_size=8))
    >>> ids, mask = torch.tensor([[2, 5, 6, 3], [2, 5, 3, 0]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    >>> s = token_attributions(model, ids, mask, method="rollout")
    >>> s.shape, s.sum(-1).round(decimals=6).tolist(), s[1, 3].item()  # rollout rows are distributions
    (torch.Size([2, 4]), [1.0, 1.0], 0.0)
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    ids = input_ids if input_ids.ndim == 2 else input_ids[None]  # (B, T)
    if ids.ndim != 2 or ids.dtype.is_floating_point:
        raise ValueError(
            "input_ids must be integer token ids of shape (T,) or (B, T), "
            f"got {ids.dtype} {tuple(input_ids.shape)}"
        )
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.reshape(ids.shape)
    types = None if token_type_ids is None else token_type_ids.reshape(ids.shape)
    from attnflow.bridge import NEEDS

    if RECORDS[method].kind == "model" or set(EXPLAINER_INPUTS.get(method, ())) - set(NEEDS):
        # a model-level method, or one reading a need the bridge does not make (value vectors, ...)
        return _explained_scores(model, ids, mask, types, method, target, layer, rows, residual, heads)
    return _attention_scores(model, ids, mask, types, method, layer, rows, residual, heads, target)


def _attention_scores(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    types: torch.Tensor | None,
    method: str,
    layer: int,
    rows: str | int,
    residual: float,
    heads: str | int,
    target: Any,
) -> torch.Tensor:
    from attnflow.bridge import forward
    from attnflow.explain.apply import RowSpec, apply
    from attnflow.hf import is_causal_model

    batch = {"input_ids": ids, "attention_mask": mask}
    if types is not None:
        batch["token_type_ids"] = types
    needs = EXPLAINER_INPUTS.get(method, ())
    out = forward(model, batch, ("attentions", *needs), target=_hf_target(target) if needs else None)
    extra = {name: _float64(out.need(name)) for name in needs}  # each (B, L, H, T, T)
    attn = _float64(out.attentions, distributions=True)  # (B, L, H, T, T)
    num_layers = attn.shape[1]
    if (
        isinstance(layer, bool)
        or not isinstance(layer, int | np.integer)
        or not -num_layers <= layer < num_layers
    ):
        raise ValueError(f"layer must be in [-{num_layers}, {num_layers - 1}], got {layer!r}")
    valid = mask.bool().cpu().numpy()  # (B, T)
    scores = torch.zeros(ids.shape, dtype=torch.float64)
    spec = RowSpec(rows, causal=is_causal_model(model))
    # one sample at a time, on its real tokens (as explain_texts' per-sample path)
    per_sample = apply([RECORDS[method]], attn, extra, spec, residual=residual, heads=heads, valid=valid,
                       batched=False)  # fmt: skip
    for b, maps in enumerate(per_sample):
        scores[b, torch.from_numpy(np.flatnonzero(valid[b]))] = torch.from_numpy(maps[method][layer])
    return scores


def _explained_scores(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    types: torch.Tensor | None,
    method: str,
    target: Any,
    layer: int = -1,
    rows: str | int = "auto",
    residual: float = 0.5,
    heads: str | int = "mean",
) -> torch.Tensor:
    """Token scores through `attnflow.hf.explain_batch` (which makes every need): the ``layer`` row
    of the method's [layer, token] map (for AttnLRP, the relevance of the word embeddings), one
    sample at a time on its real tokens."""
    from attnflow.hf import explain_batch

    targets = _per_sample(target, ids.shape[0])
    scores = torch.zeros(ids.shape, dtype=torch.float64)
    for b, t in enumerate(targets):
        keep = mask[b].bool()  # the real tokens only: the explanation of the unpadded text
        inputs = {"input_ids": ids[b][keep][None], "attention_mask": torch.ones_like(ids[b][keep])[None]}
        if types is not None:
            inputs["token_type_ids"] = types[b][keep][None]
        _, (res,) = explain_batch(model, inputs, methods=[method], layer=-1, rows=rows, residual=residual, heads=heads,
                                   target="predicted" if t is None else [t], extra_inputs=None)  # fmt: skip
        scores[b, keep.cpu()] = torch.from_numpy(res["maps"][method][layer])
    return scores


def _hf_target(target: Any) -> Any:
    """captum's target (None, int, list, tensor) as attnflow.hf's ("predicted", int, sequence)."""
    if target is None:
        return "predicted"
    if isinstance(target, torch.Tensor):
        return int(target) if target.ndim == 0 else target.reshape(-1)
    return target


def _per_sample(target: Any, batch: int) -> list[int | None]:
    """One class per sample for AttnLRP; None = the arg-max."""
    target = _hf_target(target)
    if isinstance(target, str):
        if target != "predicted":
            raise ValueError(f"target must be 'predicted', a class or one class per sample, got {target!r}")
        return [None] * batch
    if isinstance(target, int | np.integer):
        return [int(target)] * batch
    targets = [int(t) for t in target]
    if len(targets) != batch:
        raise ValueError(f"expected {batch} targets (one per sample), got {len(targets)}")
    return list(targets)


def _float64(x: torch.Tensor, *, distributions: bool = False) -> np.ndarray:
    """float64 numpy. distributions: half-precision attention rows are rescaled to sum 1 (their
    rounding alone can exceed the explainers' float64 row-sum check); padded rows stay 0."""
    y = x.detach().to(device="cpu", dtype=torch.float64)
    if distributions and x.dtype in (torch.float16, torch.bfloat16):
        total = y.sum(-1, keepdim=True)
        y = torch.where(total > 0, y / total.clamp_min(torch.finfo(torch.float64).tiny), y)
    return y.numpy()


def _last_real(attention_mask: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
    """(B,) index of the last real token (either padding side)."""
    bsz, tokens = shape
    if attention_mask is None:
        return torch.full((bsz,), tokens - 1, dtype=torch.long)
    idx = torch.arange(tokens, device=attention_mask.device)
    return torch.where(attention_mask.bool(), idx, -1).max(dim=1).values
