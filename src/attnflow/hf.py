"""Explain any Hugging Face model: attention capture that survives SDPA, and one-call explanations.

Transformers 5 runs attention through SDPA by default, and SDPA never forms the attention
probabilities: ``output_attentions=True`` then returns an *empty* tuple with only a log warning.
Here a model is switched to eager attention for the forward that needs it and switched back
afterwards (`eager_attention`), and empty or missing attentions raise `AttentionUnavailableError`
instead of passing silently. Eager attentions are nodes of the autograd graph, so the gradient of
a score with respect to every attention probability comes from the same forward
(`forward_attentions(..., target=...)`).

Axis order of every attention tensor: [batch, layer, head, query, key]. Padding (the batch's
``attention_mask``) is exactly 0 in every row and column.

`explain_text` / `explain_image` run a model once and apply the explainers of
`attnflow.explain.EXPLAINERS` ("raw", "rollout", "flow", ...), returning an `Explanation`:
the display tokens and, per method, a map [layer, key] for the explained query row.

>>> merge_words(["[CLS]", "un", "##believ", "##able", "!"], [0.1, 0.2, 0.3, 0.1, 0.3])[0]
['[CLS]', 'unbelievable', '!']
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnflow._extras import require_modules, requires_extra

with requires_extra("attnflow.hf (explaining Hugging Face models)"):
    import torch

    require_modules("attnflow.hf (explaining Hugging Face models)", "transformers")  # found, not imported

from attnflow.models.unsafe import UnsafeCheckpointError, is_unsafe_pickle, unsafe_checkpoint_error

__all__ = [
    "INPUT_PROVIDERS",
    "AttentionOutput",
    "AttentionUnavailableError",
    "Explanation",
    "InputContext",
    "NoOutputHeadError",
    "UnsafeCheckpointError",
    "check_vocabulary",
    "eager_attention",
    "explain_image",
    "explain_text",
    "explain_texts",
    "forward_attentions",
    "load_explanations",
    "load_model",
    "max_input_tokens",
    "merge_scores",
    "merge_words",
    "save_explanations",
    "token_labels",
    "word_groups",
]

# Keys a tokenizer may add to its output that no model forward takes.
_TOKENIZER_ONLY_KEYS = frozenset(
    {"offset_mapping", "special_tokens_mask", "overflow_to_sample_mapping", "length", "word_ids"}
)
# Sub-word markers: WordPiece continues a word with "##"; byte-level BPE (GPT-2, RoBERTa, Llama 3)
# and SentencePiece (Llama 2, T5) start a word with "Ġ" / "▁".
WORDPIECE_CONTINUATION = "##"
WORD_START_MARKERS = ("Ġ", "▁")
# A tokenizer's "no limit" sentinel is ~1e30; anything above this is not a real limit.
_NO_LIMIT = 10**9
# Logits longer than this (a language model's vocabulary) are left out of `Explanation.to_dict`.
MAX_LOGITS_IN_DICT = 1024
# A tokenizer that maps more than this share of an input's tokens to its unknown token is refused:
# a model folder without its tokenizer files gets one that knows only the special tokens, so every
# word becomes [UNK] and the maps explain nothing.
UNK_SHARE_MAX = 0.5
# The files a tokenizer is built from (fast tokenizers, WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
    "tokenizer.model",
)  # fmt: skip


class AttentionUnavailableError(ValueError):
    """The model cannot return attention probabilities (no attention layers, or SDPA / flash only)."""


class NoOutputHeadError(ValueError):
    """A class target was asked of a model without logits (a bare encoder such as the packaged MiniLM)."""


# --------------------------------------------------------------------------------------------------
# Eager attention on demand
# --------------------------------------------------------------------------------------------------


def _attention_configs(model: Any) -> list[Any]:
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
    configs = _attention_configs(model)
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


# --------------------------------------------------------------------------------------------------
# One forward: logits, attentions and their gradients
# --------------------------------------------------------------------------------------------------

Target = int | str | Sequence[int] | torch.Tensor | Callable[[Any], torch.Tensor] | None


@dataclass
class AttentionOutput:
    """What `forward_attentions` returns (all tensors detached; axis order [batch, layer, head, query, key])."""

    logits: torch.Tensor | None  # (B, C), or (B, T, V) for language models; None for bare encoders
    attentions: torch.Tensor  # (B, L, H, T, T), padding rows / columns exactly 0
    attention_mask: torch.Tensor | None  # (B, T) bool, True = real token; None = all real (ViT)
    attention_grads: torch.Tensor | None = None  # d score / d attentions, shape and padding as attentions
    scores: torch.Tensor | None = None  # (B,) the differentiated scores
    target: torch.Tensor | None = None  # (B,) class / token ids behind `scores` (None for a callable)
    positions: torch.Tensor | None = None  # (B,) position whose logits were scored (language models)


def _model_inputs(batch: Any, device: torch.device) -> dict[str, Any]:
    """The tokenizer's / image processor's dict (or bare pixel_values) as model keyword arguments."""
    if isinstance(batch, torch.Tensor):
        batch = {"pixel_values": batch}
    if not isinstance(batch, Mapping):
        raise ValueError(
            f"batch must be the tokenizer's dict of tensors or a pixel_values tensor, got {type(batch).__name__}"
        )
    inputs = {}
    for key, value in batch.items():
        if key in _TOKENIZER_ONLY_KEYS:
            continue
        inputs[key] = value.to(device) if isinstance(value, torch.Tensor) else value
    if not inputs:
        raise ValueError("batch is empty: expected input_ids (text) or pixel_values (images)")
    return inputs


def _zero_padding(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """x (B, L, H, T, T) with rows and columns of padded positions set to exactly 0."""
    if valid is None:
        return x
    keep = valid[:, None, None, :, None] & valid[:, None, None, None, :]  # (B, 1, 1, T, T)
    return x.masked_fill(~keep, 0.0)


def _last_positions(
    valid: torch.Tensor | None, batch: int, tokens: int, device: torch.device
) -> torch.Tensor:
    """(B,) index of the last real token of each sample (either padding side)."""
    if valid is None:
        return torch.full((batch,), tokens - 1, dtype=torch.long, device=device)
    idx = torch.arange(tokens, device=valid.device)
    return torch.where(valid, idx, -1).max(dim=1).values.to(device)


def _class_logits(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, C) logits; for language-model logits (B, T, V) those at `positions` (B,)."""
    if logits.ndim == 3:
        return logits[torch.arange(logits.shape[0], device=logits.device), positions]
    if logits.ndim != 2:
        raise ValueError(
            f"expected logits of shape (batch, classes) or (batch, tokens, vocab), got {tuple(logits.shape)}"
        )
    return logits


def _target_scores(
    out: Any, target: Target, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(scores (B,), target ids (B,) or None) for `target` on the model output `out`."""
    logits = getattr(out, "logits", None)
    if callable(target) and not isinstance(target, torch.Tensor):
        scores = target(logits if logits is not None else out)
        if not isinstance(scores, torch.Tensor):
            raise ValueError(
                f"a callable target must return a torch tensor of shape (batch,), got {type(scores).__name__}"
            )
        batch = positions.shape[0]
        if scores.shape != (batch,):
            raise ValueError(
                f"a callable target must return scores of shape ({batch},), got {tuple(scores.shape)}"
            )
        if not scores.requires_grad:
            raise ValueError("the callable target's scores do not depend on the model output (no gradient)")
        return scores, None
    if logits is None:
        raise NoOutputHeadError(
            f"the model has no output head ({type(out).__name__} holds no logits), so there is no class to "
            "explain with gradients: use a classifier or language model, or pass target as a callable "
            "output -> (batch,) scores, e.g. lambda out: out.last_hidden_state[:, 0].norm(dim=-1)"
        )
    z = _class_logits(logits, positions)  # (B, C)
    batch, classes = z.shape
    if isinstance(target, str):
        if target != "predicted":
            raise ValueError(
                f"target must be 'predicted', a class index, a sequence of them or a callable, got {target!r}"
            )
        ids = z.detach().argmax(dim=-1)
    elif isinstance(target, bool):
        raise ValueError(f"target must be a class index, not a bool ({target!r})")
    elif isinstance(target, int | np.integer):
        ids = torch.full((batch,), int(target), dtype=torch.long, device=z.device)
    else:
        ids = torch.as_tensor(np.asarray(target) if not isinstance(target, torch.Tensor) else target)
        if ids.ndim != 1 or ids.shape[0] != batch or ids.dtype.is_floating_point:
            raise ValueError(f"a per-sample target must be {batch} integer class indices, got {target!r}")
        ids = ids.to(device=z.device, dtype=torch.long)
    if ((ids < 0) | (ids >= classes)).any():
        raise ValueError(f"target class out of range: the model has {classes} classes, got {ids.tolist()}")
    return z.gather(1, ids[:, None]).squeeze(1), ids


def _stack_attentions(out: Any, model: Any) -> tuple[torch.Tensor, ...]:
    """The per-layer attentions of `out`, checked: present, non-empty, one shape."""
    name = type(model).__name__
    layers = getattr(out, "attentions", None)
    if layers is None and getattr(out, "encoder_attentions", None) is not None:
        raise AttentionUnavailableError(
            f"{name} is an encoder-decoder model (encoder_attentions / decoder_attentions); "
            "attnflow explains encoder-only and decoder-only models"
        )
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if layers is None:
        raise AttentionUnavailableError(
            f"{name} returned no attentions (its output has none): the model has no attention layers "
            "to explain, or it cannot return attention probabilities"
        )
    layers = tuple(layers)
    if not layers or any(a is None for a in layers):
        raise AttentionUnavailableError(
            f"{name} returned empty attentions with attn_implementation={impl!r}: SDPA and flash attention "
            "never form attention probabilities; run it under eager_attention(model)"
        )
    shapes = {tuple(a.shape) for a in layers}
    if len(shapes) != 1 or len(next(iter(shapes))) != 4:
        raise AttentionUnavailableError(
            f"{name} returned attentions of shapes {sorted(shapes)}; expected one (batch, head, query, key) shape"
        )
    return layers


def forward_attentions(
    model: Any, batch: Any, *, target: Target = None, positions: torch.Tensor | None = None
) -> AttentionOutput:
    """One forward of a transformers model, returning logits, attentions and (optionally) their gradients.

    attentions[b, l, h, i, j] = softmax(q_i k_j^T / sqrt(d) + mask)_j of head h in layer l, taken
    from eager attention (switched on for this call, then restored). Padding positions (where the
    batch's attention_mask is 0) are exactly 0 in rows and columns.

    With a target, attention_grads = d score_b / d attentions[b] (same shape and padding), from
    the same forward: eager attentions are nodes of the autograd graph. The batch's scores are
    summed before differentiating, which keeps them per sample because samples do not interact.
    target:
      - "predicted": the arg-max class; an int: that class for every sample; a sequence of ints:
        one class per sample;
      - for language models (logits (B, T, V)) these are token ids scored at `positions` (B,),
        by default the last real position of each sample (a causal LM's next-token prediction;
        a masked LM explains its mask position);
      - a callable: logits (or, for models without logits, the model output) -> (B,) scores,
        e.g. ``lambda z: z[:, 3, 42]`` for the logit of token 42 at position 3.

    batch: the tokenizer's dict of tensors (input_ids, attention_mask, ...), or pixel_values
    (B, C, H, W) / {"pixel_values": ...} for vision transformers (no padding: every position is
    real). The model runs in eval mode (dropout off) and gets its training flag back afterwards.
    Raises AttentionUnavailableError when the model returns no (or empty) attentions.

    >>> import torch
    >>> from transformers import BertConfig, BertForSequenceClassification
    >>> _ = torch.manual_seed(0)
    >>> model = BertForSequenceClassification(BertConfig(hidden_size=8, num_hidden_layers=2,
    ...     num_attention_heads=2, intermediate_size=8, vocab_size=10))
    >>> batch = {"input_ids": torch.tensor([[2, 5, 3], [2, 3, 0]]),
    ...          "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}
    >>> out = forward_attentions(model, batch, target="predicted")
    >>> tuple(out.attentions.shape), tuple(out.attention_grads.shape)  # (B, L, H, T, T)
    ((2, 2, 2, 3, 3), (2, 2, 2, 3, 3))
    >>> out.attentions[1, :, :, 2].abs().sum().item(), out.attentions[1, :, :, :, 2].abs().sum().item()
    (0.0, 0.0)
    """
    device = _model_device(model)
    if device.type == "meta":
        raise ValueError(
            f"{type(model).__name__}'s weights are on the 'meta' device (shapes without values, e.g. built "
            "under init_empty_weights or loaded with device_map='meta'); load the real weights first"
        )
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        raise AttentionUnavailableError(
            f"{type(model).__name__} is an encoder-decoder model: attnflow explains encoder-only and "
            "decoder-only models (an encoder-decoder's map would need a decoder prefix and cross-attention)"
        )
    inputs = _model_inputs(batch, device)
    mask = inputs.get("attention_mask")
    want_grad = target is not None
    was_training = model.training
    model.eval()
    try:
        with eager_attention(model), torch.set_grad_enabled(want_grad):
            try:
                out = model(**inputs, output_attentions=True, return_dict=True)
            except TypeError as exc:
                if "output_attentions" in str(exc):
                    raise AttentionUnavailableError(
                        f"{type(model).__name__} cannot return attentions: {exc}"
                    ) from exc
                raise
    finally:
        model.train(was_training)
    layers = _stack_attentions(out, model)
    bsz, _, tokens, _ = layers[0].shape
    valid = None if mask is None else mask.to(device=layers[0].device).bool()  # (B, T)
    logits = getattr(out, "logits", None)
    if positions is None:
        positions = _last_positions(valid, bsz, tokens, layers[0].device)
    else:
        positions = torch.as_tensor(positions, dtype=torch.long, device=layers[0].device)
        if positions.shape != (bsz,) or ((positions < 0) | (positions >= tokens)).any():
            raise ValueError(f"positions must be {bsz} indices in [0, {tokens}), got {positions.tolist()}")
    result = AttentionOutput(
        logits=None if logits is None else logits.detach(),
        attentions=_zero_padding(torch.stack([a.detach() for a in layers], dim=1), valid),  # (B, L, H, T, T)
        attention_mask=valid,
    )
    if logits is not None and logits.ndim == 3:
        result.positions = positions
    if want_grad:
        if not layers[0].requires_grad:
            raise AttentionUnavailableError(
                f"{type(model).__name__}'s attentions are not part of the autograd graph; cannot differentiate"
            )
        scores, ids = _target_scores(out, target, positions)
        grads = torch.autograd.grad(scores.sum(), layers, allow_unused=True)
        grads = [torch.zeros_like(a) if g is None else g for a, g in zip(layers, grads, strict=True)]
        result.attention_grads = _zero_padding(torch.stack(grads, dim=1), valid)  # (B, L, H, T, T)
        result.scores = scores.detach()
        result.target = ids
    return result


def _model_device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


# --------------------------------------------------------------------------------------------------
# Tokens for display, sub-words merged into words
# --------------------------------------------------------------------------------------------------


def word_groups(tokens: Sequence[str], *, special: Sequence[str] = ()) -> list[list[int]]:
    """Positions of the tokens that form each word, in order (every position in exactly one group).

    The scheme is read from the tokens: WordPiece pieces "##x" continue the previous word; with
    byte-level BPE ("Ġ") or SentencePiece ("▁") markers, a token without the marker continues the
    previous word. Special tokens ([CLS], <|endoftext|>, ...) are always words of their own.

    >>> word_groups(["[CLS]", "un", "##believ", "##able", "!", "[SEP]"], special=["[CLS]", "[SEP]"])
    [[0], [1, 2, 3], [4], [5]]
    >>> word_groups(["The", "Ġunbel", "iev", "able", "Ġfilm"])
    [[0], [1, 2, 3], [4]]
    """
    special = set(special)
    marker = next((m for m in WORD_START_MARKERS if any(t.startswith(m) for t in tokens)), None)
    wordpiece = marker is None or any(t.startswith(WORDPIECE_CONTINUATION) for t in tokens)
    groups: list[list[int]] = []
    for i, tok in enumerate(tokens):
        prev_special = i > 0 and tokens[i - 1] in special
        if wordpiece:
            continues = tok.startswith(WORDPIECE_CONTINUATION) and len(tok) > len(WORDPIECE_CONTINUATION)
        else:
            continues = not tok.startswith(marker)
        if groups and continues and tok not in special and not prev_special:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _strip_marker(token: str) -> str:
    for marker in WORD_START_MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            return token[len(marker) :]
    return token


def _word_text(pieces: Sequence[str], tokenizer: Any = None) -> str:
    """The readable text of a group of tokens (markers removed; byte-level bytes decoded)."""
    if tokenizer is not None and hasattr(tokenizer, "convert_tokens_to_string"):
        try:
            text = tokenizer.convert_tokens_to_string(list(pieces)).strip()
        except Exception:  # a tokenizer without a decoder: fall back to marker stripping
            text = ""
        if text:
            return text
    first, rest = pieces[0], pieces[1:]
    text = _strip_marker(first) + "".join(
        p[len(WORDPIECE_CONTINUATION) :] if p.startswith(WORDPIECE_CONTINUATION) else _strip_marker(p)
        for p in rest
    )
    return text or first


def merge_scores(scores: Any, groups: Sequence[Sequence[int]]) -> np.ndarray:
    """Scores [..., token] summed within each group -> [..., group] (attribution mass is kept).

    >>> merge_scores(np.array([[0.1, 0.2, 0.3, 0.4]]), [[0], [1, 2], [3]]).round(3).tolist()
    [[0.1, 0.5, 0.4]]
    """
    x = np.asarray(scores, dtype=np.float64)
    n = sum(len(g) for g in groups)
    if x.shape[-1] != n:
        raise ValueError(f"scores have {x.shape[-1]} tokens on the last axis, the groups cover {n}")
    return np.stack([x[..., list(g)].sum(axis=-1) for g in groups], axis=-1)


def merge_words(
    tokens: Sequence[str], scores: Any = None, *, special: Sequence[str] = (), tokenizer: Any = None
) -> tuple[list[str], np.ndarray | None]:
    """Sub-word tokens merged into words, and scores [..., token] summed over each word's pieces.

    >>> words, s = merge_words(["Ġa", "Ġgre", "at", "Ġfilm"], [0.1, 0.2, 0.3, 0.4])
    >>> words, s.round(3).tolist()
    (['a', 'great', 'film'], [0.1, 0.5, 0.4])
    """
    groups = word_groups(tokens, special=special)
    words = [_word_text([tokens[i] for i in g], tokenizer) for g in groups]
    return words, None if scores is None else merge_scores(scores, groups)


def token_labels(
    tokenizer: Any, input_ids: Sequence[int] | torch.Tensor, *, merge: bool = False
) -> tuple[list[str], list[list[int]]]:
    """Display labels for `input_ids` and the token positions behind each label.

    merge=False: one label per token (markers "Ġ" / "▁" removed, "##" kept so pieces stay
    visible); merge=True: one label per word (see `word_groups`); merge scores with
    `merge_scores(scores, groups)` so they stay aligned with the labels.
    """
    ids = input_ids.tolist() if isinstance(input_ids, torch.Tensor) else list(input_ids)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special = list(getattr(tokenizer, "all_special_tokens", []) or [])
    if merge:
        groups = word_groups(tokens, special=special)
    else:
        groups = [[i] for i in range(len(tokens))]
    return [_label([tokens[i] for i in g], tokenizer, special) for g in groups], groups


def _label(pieces: list[str], tokenizer: Any, special: Sequence[str]) -> str:
    if len(pieces) == 1 and (pieces[0] in special or pieces[0].startswith(WORDPIECE_CONTINUATION)):
        return pieces[0]
    return _word_text(pieces, tokenizer)


# --------------------------------------------------------------------------------------------------
# Explanations
# --------------------------------------------------------------------------------------------------


@dataclass
class Explanation:
    """Per-method token attributions of one input, for every layer.

    maps[method][l, j]: how much displayed token j is attributed to the explained query row at
    layer l (0-based; l = 0 is the paper's L1). `layer` is the layer shown by default
    (non-negative), `row` the explained query position (a token index into the model's tokens)
    or the reduction over rows ("max" / "mean").
    """

    tokens: list[str]
    maps: dict[str, np.ndarray]  # method -> (layer, token) float64
    layer: int
    row: int | str
    logits: np.ndarray | None = None  # (C,), or next-token logits (V,) of a language model
    prediction: int | None = None
    label: str | None = None
    text: str | None = None
    groups: list[list[int]] | None = None  # model-token positions behind each displayed token
    kind: str = "text"  # "text" or "image"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return next(iter(self.maps.values())).shape[0] if self.maps else 0

    def scores(self, method: str | None = None, layer: int | None = None) -> np.ndarray:
        """(token,) attributions of `method` (default: the first) at `layer` (default: self.layer)."""
        if method is None:
            method = next(iter(self.maps))
        if method not in self.maps:
            raise ValueError(f"no method {method!r} in this explanation; it has {sorted(self.maps)}")
        return self.maps[method][self.layer if layer is None else layer]

    def to_pandas(self) -> Any:
        """A tidy DataFrame: one row per (method, layer, token); layer 1-based, as in the report."""
        from attnflow.display import explanation_frame

        return explanation_frame(self)

    def plot(self, methods: Sequence[str] | None = None, *, scale: str = "panel") -> Any:
        """A matplotlib Figure: one [layer x token] heatmap per method, as the CLI's PNG."""
        from attnflow.display import explanation_figure

        return explanation_figure(self, methods=methods, scale=scale)

    def show(self, methods: Sequence[str] | None = None, *, scale: str = "panel") -> Any:
        """Display `plot()` inline in a notebook (IPython), and return the figure."""
        fig = self.plot(methods, scale=scale)
        try:
            from IPython.display import Image, display
        except ImportError:  # not in IPython: the caller gets the figure to save
            return fig
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)  # a PNG: shown whatever matplotlib backend is active
        display(Image(data=buf.getvalue()))
        return fig

    def _repr_html_(self) -> str:
        """The CLI's interactive HTML view (method, layer, tokens shaded), in a notebook cell."""
        from attnflow.display import explanation_html

        return explanation_html(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (maps as nested lists; logits only up to MAX_LOGITS_IN_DICT entries)."""
        d: dict[str, Any] = {
            "kind": self.kind,
            "text": self.text,
            "tokens": list(self.tokens),
            "layer": self.layer,
            "row": self.row,
            "prediction": self.prediction,
            "label": self.label,
            "maps": {m: np.asarray(v, dtype=np.float64).tolist() for m, v in self.maps.items()},
        }
        if self.logits is not None and self.logits.size <= MAX_LOGITS_IN_DICT:
            d["logits"] = np.asarray(self.logits, dtype=np.float64).tolist()
        if self.groups is not None:
            d["groups"] = [list(g) for g in self.groups]
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Explanation:
        return cls(
            tokens=list(d["tokens"]),
            maps={m: np.asarray(v, dtype=np.float64) for m, v in d["maps"].items()},
            layer=int(d["layer"]),
            row=d["row"],
            logits=None if d.get("logits") is None else np.asarray(d["logits"]),
            prediction=d.get("prediction"),
            label=d.get("label"),
            text=d.get("text"),
            groups=d.get("groups"),
            kind=d.get("kind", "text"),
            meta=dict(d.get("meta") or {}),
        )

    def save(self, path: str | Path) -> Path:
        """Write this explanation as .json or .safetensors (by the suffix of `path`)."""
        return save_explanations([self], path)


def save_explanations(explanations: Sequence[Explanation], path: str | Path) -> Path:
    """Write explanations to `path`: ``.json`` (a list of `Explanation.to_dict`) or ``.safetensors``
    (tensor ``"{i}/{method}"`` = map [layer, token] of input i; the rest as JSON in the metadata
    under ``"explanations"``). Written atomically (temporary file, then rename)."""
    from attnflow.io import write_bytes

    path = Path(path)
    if path.suffix == ".json":
        text = json.dumps([e.to_dict() for e in explanations], ensure_ascii=False)
        return write_bytes(path, text.encode("utf-8"))
    if path.suffix == ".safetensors":
        from safetensors.numpy import save

        tensors = {
            f"{i}/{m}": np.ascontiguousarray(v, dtype=np.float32)
            for i, e in enumerate(explanations)
            for m, v in e.maps.items()
        }
        rest = []
        for e in explanations:
            d = e.to_dict()
            d.pop("maps")
            d["methods"] = list(e.maps)
            rest.append(d)
        return write_bytes(
            path, save(tensors, metadata={"explanations": json.dumps(rest, ensure_ascii=False)})
        )
    raise ValueError(f"unknown explanation file type {path.suffix!r}: use .json or .safetensors")


def load_explanations(path: str | Path) -> list[Explanation]:
    """Read what `save_explanations` wrote (.json or .safetensors).

    Raises FileNotFoundError for a missing file and ValueError (attnflow.io.ArtifactError) naming
    the file and what is wrong with it for anything else: not JSON / safetensors, or not a list of
    explanations (tokens, maps [layer, token] per method, layer, row).
    """
    from attnflow.io import ArtifactError

    path = Path(path)
    if path.suffix not in (".json", ".safetensors"):
        raise ValueError(f"unknown explanation file type {path.suffix!r}: use .json or .safetensors")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such explanations file")
    try:
        records = _read_explanation_json(path) if path.suffix == ".json" else _read_explanation_tensors(path)
        if not isinstance(records, list):
            raise ArtifactError(f"expected a list of explanations, found a {type(records).__name__}")
        return [_explanation_from_record(d, i) for i, d in enumerate(records)]
    except ArtifactError as exc:
        raise ArtifactError(f"{path}: not an explanations file: {exc}") from None
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ArtifactError(f"{path}: not an explanations file ({type(exc).__name__}: {first})") from exc


def _read_explanation_json(path: Path) -> Any:
    from attnflow.io import ArtifactError

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"not UTF-8 text (byte offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})") from None


def _read_explanation_tensors(path: Path) -> list[Any]:
    from safetensors import SafetensorError, safe_open

    from attnflow.io import ArtifactError

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if "explanations" not in meta:
                raise ArtifactError(
                    "no 'explanations' entry in its metadata (not written by save_explanations)"
                )
            try:
                rest = json.loads(meta["explanations"])
            except json.JSONDecodeError as exc:
                raise ArtifactError(f"its 'explanations' metadata is not valid JSON ({exc.msg})") from None
            if not isinstance(rest, list):
                raise ArtifactError(f"its 'explanations' metadata is a {type(rest).__name__}, not a list")
            names = set(f.keys())
            for i, d in enumerate(rest):
                if not isinstance(d, dict) or not isinstance(d.get("methods"), list):
                    raise ArtifactError(f"explanation {i} has no list of methods in the metadata")
                missing = [f"{i}/{m}" for m in d["methods"] if f"{i}/{m}" not in names]
                if missing:
                    raise ArtifactError(f"tensor(s) {', '.join(missing)} missing")
                d["maps"] = {m: f.get_tensor(f"{i}/{m}").astype(np.float64) for m in d.pop("methods")}
            return rest
    except SafetensorError as exc:
        raise ArtifactError(f"not a readable safetensors file ({exc})") from None


def _explanation_from_record(d: Any, i: int) -> Explanation:
    """Explanation.from_dict with the layout checked; ArtifactError says what is wrong."""
    from attnflow.io import ArtifactError

    if not isinstance(d, dict):
        raise ArtifactError(f"explanation {i} is a {type(d).__name__}, not an object")
    missing = [k for k in ("tokens", "maps", "layer", "row") if k not in d]
    if missing:
        raise ArtifactError(f"explanation {i} lacks {', '.join(missing)}")
    tokens, maps = d["tokens"], d["maps"]
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ArtifactError(f"explanation {i}: tokens must be a list of strings")
    if not isinstance(maps, dict) or not maps:
        raise ArtifactError(f"explanation {i}: maps must be a non-empty object of method -> [layer, token]")
    for m, v in maps.items():
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            raise ArtifactError(f"explanation {i}: map {m!r} is not a numeric [layer, token] table") from None
        if arr.ndim != 2 or arr.shape[1] != len(tokens):
            raise ArtifactError(
                f"explanation {i}: map {m!r} has shape {arr.shape}, expected (layers, {len(tokens)})"
            )
    if isinstance(d["layer"], bool) or not isinstance(d["layer"], int):
        raise ArtifactError(f"explanation {i}: layer must be an integer, got {d['layer']!r}")
    return Explanation.from_dict(d)


@dataclass
class InputContext:
    """What an input provider sees: the model, its inputs, and the forward (with gradients if asked)."""

    model: Any
    inputs: Mapping[str, Any]
    out: AttentionOutput
    target: Target


def _attn_grad(ctx: InputContext) -> torch.Tensor:
    return ctx.out.attention_grads


def _attn_relevance(ctx: InputContext) -> torch.Tensor:
    """LRP relevance R(A) of every attention map (attnflow.lrp, Chefer et al. 2021), same target."""
    if callable(ctx.target) and not isinstance(ctx.target, torch.Tensor):
        raise ValueError(
            "attn_relevance (LRP) explains a class: pass target='predicted', an int or one per sample"
        )
    if "input_ids" not in ctx.inputs:
        raise ValueError("attn_relevance (LRP) needs text inputs (input_ids)")
    from attnflow.lrp import lrp_relevance

    extra = {"token_type_ids": ctx.inputs["token_type_ids"]} if "token_type_ids" in ctx.inputs else {}
    try:
        res = lrp_relevance(
            ctx.model,
            ctx.inputs["input_ids"],
            ctx.inputs.get("attention_mask"),
            target=ctx.out.target,
            **extra,
        )
    except TypeError as exc:  # no LRP rules for this architecture
        raise ValueError(str(exc)) from exc
    return res.attn_relevance


# Extra inputs an explainer may declare (attnflow.explain.EXPLAINER_INPUTS, or keyword-only
# parameters without a default), each made once per batch: provider(ctx) -> (B, L, H, T, T).
INPUT_PROVIDERS: dict[str, Callable[[InputContext], torch.Tensor]] = {
    "attn_grad": _attn_grad,  # d score / d attention of the target (default: the predicted class)
    "attn_relevance": _attn_relevance,  # LRP's R(A), for "chefer_lrp" (BERT / DistilBERT classifiers)
}


def _attnlrp(ctx: InputContext, valid: np.ndarray, positions: torch.Tensor | None) -> list[np.ndarray]:
    """AttnLRP maps (L, T_b) per sample (attnflow.attnlrp.maps), for the target's class / token."""
    from attnflow.attnlrp.maps import attnlrp_maps

    ids = ctx.inputs.get("input_ids") if isinstance(ctx.inputs, Mapping) else None
    if not isinstance(ids, torch.Tensor):
        raise ValueError("attnlrp explains token inputs (input_ids); images are not supported")
    targets = ctx.out.target  # the class / token the gradient pass explained
    if targets is None:
        raise ValueError(
            "attnlrp explains a class or token id: pass target as 'predicted' or ids, not a callable"
        )
    with eager_attention(ctx.model):
        return attnlrp_maps(
            ctx.model, ids, valid, targets=[int(t) for t in targets],
            positions=None if ctx.out.positions is None else ctx.out.positions.tolist(),
            token_type_ids=ctx.inputs.get("token_type_ids"),
        )  # fmt: skip


# Methods computed from the model (one extra pass each), not from the attentions: name -> maker of
# per-sample (L, T_b) maps.
MODEL_METHODS: dict[str, Callable[..., list[np.ndarray]]] = {"attnlrp": _attnlrp}
# Inputs every explainer takes (not "extra").
_STANDARD_PARAMS = frozenset({"attn", "residual", "heads", "rows", "lengths", "mask"})


def _method_specs(methods: str | Sequence[str]) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    """(name, explainer, extra input names) per method, checked against the registry."""
    from attnflow import explain

    names = [methods] if isinstance(methods, str) else list(methods)
    choices = sorted([*explain.EXPLAINERS, *MODEL_METHODS])
    if not names:
        raise ValueError(f"methods is empty; choose from {choices}")
    declared = getattr(explain, "EXPLAINER_INPUTS", {}) or {}
    specs = []
    for name in dict.fromkeys(names):
        if name in MODEL_METHODS:  # computed from the model itself, not from its attentions
            specs.append((name, MODEL_METHODS[name], ()))
            continue
        if name not in explain.EXPLAINERS:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(choices)}")
        fn = explain.EXPLAINERS[name]
        needs = set(declared.get(name, ()))
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            params = []
        needs |= {
            p.name
            for p in params
            if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in _STANDARD_PARAMS
        }
        specs.append((name, fn, tuple(sorted(needs))))
    return specs


def _row_position(rows: str | int, tokens: int, causal: bool) -> int | str:
    """The query row to explain for a sample of `tokens` real tokens: a position, or "max"/"mean"."""
    if rows == "auto":
        rows = "last" if causal else "cls"
    if rows == "cls":
        return 0
    if rows == "last":
        return tokens - 1
    if rows in ("max", "mean"):
        return rows
    if isinstance(rows, bool) or not isinstance(rows, int | np.integer):
        raise ValueError(f"rows must be 'auto', 'cls', 'last', 'max', 'mean' or a token index, got {rows!r}")
    if not -tokens <= rows < tokens:
        raise ValueError(f"rows={rows} is out of range for an input of {tokens} tokens")
    return int(rows) % tokens


def _check_layer(layer: int, layers: int) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int | np.integer) or not -layers <= layer < layers:
        raise ValueError(
            f"layer must be an index in [-{layers}, {layers - 1}] (the model has {layers} layers), got {layer!r}"
        )
    return int(layer) % layers


def _is_causal(model: Any) -> bool:
    """Whether the model's attention is causal, so that "auto" reads the last real token.

    Decoder-only language models predict after their last token, and decoder-only sequence
    classifiers (GPT-2, Llama, Qwen ``ForSequenceClassification``) pool the last non-padding token:
    a causal row 0 sees only itself. Causal: ``config.is_decoder``, a model that can generate, or a
    model type that transformers knows only as a causal LM (never as a masked LM: BERT-type models
    with ``is_decoder=False`` stay bidirectional).
    """
    config = getattr(model, "config", None)
    if getattr(config, "is_decoder", False):
        return True
    can_generate = getattr(model, "can_generate", None)
    if callable(can_generate) and can_generate():
        return True
    model_type = getattr(config, "model_type", None)
    if not model_type:
        return False
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    return (
        model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )


def _pools_without_pad_id(model: Any) -> bool:
    """A decoder-only sequence classifier whose config has no pad_token_id: its head cannot find
    the last real token of a padded batch (transformers refuses batches of more than one)."""
    config = getattr(model, "config", None)
    return (
        type(model).__name__.endswith("ForSequenceClassification")
        and getattr(config, "pad_token_id", None) is None
        and _is_causal(model)
    )


def _is_masked_lm(model: Any) -> bool:
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return type(model).__name__ in set(MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())


def _scored_positions(
    model: Any, inputs: Mapping[str, Any], rows: str | int, mask_token_id: int | None
) -> torch.Tensor | None:
    """(B,) absolute positions whose language-model logits are explained, or None (the default:
    the last real token). An explicit row index is scored where it stands; a masked LM with
    rows="auto" explains the first `mask_token_id` of each sample."""
    ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else None
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        return None
    mask = inputs.get("attention_mask")
    valid = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    idx = [torch.nonzero(v).flatten() for v in valid.cpu()]
    if rows == "auto" and _is_masked_lm(model):
        if mask_token_id is None:
            raise ValueError(
                f"{type(model).__name__} is a masked language model: pass rows=<position> (the token to "
                "explain), or a tokenizer with a mask token so rows='auto' finds it"
            )
        found = []
        for b, i in enumerate(idx):
            hits = torch.nonzero(ids[b].cpu()[i] == mask_token_id).flatten()
            if len(hits) == 0:
                raise ValueError(
                    f"{type(model).__name__} is a masked language model and text {b} has no mask token "
                    f"(id {mask_token_id}): put one where the model should predict, or pass rows=<position>"
                )
            found.append(int(i[hits[0]]))
        return torch.tensor(found)
    if isinstance(rows, bool) or not isinstance(rows, int | np.integer):
        return None
    return torch.tensor([int(i[_row_position(rows, len(i), False)]) for i in idx])


def _explain_batch(
    model: Any,
    inputs: Mapping[str, Any],
    *,
    methods: str | Sequence[str],
    layer: int,
    rows: str | int,
    residual: float,
    heads: str | int,
    target: Target,
    extra_inputs: Mapping[str, Any] | None,
    mask_token_id: int | None = None,
) -> tuple[AttentionOutput, list[dict[str, Any]]]:
    """Run the model once on a batch, then every method: one call for the whole batch when every
    sample explains the same row (padding passed as `mask`), else one call per sample on its real
    tokens. Returns the forward and, per sample, maps (L, T_b), row, layer, logits.

    A language model's logits (and gradients) are read at the explained row when it is a position,
    else at the last real token; a masked LM's "auto" row is the first `mask_token_id`."""
    from attnflow.explain import select_rows

    specs = _method_specs(methods)
    extra_inputs = dict(extra_inputs or {})
    needs = {n for _, _, ns in specs for n in ns}
    missing = sorted(n for n in needs if n not in INPUT_PROVIDERS and n not in extra_inputs)
    if missing:
        who = [name for name, _, ns in specs if set(ns) & set(missing)]
        raise ValueError(
            f"method(s) {who} need input(s) {missing} that attnflow.hf cannot make; pass extra_inputs= "
            "or register a maker in attnflow.hf.INPUT_PROVIDERS"
        )
    # gradients of the target when a method needs them (LRP explains the same target class)
    want_grad = bool(needs - set(extra_inputs)) or any(name in MODEL_METHODS for name, _, _ in specs)
    positions = _scored_positions(model, inputs, rows, mask_token_id)
    out = forward_attentions(model, inputs, target=target if want_grad else None, positions=positions)
    ctx = InputContext(model=model, inputs=inputs, out=out, target=target)
    made = {n: INPUT_PROVIDERS[n](ctx) for n in sorted(needs) if n not in extra_inputs}
    bsz, num_layers, _, tokens, _ = out.attentions.shape
    layer = _check_layer(layer, num_layers)
    causal = _is_causal(model)
    valid = out.attention_mask
    valid = np.ones((bsz, tokens), dtype=bool) if valid is None else valid.cpu().numpy()  # (B, T)
    idx = [np.flatnonzero(v) for v in valid]  # real positions of each sample
    if positions is not None and rows == "auto":  # a masked LM: its mask position
        row_of = [int(np.searchsorted(i, int(p))) for i, p in zip(idx, positions, strict=True)]
    else:
        row_of = [_row_position(rows, len(i), causal) for i in idx]
    attn_all = _float64_attentions(out.attentions, valid)  # (B, L, H, T, T)
    made = {
        k: torch.as_tensor(v).detach().to(device="cpu", dtype=torch.float64).numpy() for k, v in made.items()
    }
    maps: list[dict[str, np.ndarray]] = [{} for _ in range(bsz)]
    for name, fn, ns in specs:
        if name in MODEL_METHODS:
            for b, m in enumerate(fn(ctx, valid, out.positions)):
                maps[b][name] = m  # (L, T_b)
            continue
        row = row_of[0]
        shared = all(r == row for r in row_of) and not set(ns) & set(extra_inputs)
        if shared and (isinstance(row, str) or valid[:, row].all()):
            # one call for the batch (same row everywhere, e.g. [CLS]): padding handled by `mask`
            kwargs = {k: made[k] for k in ns}
            m = fn(attn_all, residual=residual, heads=heads, rows=None if isinstance(row, str) else [row],
                   mask=valid, **kwargs)  # fmt: skip
            m = np.asarray(m, dtype=np.float64)  # (B, L, rows, T)
            m = select_rows(m, row, mask=valid) if isinstance(row, str) else m[:, :, 0, :]  # (B, L, T)
            for b in range(bsz):
                maps[b][name] = m[b][:, idx[b]]  # (L, T_b)
            continue
        for b in range(bsz):  # one sample at a time, real tokens only
            i, row = idx[b], row_of[b]
            attn = attn_all[b][:, :, i][:, :, :, i]  # (L, H, T_b, T_b)
            kwargs = {
                k: extra_inputs[k] if k in extra_inputs else made[k][b][:, :, i][:, :, :, i] for k in ns
            }
            m = fn(
                attn, residual=residual, heads=heads, rows=None if isinstance(row, str) else [row], **kwargs
            )
            m = np.asarray(m, dtype=np.float64)  # (L, rows, T_b)
            maps[b][name] = select_rows(m, row) if isinstance(row, str) else m[:, 0, :]  # (L, T_b)
    lm = out.logits is not None and out.logits.ndim == 3
    results = []
    for b in range(bsz):
        logits = None
        if out.logits is not None:
            z = out.logits[b]
            if z.ndim == 2:  # (T, V) language model: the next-token logits after the last real token
                z = z[int(out.positions[b])]
            logits = z.float().cpu().numpy()
        keep = torch.from_numpy(valid[b])
        results.append(
            {"maps": maps[b], "row": row_of[b], "layer": layer, "logits": logits, "lm": lm, "keep": keep}
        )
    return out, results


def _float64_attentions(attentions: torch.Tensor, valid: np.ndarray) -> np.ndarray:
    """float64 numpy attentions (B, L, H, T, T), once per batch, for the explainers.

    float16 / bfloat16 rows are checked against their own dtype's row-sum tolerance
    (attnflow.explain ROW_SUM_TOLS), then rescaled to sum to 1: in float64 the explainers would hold
    them to float32's tolerance, which rounding to 8 significant bits alone can exceed.
    """
    from attnflow.explain._common import ROW_SUM_TOL, head_stack, prepare, row_sum_tolerance

    if row_sum_tolerance(attentions) <= ROW_SUM_TOL:
        return attentions.detach().to(device="cpu", dtype=torch.float64).numpy()
    return head_stack(prepare(attentions, mask=valid), renormalize=True)


def _prediction(model: Any, res: Mapping[str, Any], tokenizer: Any = None) -> tuple[int | None, str | None]:
    """(arg-max class, its label): config.id2label for classifiers, the decoded next token for LMs."""
    logits = res["logits"]
    if logits is None or logits.size == 0:
        return None, None
    pred = int(np.argmax(logits))
    if res["lm"] and tokenizer is not None:
        return pred, tokenizer.decode([pred])
    id2label = getattr(getattr(model, "config", None), "id2label", None) or {}
    return pred, str(id2label.get(pred, pred))


def max_input_tokens(model: Any, tokenizer: Any = None) -> int | None:
    """The most tokens the model takes: min(tokenizer.model_max_length, max_position_embeddings)."""
    limits = []
    n = getattr(tokenizer, "model_max_length", None)
    if isinstance(n, int) and 0 < n < _NO_LIMIT:
        limits.append(n)
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions"):
        n = getattr(config, key, None)
        if isinstance(n, int) and n > 0:
            limits.append(n)
            break
    return min(limits) if limits else None


def _tokenize(
    tokenizer: Any, texts: Sequence[str], *, limit: int | None, truncate: bool, device: torch.device
) -> Any:
    # no padding token (GPT-2): callers send one text at a time, which needs no padding
    kwargs: dict[str, Any] = {
        "padding": getattr(tokenizer, "pad_token", None) is not None,
        "return_tensors": "pt",
    }
    if truncate and limit is not None:
        kwargs.update(truncation=True, max_length=limit)
    if getattr(tokenizer, "padding_side", "right") != "right":
        kwargs["padding_side"] = "right"  # real tokens first: positions as in an unpadded run
    enc = tokenizer(list(texts), **kwargs)
    if limit is not None and not truncate:
        lengths = enc["attention_mask"].sum(dim=1) if "attention_mask" in enc else [enc["input_ids"].shape[1]]
        for text, n in zip(texts, lengths, strict=False):
            if int(n) > limit:
                short = text if len(text) <= 40 else text[:37] + "..."
                raise ValueError(
                    f"text too long for the model: {int(n)} tokens, the model takes at most {limit} "
                    f"({short!r}); shorten it or truncate"
                )
    return enc


def check_vocabulary(
    tokenizer: Any, texts: Sequence[str], *, ids: Sequence[Sequence[int]] | None = None
) -> None:
    """Refuse (ValueError) a tokenizer that maps most of `texts` to its unknown token.

    More than UNK_SHARE_MAX of the tokens (special tokens other than the unknown one left out)
    being the unknown token means the tokenizer does not belong to the model: typically a model
    folder without its tokenizer files, for which transformers builds a tokenizer that knows only
    the special tokens. The message says which tokenizer files the folder has or lacks. `ids`: the
    texts' token ids if already computed.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or not texts:
        return
    if ids is None:
        ids = tokenizer(list(texts), truncation=False)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", None) or []) - {unk}
    tokens = [t for row in ids for t in row if t not in special]
    unknown = sum(t == unk for t in tokens)
    if not tokens or unknown <= UNK_SHARE_MAX * len(tokens):
        return
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    try:
        size = len(tokenizer)
    except TypeError:
        size = None
    vocab = f" (its vocabulary has {size} entries)" if size is not None else ""
    expected = (
        "tokenizer.json, or vocab.txt (WordPiece), vocab.json + merges.txt (BPE), or a SentencePiece model"
    )
    if str(folder) and folder.is_dir():
        present = [f for f in TOKENIZER_FILES if (folder / f).is_file()]
        where = (
            f"{folder} has no tokenizer files (expected {expected})"
            if not present
            else f"{folder} has {', '.join(present)}, which may not belong to this model"
        )
    else:
        where = f"its files are missing or do not belong to the model (expected {expected})"
    raise ValueError(
        f"the tokenizer maps {unknown} of {len(tokens)} input tokens to its unknown token "
        f"{getattr(tokenizer, 'unk_token', None)!r}{vocab}: {where}"
    )


def explain_texts(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    methods: str | Sequence[str] = ("raw", "rollout", "flow"),
    layer: int = -1,
    rows: str | int = "auto",
    residual: float = 0.5,
    heads: str | int = "mean",
    target: Target = "predicted",
    merge: bool = False,
    truncate: bool = False,
    batch_size: int = 16,
    extra_inputs: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> list[Explanation]:
    """`explain_text` for many texts: one model, length-sorted batches, results in input order.

    progress=True shows a tqdm bar over the texts.
    """
    from attnflow.batches import length_batches

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be strings")
    device = _model_device(model)
    limit = max_input_tokens(model, tokenizer)
    _method_specs(methods)  # fail on a bad method before any work
    if getattr(tokenizer, "pad_token", None) is None or _pools_without_pad_id(model):
        batch_size = 1  # no padding token (GPT-2): one text per forward
    # lengths first, to batch texts of similar length (less padding) and catch long ones early
    all_ids = tokenizer(texts, truncation=False)["input_ids"] if texts else []
    check_vocabulary(tokenizer, texts, ids=all_ids)
    lengths = [len(ids) for ids in all_ids]
    if limit is not None and not truncate:
        for text, n in zip(texts, lengths, strict=True):
            if n > limit:
                _tokenize(tokenizer, [text], limit=limit, truncate=False, device=device)
    special = list(getattr(tokenizer, "all_special_tokens", []) or [])
    results: list[Explanation | None] = [None] * len(texts)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(texts), desc="explain", unit="text")
    try:
        for idx in length_batches(lengths, batch_size):
            enc = _tokenize(tokenizer, [texts[i] for i in idx], limit=limit, truncate=truncate, device=device)
            _, per_sample = _explain_batch(
                model, enc, methods=methods, layer=layer, rows=rows, residual=residual, heads=heads,
                target=target, extra_inputs=extra_inputs, mask_token_id=getattr(tokenizer, "mask_token_id", None),
            )  # fmt: skip
            for r, i in enumerate(idx):
                res = per_sample[r]
                ids = enc["input_ids"][r][res["keep"]].tolist()
                tokens = tokenizer.convert_ids_to_tokens(ids)
                groups = word_groups(tokens, special=special) if merge else [[j] for j in range(len(tokens))]
                labels = [_label([tokens[j] for j in g], tokenizer, special) for g in groups]
                maps = (
                    res["maps"] if not merge else {m: merge_scores(v, groups) for m, v in res["maps"].items()}
                )
                pred, label = _prediction(model, res, tokenizer)
                results[int(i)] = Explanation(
                    tokens=labels, maps=maps, layer=res["layer"], row=res["row"], logits=res["logits"],
                    prediction=pred, label=label, text=texts[int(i)], groups=groups, kind="text",
                    meta={
                        "model_tokens": tokens,
                        "row_label": None if isinstance(res["row"], str) else _label([tokens[res["row"]]], tokenizer, special),
                        "special": [k for k, g in enumerate(groups) if len(g) == 1 and tokens[g[0]] in special],
                        "residual": residual,
                        "heads": heads,
                    },
                )  # fmt: skip
            if bar is not None:
                bar.update(len(idx))
    finally:
        if bar is not None:
            bar.close()
    return results  # type: ignore[return-value]


def explain_text(
    model: Any,
    tokenizer: Any,
    text: str,
    *,
    methods: str | Sequence[str] = ("raw", "rollout", "flow"),
    layer: int = -1,
    rows: str | int = "auto",
    residual: float = 0.5,
    heads: str | int = "mean",
    target: Target = "predicted",
    merge: bool = False,
    truncate: bool = False,
    extra_inputs: Mapping[str, Any] | None = None,
) -> Explanation:
    """Explain one text with every method of `methods`, at every layer: one forward of any model.

    maps[method][l, j] = the method's attribution of token j to the explained query row at layer l
    (the explainer applied to the eager attentions [layer, head, query, key] of the real tokens,
    with A = (1 - residual) W + residual I; see attnflow.explain.EXPLAINERS).
    rows: "auto" ("cls" = row 0 for encoders, "last" = the last real token for decoder-only
    language models and decoder-only sequence classifiers, which pool it; left or right padding),
    "cls", "last", a token index, or "max" / "mean" over
    rows. layer: the layer `Explanation.scores()` shows (maps hold all layers). merge: one entry
    per word (sub-word scores summed). Methods needing attention gradients ("attn_grad", e.g.
    Chefer et al.) get d score / d attention of `target` (default: the predicted class / next
    token); other extra inputs come from `extra_inputs`. Raises ValueError for an unknown method,
    a text longer than the model takes (unless truncate=True), or a model without attentions.

    >>> import torch
    >>> from transformers import BertConfig, BertForSequenceClassification, BertTokenizer
    >>> _ = torch.manual_seed(0)
    >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "movie"]
    >>> tok = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})
    >>> model = BertForSequenceClassification(BertConfig(vocab_size=6, hidden_size=8,
    ...     num_hidden_layers=2, num_attention_heads=2, intermediate_size=8))
    >>> e = explain_text(model, tok, "good movie", methods=["rollout", "flow"])
    >>> e.tokens, e.maps["flow"].shape, e.layer
    (['[CLS]', 'good', 'movie', '[SEP]'], (2, 4), 1)
    >>> round(float(e.maps["rollout"][1].sum()), 6)  # a rollout row is a distribution
    1.0
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string (use explain_texts for many), got {type(text).__name__}")
    return explain_texts(
        model, tokenizer, [text], methods=methods, layer=layer, rows=rows, residual=residual, heads=heads,
        target=target, merge=merge, truncate=truncate, extra_inputs=extra_inputs,
    )[0]  # fmt: skip


def explain_image(
    model: Any,
    image_processor_or_pixel_values: Any,
    image: Any = None,
    *,
    methods: str | Sequence[str] = ("raw", "rollout", "flow"),
    layer: int = -1,
    rows: str | int = "cls",
    residual: float = 0.5,
    heads: str | int = "mean",
    target: Target = "predicted",
    extra_inputs: Mapping[str, Any] | None = None,
) -> Explanation:
    """Explain one image with a vision transformer (ViT, DeiT, ...): maps over [CLS] + patch tokens.

    Pass an image processor and the image (PIL image or array), or pixel_values (C, H, W) /
    (1, C, H, W) directly. tokens: "[CLS]" (and any other prefix tokens) then "(r,c)" per patch in
    row-major order; meta["grid"] = (rows, cols) of the patch grid, so
    ``e.scores()[-rows*cols:].reshape(grid)`` is an image-shaped map. Default row: [CLS].
    """
    source = image_processor_or_pixel_values
    if isinstance(source, torch.Tensor | np.ndarray):
        pixels = torch.as_tensor(source, dtype=torch.float32)
        if pixels.ndim == 3:
            pixels = pixels[None]
        if pixels.ndim != 4 or pixels.shape[0] != 1:
            raise ValueError(f"pixel_values must be (C, H, W) or (1, C, H, W), got {tuple(pixels.shape)}")
    else:
        if image is None:
            raise ValueError("pass the image to explain along with the image processor")
        pixels = source(images=image, return_tensors="pt")["pixel_values"]
    pixels = pixels.to(_model_device(model))
    out, per_sample = _explain_batch(
        model, {"pixel_values": pixels}, methods=methods, layer=layer, rows=rows, residual=residual,
        heads=heads, target=target, extra_inputs=extra_inputs,
    )  # fmt: skip
    res = per_sample[0]
    tokens = out.attentions.shape[-1]
    config = model.config
    patch = getattr(config, "patch_size", None)
    grid_h = grid_w = None
    if patch:
        patch = patch if isinstance(patch, int) else patch[0]
        grid_h, grid_w = pixels.shape[-2] // patch, pixels.shape[-1] // patch
    if grid_h is None or grid_h * grid_w > tokens:
        side = math.isqrt(tokens - 1)
        grid_h = grid_w = side
    prefix = tokens - grid_h * grid_w
    names = ["[CLS]", "[DIST]"] + [f"[P{k}]" for k in range(2, prefix)]
    labels = names[:prefix] + [f"({r},{c})" for r in range(grid_h) for c in range(grid_w)]
    pred, label = _prediction(model, res)
    return Explanation(
        tokens=labels, maps=res["maps"], layer=res["layer"], row=res["row"], logits=res["logits"],
        prediction=pred, label=label, kind="image",
        meta={"grid": [grid_h, grid_w], "prefix_tokens": prefix, "residual": residual, "heads": heads},
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Loading a model by name (CLI, notebooks)
# --------------------------------------------------------------------------------------------------

_HEADS = (
    (("ForSequenceClassification",), "AutoModelForSequenceClassification"),
    (("ForCausalLM", "LMHeadModel"), "AutoModelForCausalLM"),
    (("ForMaskedLM",), "AutoModelForMaskedLM"),
    (("ForImageClassification",), "AutoModelForImageClassification"),
)


def load_model(name: str, *, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(model in eval mode on `device`, tokenizer or image processor) for a hub name or local folder.

    "minilm" is the packaged MiniLM (attnflow.models.hf.resolve_pretrained). The head follows the
    checkpoint's `architectures` (sequence / image classifier, causal LM); otherwise the bare
    model (no logits). Local files first; the hub only when it answers. A pickled checkpoint that
    holds code is refused with UnsafeCheckpointError (naming the file).
    """
    import transformers

    from attnflow.models.hf import _from_pretrained, resolve_pretrained

    path = resolve_pretrained(name)
    config = _from_pretrained(transformers.AutoConfig.from_pretrained, path)
    archs = list(getattr(config, "architectures", None) or [])
    auto = "AutoModel"
    for suffixes, cls in _HEADS:
        if any(a.endswith(suffixes) for a in archs):
            auto = cls
            break
    try:
        model = _from_pretrained(getattr(transformers, auto).from_pretrained, path)
    except Exception as exc:
        if is_unsafe_pickle(exc):
            raise unsafe_checkpoint_error(path) from None
        raise
    model.to(device).eval()
    if getattr(config, "vocab_size", None) is None and getattr(config, "image_size", None) is not None:
        processor = _from_pretrained(transformers.AutoImageProcessor.from_pretrained, path)
    else:
        processor = _from_pretrained(transformers.AutoTokenizer.from_pretrained, path)
    return model, processor
