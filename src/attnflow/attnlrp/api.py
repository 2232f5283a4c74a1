"""``attnlrp``: AttnLRP relevances of one sequence in one forward and one backward pass."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .patch import architecture, attnlrp_rules

__all__ = ["AttnLRPResult", "attnlrp"]


@dataclass(frozen=True)
class AttnLRPResult:
    """AttnLRP relevances of one explained logit (detached; the model's dtype).

    What the rules lose is reported, not hidden: ``softmax_absorbed[l]`` is the relevance that
    layer l's softmax rule does not pass on, Σ R(A_l) − Σ R(q_l) − Σ R(k_l); ``bias_absorbed`` the
    rest (biases, norm shifts, the classifier/pooler biases), so that
    logit = Σ (input + position + token type relevance) + Σ softmax_absorbed + bias_absorbed.
    """

    logit: Tensor  # () the explained logit = the relevance put in at the output
    target: int  # its class / vocabulary index
    logits: Tensor  # (C,) or (V,) the logits of the explained row (equal to the model's own)
    input_relevance: Tensor  # (T,) R(inputs_embeds), summed over hidden
    position_relevance: Tensor | None  # (T,) R(absolute position embeddings); None if the model has none
    token_type_relevance: Tensor | None  # (T,) R(token-type embeddings); None if the model has none
    hidden_relevance: Tensor  # (L + 1, T) R(output_hidden_states[i]), summed over hidden
    attn_relevance: Tensor  # (L, T, T) R(attention probabilities), query x key, summed over heads
    softmax_absorbed: Tensor  # (L,) relevance not passed on by each layer's softmax rule
    residual: Tensor  # () logit − Σ input_relevance
    embedding_residual: Tensor  # () logit − Σ (input + position + token type relevance)
    bias_absorbed: Tensor  # () embedding_residual − Σ softmax_absorbed


def attnlrp(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    target: int | None = None,
    position: int = -1,
    epsilon: float = 0.0,
    token_type_ids: Tensor | None = None,
) -> AttnLRPResult:
    """AttnLRP (Achtibat et al., ICML 2024) relevance of one logit, as lxt's efficient implementation.

    One forward on the word embeddings e = E[input_ids] with the rules of ``attnlrp_rules``
    (softmax: R(x) = x ⊙ (R(s) − s Σ R(s)); q·kᵀ, A·V, act(gate)·up: uniform, each factor half;
    LayerNorm / RMSNorm: σ detached; GELU / SiLU / tanh: identity; linear: ε-LRP), then one
    backward of y = logit[target]: R(x) = x ⊙ ∂y/∂x for the embeddings, every hidden state and,
    halved (the A share of the uniform rule on A·V), the attention probabilities:
    R(A) = ½ A ⊙ ∂y/∂A summed over heads.

    model: BertForSequenceClassification, GPT2LMHeadModel, GPT2ForSequenceClassification,
    LlamaForCausalLM or LlamaForSequenceClassification, loaded with attn_implementation="eager";
    it is left as it was (modules, hooks, train/eval flags, no .grad written).
    input_ids: (T,) or (1, T): one sequence. attention_mask: same shape, 1 = real token.
    target: the class (classifiers) or vocabulary index (LMs); None = the argmax.
    position: LMs only: the position whose next-token logit is explained (-1: the last).
    epsilon: of the ε rule on every linear layer (0: gradient x input, as lxt's efficient API).

    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> _ = torch.manual_seed(0)
    >>> config = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
    ...                     intermediate_size=16, max_position_embeddings=16, attn_implementation="eager")
    >>> model = BertForSequenceClassification(config).double()
    >>> out = attnlrp(model, torch.tensor([2, 5, 7, 3]), target=1)
    >>> out.input_relevance.shape, out.hidden_relevance.shape, out.attn_relevance.shape
    (torch.Size([4]), torch.Size([3, 4]), torch.Size([2, 4, 4]))
    >>> total = out.input_relevance.sum() + out.position_relevance.sum() + out.token_type_relevance.sum()
    >>> torch.isclose(total + out.softmax_absorbed.sum() + out.bias_absorbed, out.logit).item()
    True
    """
    arch = architecture(model)
    ids = input_ids if input_ids.ndim == 2 else input_ids[None]  # (1, T)
    if ids.ndim != 2 or ids.shape[0] != 1:
        raise ValueError(
            f"attnlrp explains one sequence: input_ids must be (T,) or (1, T), got {tuple(input_ids.shape)}"
        )
    kwargs: dict = {}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask.reshape(ids.shape)
    if token_type_ids is not None:
        kwargs["token_type_ids"] = token_type_ids.reshape(ids.shape)
    if arch.head == "lm":
        kwargs["use_cache"] = False
    # a leaf copy of the word embeddings: its gradient is all we need from the embedding table
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)  # (1, T, C)
    embeds.requires_grad_(True)

    with torch.enable_grad(), attnlrp_rules(model, epsilon=epsilon) as record:
        logits = model(inputs_embeds=embeds, **kwargs).logits
        row = logits[0] if arch.head == "classifier" else logits[0, position]  # (C,) or (V,)
        t = int(row.argmax()) if target is None else int(target)
        if not 0 <= t < row.shape[0]:
            raise ValueError(f"target {t} out of range: the model has {row.shape[0]} outputs")
        logit = row[t]
        qk = {id(x): x for x, _ in (*record.q, *record.k)}  # a fused projection is one tensor
        tensors = [embeds, *record.embeddings.values(), *record.hidden, *record.attn, *qk.values()]
        # one backward; only these tensors' gradients (no parameter .grad is written)
        grads = torch.autograd.grad(logit, tensors, allow_unused=True, materialize_grads=True)

    with torch.no_grad():
        grad_of = dict(zip(map(id, tensors), grads, strict=True))

        def rel(x: Tensor) -> Tensor:  # R(x) = x ⊙ ∂logit/∂x, batch axis dropped
            return (x * grad_of[id(x)])[0]

        inputs = rel(embeds).sum(-1)  # (T,)
        extra = {name: rel(x).sum(-1) for name, x in record.embeddings.items()}  # name -> (T,)
        hidden = torch.stack([rel(h).sum(-1) for h in record.hidden])  # (L + 1, T)
        # (L, T, T): heads summed; ½: the share of A in the uniform rule on A·V (v gets the other ½)
        attn = torch.stack([0.5 * rel(a).sum(0) for a in record.attn])

        def projection_relevance(pairs: list[tuple[Tensor, slice]]) -> Tensor:
            return torch.stack([rel(x)[..., part].sum() for x, part in pairs])  # (L,)

        softmax_absorbed = attn.sum((1, 2)) - projection_relevance(record.q) - projection_relevance(record.k)
        logit = logit.detach()
        embedding_residual = logit - inputs.sum() - sum(r.sum() for r in extra.values())
        return AttnLRPResult(
            logit=logit,
            target=t,
            logits=row.detach(),
            input_relevance=inputs,
            position_relevance=extra.get("position"),
            token_type_relevance=extra.get("token_type"),
            hidden_relevance=hidden,
            attn_relevance=attn,
            softmax_absorbed=softmax_absorbed,
            residual=logit - inputs.sum(),
            embedding_residual=embedding_residual,
            bias_absorbed=embedding_residual - softmax_absorbed.sum(),
        )
