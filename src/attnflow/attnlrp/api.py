"""``attnlrp``: AttnLRP relevances of one sequence in one forward and one backward pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnflow.bridge.grad import frozen_parameters
from attnflow.modes import keeps_logits

from .patch import ATTENTION, architecture, attnlrp_rules

__all__ = ["AttnLRPResult", "attnlrp", "attnlrp_batch", "pools_last_token"]


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
    # (L, T, T) R(attention probabilities), query x key, summed over heads; None unless the
    # attention ran eager (attention="sdpa" / "checkpoint" never hold the probabilities)
    attn_relevance: Tensor | None
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
    attention: str = "eager",
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
    attention: "eager" (the model must be loaded eager; ``attn_relevance`` filled), "sdpa" (torch's
    fused attention, forward and backward: no (H, T, T) tensor is kept, so long inputs fit) or
    "checkpoint" (eager attention recomputed in the backward); the last two leave ``attn_relevance``
    None and give the other fields equal to eager's to float rounding (``attnflow.attnlrp.patch``).

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
    ids = input_ids if input_ids.ndim == 2 else input_ids[None]  # (1, T)
    if ids.ndim != 2 or ids.shape[0] != 1:
        raise ValueError(
            f"attnlrp explains one sequence: input_ids must be (T,) or (1, T), got {tuple(input_ids.shape)}"
        )
    mask = None if attention_mask is None else attention_mask.reshape(ids.shape)
    types = None if token_type_ids is None else token_type_ids.reshape(ids.shape)
    (result,) = attnlrp_batch(
        model, ids, mask, targets=[target], positions=[position], epsilon=epsilon, token_type_ids=types,
        lengths=[ids.shape[1]], attention=attention,
    )  # fmt: skip
    return result


def pools_last_token(model: nn.Module) -> bool:
    """Whether the model is a decoder classifier (its head reads the last token, not [CLS])."""
    arch = architecture(model, eager=False)
    return arch.head == "classifier" and arch.backbone != "bert"


def attnlrp_batch(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    targets: Sequence[int | None] | None = None,
    positions: Sequence[int] | None = None,
    epsilon: float = 0.0,
    token_type_ids: Tensor | None = None,
    lengths: Sequence[int] | None = None,
    attention: str = "eager",
) -> list[AttnLRPResult]:
    """``attnlrp`` of each sequence of a right-padded batch (B, T), in ONE forward and ONE backward.

    The samples are independent (masked keys get attention weight exactly 0, no batch statistics),
    so the backward of Σ_b y_b gives each sample its own ∂y_b/∂x: result b equals ``attnlrp`` on
    sample b alone, trimmed to its `lengths[b]` real tokens (default: the mask's row sums).
    targets / positions: per sample, as ``attnlrp``'s target / position (positions count real
    tokens: -1 is each sample's last). Position and token-type ids are passed per sample, so their
    relevance is each sample's own. A decoder classifier pools its last token: it is refused with
    padding (with inputs_embeds it cannot find the padding; run equal lengths or one at a time).
    attention: as ``attnlrp``'s. A language model's logits are formed at the explained positions
    only (never (B, T, V)).
    """
    if attention not in ATTENTION:
        raise ValueError(f"attnlrp attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    arch = architecture(model, eager=attention == "eager")
    if input_ids.ndim != 2:
        raise ValueError(f"attnlrp_batch takes input_ids (B, T), got {tuple(input_ids.shape)}")
    bsz, tokens = input_ids.shape
    if lengths is None:
        lengths = [tokens] * bsz if attention_mask is None else [int(n) for n in attention_mask.sum(-1)]
    lengths = [int(n) for n in lengths]
    if attention_mask is not None and any(attention_mask[b, n:].any() for b, n in enumerate(lengths)):
        raise ValueError(
            "attnlrp_batch needs right padding: no mask row has a real token after its lengths[b]"
        )
    if pools_last_token(model) and bsz > 1 and (len(set(lengths)) > 1 or model.config.pad_token_id is None):
        raise ValueError(
            f"{type(model).__name__} pools its last token, which it cannot find in a padded batch of "
            "embeddings: explain sequences of one length per batch (and set config.pad_token_id)"
        )
    tokens = max(lengths)  # columns of padding only are dropped (a pooling head reads the last one)
    input_ids = input_ids[:, :tokens]
    attention_mask = None if attention_mask is None else attention_mask[:, :tokens]
    token_type_ids = None if token_type_ids is None else token_type_ids[:, :tokens]
    device = model.get_input_embeddings().weight.device  # the inputs go where the model is
    input_ids, attention_mask, token_type_ids = (
        None if t is None else t.to(device) for t in (input_ids, attention_mask, token_type_ids)
    )
    targets = [None] * bsz if targets is None else list(targets)
    positions = [-1] * bsz if positions is None else list(positions)
    if len(targets) != bsz or len(positions) != bsz:
        raise ValueError(f"targets and positions need one entry per sample ({bsz})")
    kwargs: dict = {}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if token_type_ids is not None:
        kwargs["token_type_ids"] = token_type_ids
    if "position" in arch.embeddings:  # per-sample position embeddings: (B, T, C), not (1, T, C)
        kwargs["position_ids"] = torch.arange(tokens, device=input_ids.device).expand(bsz, tokens)
    keep = None  # the positions whose logits the LM head forms (sorted), None: every position
    if arch.head == "lm":
        kwargs["use_cache"] = False
        if keeps_logits(model):
            at = [p if p >= 0 else n + p for p, n in zip(positions, lengths, strict=True)]
            if all(0 <= p < n for p, n in zip(at, lengths, strict=True)):  # else refused below
                keep = torch.tensor(sorted(set(at)), device=device)
                kwargs["logits_to_keep"] = keep
    # a leaf copy of the word embeddings: its gradient is all we need from the embedding table
    with torch.no_grad():
        embeds = model.get_input_embeddings()(input_ids)  # (B, T, C)
    embeds.requires_grad_(True)

    # no parameter gradient is asked for: frozen, autograd keeps only what ∂/∂activations needs
    with (
        torch.enable_grad(),
        frozen_parameters(model),
        attnlrp_rules(model, epsilon=epsilon, attention=attention) as record,
    ):
        logits = model(inputs_embeds=embeds, **kwargs).logits
        rows = []  # (C,) or (V,) per sample
        for b in range(bsz):
            pos = positions[b] if positions[b] >= 0 else lengths[b] + positions[b]
            if arch.head == "lm" and not 0 <= pos < lengths[b]:
                raise ValueError(
                    f"position {positions[b]} out of range for sample {b} of {lengths[b]} tokens"
                )
            if arch.head == "classifier":
                rows.append(logits[b])
            else:  # (T, V) or, with logits_to_keep, (K, V) at the sorted positions `keep`
                rows.append(logits[b, pos] if keep is None else logits[b, int(torch.searchsorted(keep, pos))])
        chosen = []
        for b, row in enumerate(rows):
            t = int(row.argmax()) if targets[b] is None else int(targets[b])
            if not 0 <= t < row.shape[0]:
                raise ValueError(f"target {t} out of range: the model has {row.shape[0]} outputs")
            chosen.append(t)
        explained = torch.stack([row[t] for row, t in zip(rows, chosen, strict=True)])  # (B,)
        qk = {id(x): x for x, _ in (*record.q, *record.k)}  # a fused projection is one tensor
        tensors = [
            embeds,
            *record.embeddings.values(),
            *record.hidden,
            *record.attn,
            *qk.values(),
            *record.out,
        ]
        # one backward of Σ_b y_b; only these tensors' gradients (no parameter .grad is written)
        grads = torch.autograd.grad(explained.sum(), tensors, allow_unused=True, materialize_grads=True)

    with torch.no_grad():
        grad_of = dict(zip(map(id, tensors), grads, strict=True))
        results = []
        for b, n in enumerate(lengths):

            def rel(x: Tensor, b: int = b, n: int = n) -> Tensor:  # R(x) = x ⊙ ∂y_b/∂x of sample b's tokens
                return (x[b] * grad_of[id(x)][b])[..., :n, :]

            inputs = rel(embeds).sum(-1)  # (T,)
            extra = {name: rel(x).sum(-1) for name, x in record.embeddings.items()}  # name -> (T,)
            hidden = torch.stack([rel(h).sum(-1) for h in record.hidden])  # (L + 1, T)
            # (L, T, T): heads summed; ½: the share of A in the uniform rule on A·V (v gets the other ½)
            attn = torch.stack([0.5 * rel(a)[..., :n].sum(0) for a in record.attn]) if record.attn else None
            if attn is not None:
                attn_total = attn.sum((1, 2))  # (L,) Σ R(A)
            else:  # Σ_ij A_ij ∂A_ij = Σ_i O_i · ∂O_i (∂A = ∂O Vᵀ): the outputs (B, T, H, D) suffice
                attn_total = torch.stack([0.5 * (o[b, :n] * grad_of[id(o)][b, :n]).sum() for o in record.out])

            def projection_relevance(pairs: list[tuple[Tensor, slice]], rel=rel) -> Tensor:
                return torch.stack([rel(x)[..., part].sum() for x, part in pairs])  # (L,)

            softmax_absorbed = attn_total - projection_relevance(record.q) - projection_relevance(record.k)
            logit = explained[b].detach()
            embedding_residual = logit - inputs.sum() - sum(r.sum() for r in extra.values())
            results.append(
                AttnLRPResult(
                    logit=logit,
                    target=chosen[b],
                    logits=rows[b].detach(),
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
            )
        return results
