"""Eager attention on demand: switch a transformers model to eager attention for one forward.

SDPA and flash attention never form the attention probabilities; `eager_attention` switches
every config of a model to eager and back, and `AttentionUnavailableError` says when it cannot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["AttentionUnavailableError", "NoOutputHeadError", "attention_configs", "eager_attention"]


class AttentionUnavailableError(ValueError):
    """The model cannot return attention probabilities (no attention layers, or SDPA / flash only)."""


class NoOutputHeadError(ValueError):
    """A class target was asked of a model without logits (a bare encoder such as the packaged MiniLM)."""


def attention_configs(model: Any) -> list[Any]:
    """Every config whose ``_attn_implementation`` steers part of ``model``: the model's own, its
    sub-configs (any depth) and those of sub-models, each once."""
    seen: dict[int, Any] = {}
    todo = [model.config]
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            todo.append(config)
    while todo:
        config = todo.pop()
        if id(config) in seen:
            continue
        seen[id(config)] = config
        for key in getattr(config, "sub_configs", {}) or {}:
            sub = getattr(config, key, None)
            if sub is not None and hasattr(sub, "_attn_implementation"):
                todo.append(sub)
    return list(seen.values())


@contextmanager
def eager_attention(model: Any) -> Iterator[Any]:
    """Switch a transformers model (and every sub-model / sub-config) to eager attention, restore after.

    Eager is the only implementation that forms the probabilities softmax(QK^T / sqrt(d) + mask);
    SDPA and flash attention fuse them away. The original implementation of every config is put
    back on exit, also when the body raises. Raises AttentionUnavailableError when the model is not
    a transformers model or refuses to switch (it then keeps its implementation).

    >>> from transformers import BertConfig, BertModel
    >>> model = BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                              intermediate_size=8, vocab_size=10), add_pooling_layer=False)
    >>> model.config._attn_implementation
    'sdpa'
    >>> with eager_attention(model):
    ...     model.config._attn_implementation
    'eager'
    >>> model.config._attn_implementation
    'sdpa'
    """
    if not hasattr(model, "set_attn_implementation") or not hasattr(model, "config"):
        raise AttentionUnavailableError(
            f"{type(model).__name__} is not a Hugging Face transformers model (no set_attn_implementation); "
            "attnflow.hf needs a transformers PreTrainedModel"
        )
    configs = attention_configs(model)
    saved = [(config, config._attn_implementation) for config in configs]
    try:
        if any(impl != "eager" for _, impl in saved):
            try:
                model.set_attn_implementation("eager")
            except (ValueError, ImportError, NotImplementedError) as exc:
                raise AttentionUnavailableError(
                    f"{type(model).__name__} cannot switch to eager attention: {exc}"
                ) from exc
        # set_attn_implementation only *warns* for models it cannot switch: check every config.
        stuck = sorted({f"{type(c).__name__}={c._attn_implementation}" for c in configs if not _is_eager(c)})
        if stuck:
            raise AttentionUnavailableError(
                f"{type(model).__name__} did not switch to eager attention ({', '.join(stuck)}); "
                "it does not use transformers' attention interface. Load it with "
                "attn_implementation='eager' so that it can return attention probabilities"
            )
        yield model
    finally:
        for config, impl in saved:
            # the internal attribute: the public setter would also overwrite the sub-configs
            config._attn_implementation_internal = impl


def _is_eager(config: Any) -> bool:
    # None means "not chosen yet" (falls back to eager in attention modules)
    return config._attn_implementation in (None, "eager")
