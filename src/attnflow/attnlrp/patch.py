"""Apply the AttnLRP rules to ONE model instance for the duration of a ``with`` block.

Nothing global is touched: transformers' modules and functions stay as they are. Inside
``attnlrp_rules(model)``, on that instance only,

- the forward of every LayerNorm / LlamaRMSNorm, element-wise activation and gated MLP is an
  instance attribute computing the same values with the rule's backward (``rules``);
- forward hooks on the q, k, v projections scale their gradient by 1/4, 1/4, 1/2 (the uniform
  rule on q·kᵀ and on A·V; the eager attention itself runs unchanged), and, with ε > 0, every
  linear output gets the ε rule;
- forward hooks record the tensors whose relevance is reported (word / position / token-type
  embeddings, the hidden states as transformers' ``output_hidden_states``, the attention
  probabilities, the q and k projections);
- the model is in eval mode (dropout = identity, as lxt).

``attention`` picks how the attention itself runs (the rules never change it, they only scale
the gradients at q, k, v): "eager" (the model's eager attention; its probabilities recorded, so
that R(A) can be read off them), "sdpa" (torch's fused scaled-dot-product kernels, which never
form the (B, H, T, T) probabilities, forward or backward) or "checkpoint" (the eager attention,
its probabilities recomputed in the backward instead of saved). The last two record each layer's
attention output O = A·V instead of A: Σ A ⊙ ∂A = Σ O ⊙ ∂O (∂A = ∂O Vᵀ, so
Σ_j A_ij ∂A_ij = ∂O_i · Σ_j A_ij V_j), which is all the conservation bookkeeping needs.

On exit, even on error, the instance attributes are removed, the hooks detached and every
module's train/eval flag restored: the instance is as before.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .rules import epsilon_rule, identity_rule, layer_norm_identity, rms_norm_identity, scale_gradient

__all__ = [
    "ARCHITECTURES",
    "ATTENTION",
    "SUPPORTED",
    "Architecture",
    "Recording",
    "architecture",
    "attnlrp_rules",
    "register_architecture",
]

Q_K_FACTOR = 0.25  # uniform rule on q·kᵀ (1/2) times the A share of the uniform rule on A·V (1/2)
V_FACTOR = 0.5  # uniform rule on A·V
GATE_FACTOR = 0.5  # uniform rule on act(gate) · up
# How the attention runs under the rules (see the module docstring): eager records A; the others
# never keep a (B, H, T, T) tensor for the backward and record the attention output instead.
ATTENTION = ("eager", "sdpa", "checkpoint")
# the names they are registered under in transformers' AttentionInterface
_IMPLEMENTATIONS = {"sdpa": "attnflow_lrp_sdpa", "checkpoint": "attnflow_lrp_checkpoint"}
_local = threading.local()


@dataclass(frozen=True)
class Architecture:
    """Where the parts of one transformers model class are (attribute paths)."""

    backbone: str  # the base model under the task model
    layers: str  # the layer list, under backbone
    attention: str  # the self-attention module, under each layer (returns (output, probabilities))
    qkv: tuple[str, ...]  # q, k, v projections under attention; one name = fused (GPT-2's c_attn)
    embeddings: dict[str, str]  # extra embedding tables added to the word embeddings, under backbone
    final: str | None  # module whose output is the last hidden state; None: the last layer's output
    head: str  # "classifier": logits (B, C); "lm": logits (B, T, V)


_BERT = Architecture(
    "bert", "encoder.layer", "attention.self", ("query", "key", "value"),
    {"position": "embeddings.position_embeddings", "token_type": "embeddings.token_type_embeddings"},
    None, "classifier",
)  # fmt: skip
_GPT2 = Architecture("transformer", "h", "attn", ("c_attn",), {"position": "wpe"}, "ln_f", "lm")
_LLAMA = Architecture("model", "layers", "self_attn", ("q_proj", "k_proj", "v_proj"), {}, "norm", "lm")

# class name -> where its parts are. Explicit: an architecture is supported once its modules have
# been checked to be covered by the rules below (any other module would silently get plain gradients).
ARCHITECTURES: dict[str, Architecture] = {
    "BertForSequenceClassification": _BERT,
    "GPT2LMHeadModel": _GPT2,
    "GPT2ForSequenceClassification": replace(_GPT2, head="classifier"),
    "LlamaForCausalLM": _LLAMA,
    "LlamaForSequenceClassification": replace(_LLAMA, head="classifier"),
}
# The built-in classes (ARCHITECTURES holds any registered since).
SUPPORTED = tuple(ARCHITECTURES)


def register_architecture(class_name: str, parts: Architecture) -> None:
    """Add (or replace) a transformers model class AttnLRP explains: where its parts are. Check
    first that every module of its layers is covered by the rules (a gated MLP, a norm or an
    activation they do not know would silently get plain gradients). See docs/develop/add-a-method.md."""
    if not isinstance(parts, Architecture):
        raise ValueError(f"register_architecture({class_name!r}, ...) takes an attnflow.attnlrp.Architecture")
    ARCHITECTURES[class_name] = parts


_ACTIVATIONS = {"GELUActivation", "NewGELUActivation", "GELU", "SiLUActivation", "SiLU", "Tanh", "ReLU"}
_GATED_MLPS = {"LlamaMLP"}


def architecture(model: nn.Module, *, eager: bool = True) -> Architecture:
    """The model's ``Architecture``; refuses (one line) an unsupported class or, with eager=True
    (the rules on recorded probabilities), non-eager attention."""
    name = type(model).__name__
    if name not in ARCHITECTURES:
        raise TypeError(
            f"attnlrp has no rules for {name}; supported: {', '.join(ARCHITECTURES)}. Add a class with "
            "attnflow.attnlrp.register_architecture(name, Architecture(...)) (docs/develop/add-a-method.md)"
        )
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if eager and impl != "eager":
        raise ValueError(
            f"attnlrp needs eager attention (it rewrites the gradient of the attention probabilities); "
            f"{name} uses {impl!r}: load it with attn_implementation='eager'"
        )
    return ARCHITECTURES[name]


@dataclass
class Recording:
    """The tensors recorded in one forward pass under ``attnlrp_rules`` (batch axis first)."""

    embeddings: dict[str, Tensor] = field(default_factory=dict)  # name -> (B or 1, T, C)
    hidden: list[Tensor] = field(default_factory=list)  # L + 1 x (B, T, C), output_hidden_states order
    attn: list[Tensor] = field(default_factory=list)  # L x (B, H, T, T) attention probabilities
    # L x (projection output (B, T, ·) after the ε rule, the channels that are q / k in it):
    # separate projections record (q, :) and (k, :); a fused [q | k | v] one its thirds
    q: list[tuple[Tensor, slice]] = field(default_factory=list)
    k: list[tuple[Tensor, slice]] = field(default_factory=list)
    out: list[Tensor] = field(default_factory=list)  # L x (B, T, H, D) attention outputs (not eager)


def _get(module: nn.Module, path: str) -> Any:
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _first_tensor(output: Any) -> Tensor:
    return output if isinstance(output, Tensor) else output[0]


def _identity_forward(module: nn.Module, x: Tensor) -> Tensor:
    return identity_rule(type(module).forward.__get__(module), x)


def _layer_norm_forward(module: nn.LayerNorm, x: Tensor) -> Tensor:
    return layer_norm_identity(x, module.weight, module.bias, eps=module.eps)


def _rms_norm_forward(module: nn.Module, x: Tensor) -> Tensor:
    return rms_norm_identity(x, module.weight, eps=module.variance_epsilon)


def _gated_mlp_forward(module: nn.Module, x: Tensor) -> Tensor:
    # down(act(gate x) · up x): the activation is already the identity rule (its own forward is
    # swapped), the product gets the uniform rule
    product = module.act_fn(module.gate_proj(x)) * module.up_proj(x)
    return module.down_proj(scale_gradient(product, GATE_FACTOR))


def _rule_forward(module: nn.Module) -> Callable[[nn.Module, Tensor], Tensor] | None:
    name = type(module).__name__
    if isinstance(module, nn.LayerNorm):
        return _layer_norm_forward
    if name == "LlamaRMSNorm":
        return _rms_norm_forward
    if name in _ACTIVATIONS:
        return _identity_forward
    if name in _GATED_MLPS:
        return _gated_mlp_forward
    return None


def _is_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"  # GPT-2's transposed linear


@contextlib.contextmanager
def attnlrp_rules(model: nn.Module, *, epsilon: float = 0.0, attention: str = "eager") -> Iterator[Recording]:
    """Within the block, ``model``'s backward is AttnLRP's; yields the ``Recording`` of the forward.

    Run one forward on ``inputs_embeds`` inside the block, then x ⊙ ∂logit/∂x is the AttnLRP
    relevance of every recorded x. attention: one of ATTENTION (module docstring); "eager" needs
    a model loaded with eager attention, the others set their own for the block. The instance is
    restored on exit, also on error.
    """
    if attention not in ATTENTION:
        raise ValueError(f"attnlrp attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    arch = architecture(model, eager=attention == "eager")
    backbone = _get(model, arch.backbone)
    layers = list(_get(backbone, arch.layers))
    record = Recording()
    handles: list[Any] = []
    swapped: list[tuple[nn.Module, Any]] = []  # (module, its instance-level forward or None)
    training = {m: m.training for m in model.modules()}
    missing = object()
    configs = [] if attention == "eager" else _attention_configs(model)
    saved_impl = [(config, config._attn_implementation) for config in configs]
    previous = getattr(_local, "record", None)
    try:
        model.eval()
        if attention != "eager":
            _register(attention)
            for config in configs:
                config._attn_implementation_internal = _IMPLEMENTATIONS[attention]
            _local.record = record
        for module in model.modules():
            forward = _rule_forward(module)
            if forward is not None:
                swapped.append((module, module.__dict__.get("forward", missing)))
                module.forward = partial(forward, module)
            if epsilon != 0 and _is_linear(module):
                handles.append(module.register_forward_hook(lambda m, a, out: epsilon_rule(out, epsilon)))

        for name, path in arch.embeddings.items():
            handles.append(_get(backbone, path).register_forward_hook(_recorder(record.embeddings, name)))

        def first_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if not record.hidden:
                record.hidden.append(args[0] if args else kwargs["hidden_states"])

        handles.append(layers[0].register_forward_pre_hook(first_input, with_kwargs=True))
        last = layers if arch.final is None else layers[:-1]
        for layer in last:
            handles.append(
                layer.register_forward_hook(lambda m, a, out: record.hidden.append(_first_tensor(out)))
            )
        if arch.final is not None:
            handles.append(
                _get(backbone, arch.final).register_forward_hook(lambda m, a, out: record.hidden.append(out))
            )

        for layer in layers:
            module = _get(layer, arch.attention)
            if attention == "eager":
                handles.append(module.register_forward_hook(lambda m, a, out: record.attn.append(out[1])))
            if len(arch.qkv) == 1:  # fused [q | k | v] along the last axis
                handles.append(_get(module, arch.qkv[0]).register_forward_hook(_fused_qkv_hook(record)))
            else:
                for part, proj, factor in zip(
                    "qkv", arch.qkv, (Q_K_FACTOR, Q_K_FACTOR, V_FACTOR), strict=True
                ):
                    target = getattr(record, part) if part != "v" else None
                    handles.append(_get(module, proj).register_forward_hook(_qkv_hook(target, factor)))
        yield record
    finally:
        _local.record = previous
        for config, impl in saved_impl:
            config._attn_implementation_internal = impl
        for handle in handles:
            handle.remove()
        for module, forward in swapped:
            if forward is missing:
                del module.forward
            else:
                module.forward = forward
        for module, flag in training.items():
            module.training = flag


def _recorder(store: dict[str, Tensor], name: str) -> Callable[..., Tensor]:
    def hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        if torch.is_grad_enabled() and not output.requires_grad:  # a frozen table: its output a leaf
            output = output.detach().requires_grad_(True)  # (same value, same gradient downstream)
        store[name] = output
        return output

    return hook


def _qkv_hook(store: list[tuple[Tensor, slice]] | None, factor: float) -> Callable[..., Tensor]:
    # registered after the ε hook of the same module, so it sees (and records) the ε-ruled output
    def hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        if store is not None:
            store.append((output, slice(None)))
        return scale_gradient(output, factor)

    return hook


def _fused_qkv_hook(record: Recording) -> Callable[..., Tensor]:
    def hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        c = output.shape[-1] // 3
        record.q.append((output, slice(0, c)))
        record.k.append((output, slice(c, 2 * c)))
        factor = torch.full((3 * c,), Q_K_FACTOR, dtype=output.dtype, device=output.device)  # (3C,)
        factor[2 * c :] = V_FACTOR
        return scale_gradient(output, factor)

    return hook


def _attention_configs(model: nn.Module) -> list[Any]:
    from attnflow.bridge.eager import attention_configs

    return attention_configs(model)


def _register(attention: str) -> None:
    """Register the attention of one ATTENTION mode (not eager) in transformers' interfaces, once."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    name = _IMPLEMENTATIONS[attention]
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, partial(_recorded_attention, attention))
        mask = "sdpa" if attention == "sdpa" else "eager"  # the mask layout of the kernel that runs
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[mask])


def _recorded_attention(
    attention: str, module: nn.Module, query: Tensor, key: Tensor, value: Tensor, mask: Any = None, **kwargs
) -> tuple[Tensor, None]:
    """The attention of one ATTENTION mode: torch's fused kernels ("sdpa") or the model's eager
    attention recomputed in the backward ("checkpoint"); records the output (B, T, H, D) in the
    active ``Recording`` and returns no probabilities."""
    if attention == "sdpa":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        out, _ = sdpa_attention_forward(module, query, key, value, mask, **kwargs)
    else:
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is None:
            raise RuntimeError(
                f"{type(module).__name__} has no eager_attention_forward in {type(module).__module__}: "
                "attnlrp's checkpointed attention needs transformers' attention interface"
            )
        if torch.is_grad_enabled():  # probabilities recomputed in the backward, never saved
            out, _ = checkpoint(eager, module, query, key, value, mask, use_reentrant=False, **kwargs)
        else:
            out, _ = eager(module, query, key, value, mask, **kwargs)
    record = getattr(_local, "record", None)
    if record is not None:
        record.out.append(out)
    return out, None
