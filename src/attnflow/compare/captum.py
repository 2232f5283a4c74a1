"""attnflow's methods as captum attributions, and Integrated Gradients through captum.

`AttnflowAttribution(model, method)` is a ``captum.attr.Attribution``: ``attribute(input_ids,
target=..., additional_forward_args=(attention_mask,))`` returns one score per token, shaped like
the ids (B, T), so captum's own metrics (``captum.metrics.infidelity``, ``sensitivity_max``) take
it as they take ``FeatureAblation`` on the same ids or a layer method on the embedding layer
summed over hidden. `integrated_gradients` is captum's ``LayerIntegratedGradients`` on the word
embeddings (IG × input, summed over hidden), not a re-implementation.

captum is optional (``pip install "attnflow[compare]"``): this module imports
without it, and the adapters raise ImportError naming that file when it is missing. Usage::

    from attnflow.compare.captum import AttnflowAttribution, integrated_gradients
    rollout = AttnflowAttribution(model, "rollout", layer=-1)
    scores = rollout.attribute(batch["input_ids"], additional_forward_args=(batch["attention_mask"],))
    ig = integrated_gradients(model, tokenizer, ["a good movie"], n_steps=64)
    ig[0].tokens, ig[0].scores, ig[0].convergence_delta
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.batches import length_batches

from .scores import logits_forward, method_options, token_attributions

_IMPORT_ERROR: BaseException | None = None  # why captum could not be used, said when it is needed
try:
    from captum.attr import Attribution as _Attribution
except Exception as exc:  # a broken dependency of captum raises anything on import
    _Attribution = object
    _IMPORT_ERROR = exc

__all__ = ["AttnflowAttribution", "IGAttribution", "integrated_gradients", "require_captum"]

INSTALL_HINT = 'pip install "attnflow[compare]"'


def require_captum() -> None:
    """Raise ImportError saying what is wrong when captum cannot be used: not installed (the
    install command), or installed but failing to import (the error it raised)."""
    if _Attribution is not object:
        return
    exc = _IMPORT_ERROR
    if exc is None or (isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "captum"):
        raise ImportError(f"attnflow.compare.captum needs captum, which is not installed: {INSTALL_HINT}")
    first = (str(exc).splitlines() or [""])[0]
    raise ImportError(f"captum is installed but importing it failed: {type(exc).__name__}: {first}") from exc


class AttnflowAttribution(_Attribution):
    """An attnflow method as a captum ``Attribution`` over token ids.

    attribute(inputs, target, additional_forward_args) -> (B, T) scores of
    `attnflow.compare.token_attributions`: for attention methods the explained row (rows="auto":
    [CLS], or the last token of a decoder) at `layer`; for "attnlrp" the relevance of the word
    embeddings. ``forward_func`` is the model's logits as a function of (input_ids,
    attention_mask, token_type_ids), the forward captum's metrics should use.
    """

    def __init__(
        self,
        model: Any,
        method: str = "rollout",
        **options: Any,
    ) -> None:
        """options: layer, rows, residual, heads of `attnflow.compare.method_options` (its defaults)."""
        require_captum()
        self.options = method_options(method, **options)
        super().__init__(logits_forward(model))
        self.model, self.method = model, method

    def attribute(
        self,
        inputs: torch.Tensor | tuple[torch.Tensor],
        target: Any = None,
        additional_forward_args: Any = None,
    ) -> torch.Tensor | tuple[torch.Tensor]:
        """(B, T) token scores shaped like the ids (a 1-tuple for a 1-tuple input); padding 0.

        target: None (the predicted class), a class, or one per sample; only "chefer",
        "chefer_lrp" and "attnlrp" depend on it. additional_forward_args: attention_mask, or
        (attention_mask[, token_type_ids]) as passed to ``forward_func``.
        """
        as_tuple = isinstance(inputs, tuple)
        if as_tuple and len(inputs) != 1:
            raise ValueError(f"expected one input tensor (the token ids), got {len(inputs)}")
        ids = inputs[0] if as_tuple else inputs
        mask, types = _mask_and_types(additional_forward_args)
        scores = token_attributions(
            self.model, ids, mask, method=self.method, target=target, token_type_ids=types, **self.options,
        )  # fmt: skip
        scores = scores.to(device=ids.device, dtype=_float_dtype(self.model)).reshape(ids.shape)
        return (scores,) if as_tuple else scores


@dataclass(frozen=True)
class IGAttribution:
    """Integrated Gradients × input of one text, per token (real tokens only).

    Completeness (Sundararajan et al., ICML 2017): Σ scores = f(x) − f(x') − convergence_delta,
    with f the target logit and x' the baseline ids; `output_difference` is f(x) − f(x').
    """

    text: str
    tokens: list[str]
    scores: np.ndarray  # (T,) float64
    target: int
    convergence_delta: float
    output_difference: float


def integrated_gradients(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    target: Any = "predicted",
    baseline: str | int = "pad",
    n_steps: int = 50,
    internal_batch_size: int | None = None,
    batch_size: int = 8,
    truncate: bool = False,
    progress: bool = False,
) -> list[IGAttribution]:
    """IG × input of the target logit w.r.t. the word embeddings, per token, through captum.

    score[t] = Σ_h (e_th − e'_th) ∫₀¹ ∂f(e' + α(e − e'))/∂e_th dα, computed by captum's
    ``LayerIntegratedGradients`` on ``model.get_input_embeddings()`` (Gauss-Legendre, `n_steps`
    points); position and token-type embeddings are not interpolated. The baseline x' keeps the
    special tokens ([CLS], [SEP], padding; not [UNK]) and replaces every other token by
    `baseline`: "pad", "mask", "unk" (the tokenizer's token) or a token id. target: "predicted"
    (the arg-max of f(x)), a class, or one class per text. The texts go through the model
    `batch_size` at a time, grouped by token length (less padding); results in input order.
    """
    require_captum()
    from captum.attr import LayerIntegratedGradients

    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a sequence of strings (a list for one text)")
    texts = list(texts)
    base_id = _baseline_id(tokenizer, baseline)
    targets = _text_targets(target, len(texts))
    forward = logits_forward(model)
    lig = LayerIntegratedGradients(forward, model.get_input_embeddings())
    # [CLS], [SEP], padding, ... stay in the baseline; [UNK] stands for a word, so it is replaced
    kept = set(getattr(tokenizer, "all_special_ids", []) or []) - {getattr(tokenizer, "unk_token_id", None)}
    special = torch.tensor(sorted(kept), dtype=torch.long)
    device = next(model.parameters()).device
    # texts of similar length batched together (less padding), results in input order
    lengths = [len(ids) for ids in tokenizer(texts, truncation=truncate)["input_ids"]] if texts else []
    batches = length_batches(lengths, batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="integrated gradients", unit="batch")
    results: list[IGAttribution | None] = [None] * len(texts)
    for idx in batches:
        chunk = [texts[i] for i in idx]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=truncate)
        ids = enc["input_ids"].to(device)  # (B, T)
        mask = enc["attention_mask"].to(device)
        extra = (mask,) if "token_type_ids" not in enc else (mask, enc["token_type_ids"].to(device))
        keep = torch.isin(ids, special.to(device)) | ~mask.bool()  # specials and padding stay
        base = torch.where(keep, ids, torch.full_like(ids, base_id))
        with torch.no_grad():
            logits = forward(ids, *extra)  # (B, C)
            base_logits = forward(base, *extra)
        want = [targets[i] for i in idx]
        t = torch.tensor(
            [int(logits[i].argmax()) if w is None else w for i, w in enumerate(want)], device=device
        )
        attr, delta = lig.attribute(
            ids, baselines=base, target=t, additional_forward_args=extra, n_steps=n_steps,
            internal_batch_size=internal_batch_size, return_convergence_delta=True,
        )  # fmt: skip
        per_token = attr.sum(-1).detach().to("cpu", torch.float64)  # (B, T, H) -> (B, T)
        rows = torch.arange(len(chunk), device=device)
        gap = (logits[rows, t] - base_logits[rows, t]).to("cpu", torch.float64)
        for i, (text, at) in enumerate(zip(chunk, idx.tolist(), strict=True)):
            real = mask[i].bool().cpu()
            results[at] = IGAttribution(
                text=text,
                tokens=tokenizer.convert_ids_to_tokens(ids[i].cpu()[real].tolist()),
                scores=per_token[i][real].numpy(),
                target=int(t[i]),
                convergence_delta=float(delta[i]),
                output_difference=float(gap[i]),
            )
    return results  # type: ignore[return-value]


def _mask_and_types(extra: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """additional_forward_args as (attention_mask, token_type_ids), either possibly None."""
    if extra is None:
        return None, None
    if isinstance(extra, torch.Tensor):
        return extra, None
    extra = tuple(extra)
    if len(extra) > 2:
        raise ValueError(
            f"additional_forward_args must be (attention_mask[, token_type_ids]), got {len(extra)} values"
        )
    return (*extra, None, None)[:2]


def _baseline_id(tokenizer: Any, baseline: str | int) -> int:
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        return baseline
    names = {"pad": "pad_token_id", "mask": "mask_token_id", "unk": "unk_token_id"}
    if baseline not in names:
        raise ValueError(f"baseline must be 'pad', 'mask', 'unk' or a token id, got {baseline!r}")
    token_id = getattr(tokenizer, names[baseline], None)
    if token_id is None:
        raise ValueError(f"the tokenizer has no {baseline} token; pass baseline= another token or an id")
    return int(token_id)


def _text_targets(target: Any, n: int) -> list[int | None]:
    if isinstance(target, str):
        if target != "predicted":
            raise ValueError(f"target must be 'predicted', a class or one class per text, got {target!r}")
        return [None] * n
    if isinstance(target, int | np.integer) and not isinstance(target, bool):
        return [int(target)] * n
    targets = [int(t) for t in target]
    if len(targets) != n:
        raise ValueError(f"expected {n} targets (one per text), got {len(targets)}")
    return targets


def _float_dtype(model: Any) -> torch.dtype:
    """The model's float dtype for the scores (float32 for half-precision models)."""
    dtype = next((p.dtype for p in model.parameters() if p.dtype.is_floating_point), torch.float32)
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
