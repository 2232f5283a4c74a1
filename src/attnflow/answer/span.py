"""Attribute a whole answer span to the prompt: one weight per prompt token for every method.

The target is the answer a_0..a_{n-1} after the prompt x_0..x_{P-1}, teacher-forced; ``span``
(s, e), inclusive, picks the explained tokens a_s..a_e (default all): the tokens before a_s, a
reasoning trace or the words before the answer, are context, as FlashTrace's ``output_span``.
Gradient methods explain y = Σ_{t=s..e} z[P + t − 1, a_t], the summed logits of the explained
tokens at the rows that predict them (what lxt and FlashTrace's AttnLRP baseline explain), in one
backward:

    input_gradients       w_j = Σ_d e_jd · ∂y/∂e_jd                       (gradient × input)
    integrated_gradients  w_j = Σ_d e_jd · mean_{k=1..K} ∂y/∂e_jd |_{(k/K) e}  (zero baseline, K steps)
    attnlrp               w_j = Σ_d e_jd · ∂y/∂e_jd under AttnLRP's rules (`attnflow.attnlrp`)

Attention methods (raw, rollout, flow, chefer) read the rows that predict the answer tokens
through `attnflow.generate.explain_generation` (sinks and receptive-field corrections as given
there), at the last layer, and sum them over the explained tokens: w_j = Σ_{t=s..e} M[t, j]. Every method returns
(P,) float64 over the prompt tokens (the answer's own tokens are not attributed).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from attnflow.options import SPAN_ATTENTION_METHODS as ATTENTION_METHODS
from attnflow.options import SPAN_GRADIENT_METHODS as GRADIENT_METHODS

__all__ = [
    "ATTENTION_METHODS",
    "GRADIENT_METHODS",
    "SPAN_METHODS",
    "blocks",
    "checkpointed_blocks",
    "explained_span",
    "span_attribution",
]

SPAN_METHODS = GRADIENT_METHODS + ATTENTION_METHODS
IG_STEPS = 16  # Riemann points of integrated gradients (midpoint-free right sums, as FlashTrace's 20)


def _ids(prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> tuple[list[int], int, int]:
    prompt, answer = [int(i) for i in prompt_ids], [int(i) for i in answer_ids]
    if not prompt or not answer:
        raise ValueError(
            f"need a prompt and an answer; got {len(prompt)} prompt and {len(answer)} answer tokens"
        )
    return prompt + answer, len(prompt), len(answer)


def explained_span(n_answer: int, span: tuple[int, int] | None) -> tuple[int, int]:
    """The inclusive (s, e) of the explained answer tokens: ``span`` checked, None -> (0, n − 1).

    >>> explained_span(4, None), explained_span(4, (2, 3))
    ((0, 3), (2, 3))
    """
    if span is None:
        return 0, n_answer - 1
    s, e = (int(x) for x in span)
    if not 0 <= s <= e < n_answer:
        raise ValueError(f"span {span} must satisfy 0 <= start <= end < {n_answer} (the answer's tokens)")
    return s, e


def _summed_logits(logits: Any, sequence: Sequence[int], n_prompt: int, span: tuple[int, int]) -> Any:
    """Σ_{t=s..e} z[P + t − 1, a_t] of (B, R, V) logits, R the last R positions of the input
    sequence[:-1] (all of them, or those the model was asked to keep) -> (B,)."""
    import torch

    s, e = span
    base = len(sequence) - 1 - logits.shape[1]  # the position of logits' first row
    targets = torch.tensor(sequence[n_prompt + s : n_prompt + e + 1], device=logits.device)  # (n,)
    rows = logits[:, n_prompt - 1 + s - base : n_prompt + e - base]  # (B, n, V)
    return rows.gather(2, targets[None, :, None].expand(rows.shape[0], len(targets), 1))[..., 0].sum(-1)


def blocks(model: Any) -> Any:
    """The model's list of transformer blocks: its first ``nn.ModuleList`` holding as many modules
    as the config has layers."""
    import torch

    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and n is not None and len(module) == n:
            return module
    raise ValueError(f"{type(model).__name__}: no list of {n} transformer blocks found to checkpoint")


@contextmanager
def checkpointed_blocks(model: Any) -> Iterator[None]:
    """Within the block, each transformer block keeps only its input for the backward and runs its
    forward again there (``torch.utils.checkpoint``, non-reentrant): activation memory of one block
    instead of all, for one more forward. Gradients are unchanged."""
    from functools import partial

    from torch.utils.checkpoint import checkpoint

    patched = list(blocks(model))
    for block in patched:
        block.forward = partial(checkpoint, block.forward, use_reentrant=False)
    try:
        yield
    finally:
        for block in patched:
            del block.forward  # the class's forward again


def _embedding_gradient(
    model: Any,
    sequence: list[int],
    n_prompt: int,
    span: tuple[int, int],
    *,
    scales: Sequence[float],
    rules: Any = None,
    checkpoint: bool = False,
) -> np.ndarray:
    """Σ_d e ⊙ mean_k ∂y/∂e at (scale_k · e), over the prompt positions; one batched backward.
    ``rules``: a context manager the forward and backward run in (AttnLRP's rules), or None;
    ``checkpoint``: the blocks recomputed in the backward (`checkpointed_blocks`)."""
    from contextlib import nullcontext

    import torch

    from attnflow.devices import model_device
    from attnflow.modes import eval_mode, keeps_logits

    device = model_device(model)
    ids = torch.tensor([sequence[:-1]], device=device)
    with eval_mode(model), torch.enable_grad():
        embeds = model.get_input_embeddings()(ids).detach()  # (1, T - 1, D)
        alphas = torch.tensor(list(scales), dtype=embeds.dtype, device=device)[:, None, None]
        scaled = (alphas * embeds).requires_grad_(True)  # (K, T - 1, D)
        mask = torch.ones(scaled.shape[:2], dtype=torch.long, device=device)
        recompute = checkpointed_blocks(model) if checkpoint else nullcontext()
        with rules if rules is not None else nullcontext(), recompute:
            # the rows from the first explained token's on: no (T, V) logits and no gradient of them
            kept = {"logits_to_keep": len(sequence) - n_prompt - span[0]} if keeps_logits(model) else {}
            kept |= {"use_cache": False} if checkpoint else {}
            logits = model(inputs_embeds=scaled, attention_mask=mask, **kept).logits
            y = _summed_logits(logits, sequence, n_prompt, span)
            (grad,) = torch.autograd.grad(y.sum(), scaled)
    relevance = (embeds[0] * grad.mean(0)).sum(-1)  # (T - 1,)
    return relevance[:n_prompt].detach().double().cpu().numpy()


def span_attribution(
    model: Any,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    answer_ids: Sequence[int],
    method: str,
    *,
    sinks: str = "auto",
    receptive_field: str = "none",
    ig_steps: int = IG_STEPS,
    attention: str = "eager",
    span: tuple[int, int] | None = None,
    checkpoint: bool = False,
) -> np.ndarray:
    """(P,) the attribution of each prompt token to the answer's tokens ``span`` (inclusive indices
    into ``answer_ids``; None: all of them) by ``method`` (module docstring).

    sinks / receptive_field: the attention methods' corrections (`attnflow.generate.explain_generation`);
    attention: how AttnLRP runs attention ("eager", "sdpa", "checkpoint": `attnflow.attnlrp`);
    checkpoint: the gradient methods keep one block's activations at a time and recompute the
    others in the backward (`checkpointed_blocks`: long prompts in less memory, one more forward).
    """
    if method not in SPAN_METHODS:
        raise ValueError(f"unknown span method {method!r}; choose from {', '.join(SPAN_METHODS)}")
    sequence, n_prompt, n_answer = _ids(prompt_ids, answer_ids)
    target = explained_span(n_answer, span)
    if method == "input_gradients":
        return _embedding_gradient(model, sequence, n_prompt, target, scales=[1.0], checkpoint=checkpoint)
    if method == "integrated_gradients":
        if ig_steps < 1:
            raise ValueError(f"ig_steps must be at least 1, got {ig_steps}")
        scales = [k / ig_steps for k in range(1, ig_steps + 1)]
        return _embedding_gradient(model, sequence, n_prompt, target, scales=scales, checkpoint=checkpoint)
    if method == "attnlrp":
        from attnflow.attnlrp.patch import attnlrp_rules

        rules = attnlrp_rules(model, attention=attention)
        return _embedding_gradient(
            model, sequence, n_prompt, target, scales=[1.0], rules=rules, checkpoint=checkpoint
        )
    from attnflow.generate import explain_generation

    text = tokenizer.decode(sequence[:n_prompt])
    result = explain_generation(
        model, tokenizer, text, methods=[method], completion_ids=sequence[n_prompt:], sinks=sinks,
        receptive_field=receptive_field, over="prompt", normalize=False,
    )  # fmt: skip
    if result.prompt_ids != sequence[:n_prompt]:
        raise ValueError(
            "the prompt does not survive decode + encode with this tokenizer; pass ids the tokenizer makes from text"
        )
    rows = result.maps[method][target[0] : target[1] + 1, :, -1]  # (n, P) the explained rows, last layer
    return rows.sum(axis=0).astype(np.float64)
