"""One-call explanations: `explain_text(s)` and `explain_image` run a model once per batch and apply
the explainers of `attnflow.explain.EXPLAINERS` (`explain_batch`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.bridge import NEEDS, forward
from attnflow.bridge.hf import AttentionOutput, Target
from attnflow.devices import model_device
from attnflow.hf.explanation import Explanation
from attnflow.hf.loading import _tokenize, check_vocabulary, max_input_tokens
from attnflow.hf.methods import INPUT_PROVIDERS, MODEL_METHODS, InputContext, _method_specs
from attnflow.hf.rows import (
    _check_layer,
    _pools_without_pad_id,
    _scored_positions,
    is_causal_model,
)
from attnflow.hf.words import _label, merge_scores, word_groups


def explain_batch(
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
    stream: bool | None = None,
) -> tuple[AttentionOutput, list[dict[str, Any]]]:
    """Run the model once on a batch, then every method: one call for the whole batch when every
    sample explains the same row (padding passed as `mask`), else one call per sample on its real
    tokens. Returns the forward and, per sample, maps (L, T_b), row, layer, logits.

    A language model's logits (and gradients) are read at the explained row when it is a position,
    else at the last real token; a masked LM's "auto" row is the first `mask_token_id`.

    stream: compute raw, rollout and flow inside the forward (`attnflow.stream`, float64, the same
    numbers) instead of capturing (B, L, H, T, T). None (default): whenever every method is one of
    those, heads="mean", the row is one position and the input is text; False: never."""
    from attnflow.explain.apply import apply
    from attnflow.methods import METHODS, MethodRecord

    specs = _method_specs(methods)
    extra_inputs = dict(extra_inputs or {})
    if stream is not False and _streamable(model, inputs, specs, rows, heads, extra_inputs):
        return _stream_batch(model, inputs, [name for name, _, _ in specs], layer=layer, rows=rows,
                             residual=residual, mask_token_id=mask_token_id)  # fmt: skip
    needs = {n for _, _, ns in specs for n in ns} - set(extra_inputs)
    custom = sorted(needs - set(NEEDS))  # made by a registered provider, not by the bridge
    if missing := [n for n in custom if n not in INPUT_PROVIDERS]:
        who = [name for name, _, ns in specs if set(ns) & set(missing)]
        raise ValueError(
            f"method(s) {who} need input(s) {missing} that attnflow.hf cannot make; pass extra_inputs= "
            "or register a maker in attnflow.hf.INPUT_PROVIDERS"
        )
    # the target's class / token ids when a method explains one (LRP, gradients, a model method)
    want_ids = bool(needs) or any(name in MODEL_METHODS for name, _, _ in specs)
    positions = _scored_positions(model, inputs, rows, mask_token_id)
    out = forward(model, inputs, ("attentions", *sorted(needs & set(NEEDS))), target=target if want_ids else None,
                  positions=positions)  # fmt: skip
    ctx = InputContext(model=model, inputs=inputs, out=out, target=target)
    made = {**out.inputs, **{n: INPUT_PROVIDERS[n](ctx) for n in custom}}
    bsz, num_layers, _, tokens, _ = out.attentions.shape
    layer = _check_layer(layer, num_layers)
    valid = out.attention_mask
    valid = np.ones((bsz, tokens), dtype=bool) if valid is None else valid.cpu().numpy()  # (B, T)
    spec, _, at, row_of = _explained_rows(model, valid, rows, positions)
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
        record = METHODS.get(name)
        if record is None or record.function is not fn:  # a method of the caller's, not (yet) recorded
            record = MethodRecord(name, name, fn, needs=ns)
        got = apply([record], attn_all, {**made, **extra_inputs}, spec, residual=residual, heads=heads,
                    valid=valid, per_sample_inputs=tuple(extra_inputs), at=at)  # fmt: skip
        for b in range(bsz):
            maps[b][name] = got[b][name]  # (L, T_b)
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


def _explained_rows(
    model: Any, valid: np.ndarray, rows: Any, positions: torch.Tensor | None
) -> tuple[Any, list[np.ndarray], list[int] | None, list[Any]]:
    """(RowSpec, each sample's real positions, a masked LM's explained row among them or None, the
    row each sample explains): the row decoding of `explain_batch`, classic or streamed.
    positions: the scored absolute positions (`_scored_positions`), which a masked LM's "auto" row is."""
    from attnflow.explain.apply import RowSpec

    idx = [np.flatnonzero(v) for v in valid]  # real positions of each sample
    at = None
    if positions is not None and rows == "auto":  # a masked LM: its mask position
        at = [int(np.searchsorted(i, int(p))) for i, p in zip(idx, positions, strict=True)]
    spec = RowSpec(rows, causal=is_causal_model(model))
    row_of = at if at is not None else [spec.position(len(i)) for i in idx]
    return spec, idx, at, row_of


def _batch_target(target: Target, idx: Sequence[int], n_texts: int) -> Target:
    """The target of the texts `idx` (one length batch): a per-text sequence is cut to them; a
    class, "predicted", a callable or None applies to every text as it is."""
    if isinstance(target, str | int | np.integer) or target is None or callable(target):
        return target
    per_text = target.tolist() if isinstance(target, torch.Tensor | np.ndarray) else list(target)
    if len(per_text) != n_texts:
        raise ValueError(f"a per-text target must give one class per text ({n_texts}), got {len(per_text)}")
    return [per_text[i] for i in idx]


def _streamable(
    model: Any, inputs: Mapping[str, Any], specs: list, rows: Any, heads: Any, extra_inputs: Mapping[str, Any]
) -> bool:
    """Whether `explain_batch` can compute every method inside the forward (`attnflow.stream`)."""
    from attnflow.bridge import is_study_model
    from attnflow.methods import METHODS
    from attnflow.stream import STREAM_METHODS

    modeling = sys.modules.get(type(model).__module__)
    return (
        heads == "mean"
        and model_device(model).type != "meta"  # the classic path refuses it in one line
        and not getattr(getattr(model, "config", None), "is_encoder_decoder", False)
        and hasattr(modeling, "eager_attention_forward")  # transformers' attention interface
        and not extra_inputs
        and rows not in ("max", "mean")
        and isinstance(inputs.get("input_ids"), torch.Tensor)
        and not is_study_model(model)
        and all(name in STREAM_METHODS and METHODS[name].function is fn for name, fn, _ in specs)
    )


def _stream_batch(
    model: Any,
    inputs: Mapping[str, Any],
    names: list[str],
    *,
    layer: int,
    rows: Any,
    residual: float,
    mask_token_id: int | None,
) -> tuple[AttentionOutput, list[dict[str, Any]]]:
    """`explain_batch` for raw / rollout / flow, computed inside the forward in float64."""
    from attnflow.bridge import Captured
    from attnflow.bridge.hf import TOKENIZER_ONLY_KEYS, last_positions
    from attnflow.stream import stream_maps

    ids = inputs["input_ids"]
    batch = {k: v for k, v in inputs.items() if k not in TOKENIZER_ONLY_KEYS}
    mask = inputs.get("attention_mask")
    valid = (torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()).cpu()
    scored = _scored_positions(model, inputs, rows, mask_token_id)  # (B,) absolute, or None
    _, idx, _, row_of = _explained_rows(model, valid.numpy(), rows, scored)
    at = torch.tensor([[int(i[r])] for i, r in zip(idx, row_of, strict=True)], device=ids.device)  # (B, 1)
    if scored is None:
        scored = last_positions(valid.to(ids.device), ids.shape[0], ids.shape[1], ids.device)
    got = stream_maps(model, batch, at, names, residual=residual, dtype=torch.float64,
                      logits_at=scored.to(ids.device))  # fmt: skip
    num_layers = got[names[0]].shape[1]
    layer = _check_layer(layer, num_layers)
    logits = got["logits"]
    head = getattr(model, "get_output_embeddings", lambda: None)()
    lm = logits is not None and head is not None  # a language model's next-token (or masked) logits
    results = []
    for b, keep in enumerate(idx):
        maps = {
            name: got[name][b, :, 0][:, torch.from_numpy(keep)].cpu().numpy() for name in names
        }  # (L, T_b)
        z = None if logits is None else logits[b].float().cpu().numpy()
        results.append({"maps": maps, "row": row_of[b], "layer": layer, "logits": z, "lm": bool(lm),
                        "keep": valid[b]})  # fmt: skip
    out = Captured(logits=logits, attentions=None, attention_mask=valid, positions=scored)
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
    device = model_device(model)
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
            _, per_sample = explain_batch(
                model, enc, methods=methods, layer=layer, rows=rows, residual=residual, heads=heads,
                target=_batch_target(target, idx, len(texts)), extra_inputs=extra_inputs,
                mask_token_id=getattr(tokenizer, "mask_token_id", None),
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
    pixels = pixels.to(model_device(model))
    out, per_sample = explain_batch(
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
