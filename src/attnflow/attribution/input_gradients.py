"""Input-gradient importance (Abnar & Zuidema 2020, section 4): d target / d input embedding, per token."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from attnflow.modes import eval_mode
from attnflow.options import GRADIENT_REDUCTIONS as REDUCTIONS
from attnflow.options import GRADIENT_TARGETS as TARGETS

from ._model import TargetClass, _check_batch, _logits, _target_classes

__all__ = ["REDUCTIONS", "TARGETS", "input_gradients"]


def input_gradients(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    target: Literal["p0_minus_p1", "prob", "logit"] = "p0_minus_p1",
    target_class: TargetClass = "predicted",
    labels: Tensor | None = None,
    reduction: Literal["abs_sum", "l2", "grad_x_input"] = "abs_sum",
    signed: bool = False,
    batch_size: int = 256,
) -> Tensor:
    """Gradient of a scalar target w.r.t. the input token embeddings, reduced to one score per token.

    With x_t in R^D the token embedding at position t (the output of ``get_input_embeddings()``;
    position embeddings are added inside the model and are not part of x) and g_t = d f / d x_t:

        f = p_0 - p_1              target="p0_minus_p1" (the authors': p(singular) - p(plural))
        f = p_c = softmax(z)_c     target="prob"
        f = z_c                    target="logit"

    with c from ``target_class``: "predicted" (argmax of z), "gold" (``labels``) or a fixed index
    (a negative one counts from the end; the authors' SST-2 run is ``target="logit",
    target_class=-1``, i.e. the positive-class logit). ``target_class`` is ignored for p0_minus_p1.

        abs_sum:       | sum_d g_t,d |          (the authors' reduction)
        l2:            || g_t ||_2
        grad_x_input:  | sum_d g_t,d * x_t,d |

    ``signed=True`` drops the outer absolute value of abs_sum and grad_x_input (an L2 norm has no
    sign, so it is an error with l2). Padded positions get 0; CLS gets its score like any token
    (the authors kept it in the gradient correlation; exclude it when correlating if wanted).

    The samples of a batch are independent in eval mode, so one backward pass of the sum of the
    per-sample targets gives every sample its own gradient. The model runs in eval mode (each
    submodule's ``training`` flag is restored after); ``torch.autograd.grad`` is used, so no
    parameter ``.grad`` is touched. Returns ``(B, T)`` in the embeddings' dtype and device.

    >>> import torch
    >>> class Linear(torch.nn.Module):  # z = sum_t W x_t: the gradient of z_c is W[c] at every t
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.emb = torch.nn.Embedding(4, 2)
    ...         self.w = torch.nn.Parameter(torch.tensor([[1.0, 2.0], [0.0, -1.0]]))
    ...     def get_input_embeddings(self):
    ...         return self.emb
    ...     def forward(self, input_ids=None, attention_mask=None, *, inputs_embeds=None):
    ...         x = self.emb(input_ids) if inputs_embeds is None else inputs_embeds
    ...         return (x * attention_mask[..., None]).sum(1) @ self.w.T
    >>> ids, mask = torch.tensor([[2, 1, 0]]), torch.tensor([[1, 1, 0]])
    >>> input_gradients(Linear(), ids, mask, target="logit", target_class=1, reduction="abs_sum")
    tensor([[1., 1., 0.]])
    """
    attention_mask = _check_batch(input_ids, attention_mask)
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if signed and reduction == "l2":
        raise ValueError("an L2 norm has no sign: signed=True needs reduction 'abs_sum' or 'grad_x_input'")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    embedding = model.get_input_embeddings()
    labels_flat = None if labels is None else torch.as_tensor(labels).reshape(-1)
    chunks = []
    with eval_mode(model), torch.enable_grad():
        for start in range(0, input_ids.shape[0], batch_size):
            sl = slice(start, start + batch_size)
            ids, mask = input_ids[sl], attention_mask[sl]
            # A leaf copy of the embeddings: the gradient stops here, not in the embedding table.
            x = embedding(ids).detach().requires_grad_(True)  # (b, T, D)
            logits = _logits(model(input_ids=None, attention_mask=mask, inputs_embeds=x))  # (b, C)
            f = _target(logits, target, target_class, None if labels_flat is None else labels_flat[sl])
            (grad,) = torch.autograd.grad(f.sum(), x)  # (b, T, D): sum is fine, samples are independent
            grad = grad.detach()
            if reduction == "l2":
                s = grad.norm(dim=-1)
            elif reduction == "abs_sum":
                s = grad.sum(dim=-1)
            else:
                s = (grad * x.detach()).sum(dim=-1)
            if not signed:
                s = s.abs()
            chunks.append(s * (mask.to(s.device) != 0))  # (b, T); 0 at pads
    if not chunks:
        return torch.zeros(input_ids.shape, dtype=embedding.weight.dtype)
    return torch.cat(chunks)


def _target(logits: Tensor, target: str, target_class: TargetClass, labels: Tensor | None) -> Tensor:
    """Per-sample scalar f, ``(b,)``."""
    if target == "p0_minus_p1":
        if logits.shape[1] < 2:
            raise ValueError("target 'p0_minus_p1' needs at least 2 classes")
        p = logits.softmax(dim=-1)
        return p[:, 0] - p[:, 1]
    classes = _target_classes(logits, target_class, labels)[:, None]  # (b, 1)
    values = logits.softmax(dim=-1) if target == "prob" else logits
    return values.gather(1, classes)[:, 0]
