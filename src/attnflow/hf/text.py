"""One-call explanations: `explain_text(s)` and `explain_image` run a model once per batch and apply
the explainers of `attnflow.methods.EXPLAINERS` (`explain_batch`).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.bridge import NEEDS, forward
from attnflow.bridge.hf import AttentionOutput, Target
from attnflow.devices import model_device
from attnflow.hf.batching import (
    _batch_target,
    _explained_rows,
    _float64_attentions,
    _prediction,
    _real,
    _sink_mask,
    _stream_batch,
)
from attnflow.hf.causal_options import (
    check_layers,
    check_receptive_field,
    concentration_alarm,
    resolve_sinks,
    sink_alarm,
    sink_keys,
    sink_record,
    warn_concentration,
    warn_sinks,
)
from attnflow.hf.explanation import Explanation, Explanations
from attnflow.hf.loading import _tokenize, check_vocabulary, max_input_tokens, model_layers
from attnflow.hf.methods import MODEL_METHODS, InputContext, _method_specs, need_hooks, need_makers
from attnflow.hf.rows import (
    _check_layer,
    _pools_without_pad_id,
    _scored_positions,
    is_causal_model,
)
from attnflow.hf.words import _label, merge_scores, word_groups

# explain_texts shows a progress bar by default from this many tokens in one text (a few seconds of
# raw + rollout + flow on 2 cores for a 30-layer 135M model) or with more than one batch.
PROGRESS_TOKENS = 512


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
    sinks: str = "none",
    sink_positions: Any = "auto",
    receptive_field: str = "none",
    layers: int | Sequence[int] | None = None,
    detect_sinks: bool | None = None,
) -> tuple[AttentionOutput, list[dict[str, Any]]]:
    """Run the model once on a batch, then every method: one call for the whole batch when every
    sample explains the same row (padding passed as `mask`), else one call per sample on its real
    tokens. Returns the forward and, per sample, maps (L, T_b), row, layer, logits, and "sinks":
    the sink positions found among its real tokens (`attnflow.explain.find_sinks`; [] when not
    looked for).

    sinks ("none", "auto", "diagonal", "drop"; `attnflow.explain.causal`) at sink_positions ("auto":
    found per sample, or positions / a mask) and receptive_field ("none", "uniform", "column")
    apply to every attention method (gradient methods: on the sink-handled attention with the
    model's gradient), not to model-level ones (attnlrp). detect_sinks: look for sinks even when
    sinks="none" (default: on causal models). layers: the 0-based layers to compute (None:
    all); maps then hold those rows only, in order, and `layer` indexes them; each attention
    method runs on the layers up to the highest one asked (flow from those layers only).

    A language model's logits (and gradients) are read at the explained row when it is a position,
    else at the last real token; a masked LM's "auto" row is the first `mask_token_id`.

    stream: compute raw, rollout and flow inside the forward, and Chefer and Grad-SAM with ∇A
    reduced over heads in the backward (`attnflow.stream`, float64, the same numbers), instead of
    capturing (B, L, H, T, T). None (default): whenever every method is one of those, heads="mean",
    the row is one position and the input is text; False: never."""
    from attnflow.explain import sink_mode
    from attnflow.explain.apply import CausalSpec, apply
    from attnflow.methods import METHODS, MethodRecord

    specs = _method_specs(methods)
    extra_inputs = dict(extra_inputs or {})
    mode = sink_mode(sinks)
    check_receptive_field(receptive_field)
    causal = is_causal_model(model)
    detect = causal if detect_sinks is None else bool(detect_sinks)
    n_model = model_layers(model)
    stream_layers = check_layers(layers, n_model) if n_model and layers is not None else None
    if (
        stream is not False
        and receptive_field == "none"
        and (causal or (mode == "none" and not detect))  # the stream's sink handling is causal
        and _streamable(model, inputs, specs, rows, heads, extra_inputs)
    ):
        return _stream_batch(model, inputs, [name for name, _, _ in specs], layer=layer, rows=rows,
                             residual=residual, mask_token_id=mask_token_id, mode=mode,
                             sink_positions=sink_positions, detect=detect, layers=stream_layers,
                             target=target)  # fmt: skip
    needs = {n for _, _, ns in specs for n in ns} - set(extra_inputs)
    custom = sorted(needs - set(NEEDS))  # made by a registered provider or a need record's capturer
    makers = need_makers(custom)
    if missing := [n for n in custom if n not in makers]:
        who = [name for name, _, ns in specs if set(ns) & set(missing)]
        raise ValueError(
            f"method(s) {who} need input(s) {missing} that attnflow.hf cannot make; pass extra_inputs= "
            "or register a maker in attnflow.hf.INPUT_PROVIDERS"
        )
    # the target's class / token ids when a method explains one (LRP, gradients, a model method)
    want_ids = bool(needs) or any(name in MODEL_METHODS for name, _, _ in specs)
    positions = _scored_positions(model, inputs, rows, mask_token_id)
    # the needs of the model's own activations are read during the attention forward when only the
    # attentions are asked of it (one forward: the gradient and LRP passes would run the hooks again)
    hooks = need_hooks(custom) if not needs & set(NEEDS) else []
    with contextlib.ExitStack() as stack:
        reads = [stack.enter_context(h(model)) for h in hooks]
        out = forward(model, inputs, ("attentions", *sorted(needs & set(NEEDS))),
                      target=target if want_ids else None, positions=positions)  # fmt: skip
    native = {k: v for read in reads for k, v in read().items() if k in custom}  # model activations, torch
    ctx = InputContext(model=model, inputs=inputs, out=out, target=target)
    made = {**out.inputs, **native, **{n: makers[n](ctx) for n in custom if n not in native}}
    bsz, num_layers, _, tokens, _ = out.attentions.shape
    chosen = check_layers(layers, num_layers)
    top = chosen[-1] + 1  # every attention method's layer l reads layers 0..l only
    layer = _check_layer(layer, len(chosen))
    valid = out.attention_mask
    valid = np.ones((bsz, tokens), dtype=bool) if valid is None else valid.cpu().numpy()  # (B, T)
    spec, idx, at, row_of = _explained_rows(model, valid, rows, positions)
    attn_all = _float64_attentions(out.attentions, valid)  # (B, L, H, T, T)
    made = {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in made.items()}
    sink_mask = None  # (B, L, H, T) bool sink keys of each head
    if mode != "none" or detect:
        sink_mask = _sink_mask(attn_all, valid, sink_positions, causal=causal)
    attn_use = attn_all[:, :top]  # (B, top, H, T, T)
    made = {k: v[:, :top] if v.ndim >= 4 and v.shape[1] == num_layers else v for k, v in made.items()}
    as64 = {}  # the needs as float64 numpy, made when a method on the float64 attentions reads them

    def float64_needs() -> dict[str, np.ndarray]:
        for k, v in made.items():
            if k not in as64:
                as64[k] = torch.as_tensor(v).to(dtype=torch.float64).numpy()
        return as64

    maps: list[dict[str, np.ndarray]] = [{} for _ in range(bsz)]
    plain = mode == "none" and receptive_field == "none"
    for name, fn, ns in specs:
        if name in MODEL_METHODS:
            for b, m in enumerate(fn(ctx, valid, out.positions)):
                maps[b][name] = np.asarray(m)[chosen]  # (len(chosen), T_b)
            continue
        record = METHODS.get(name)
        if record is None or record.function is not fn:  # a method of the caller's, not (yet) recorded
            record = MethodRecord(name, name, fn, needs=ns)
        if plain and record.needs and set(record.needs) <= set(native):
            # a method of the model's activations runs on them as they are (torch, the model's float
            # type: float64 numpy copies of (B, L, H, T, D) would cost more than the method)
            attn_t = out.attentions[:, :top].detach().cpu()
            got = apply([record], attn_t, {k: made[k] for k in record.needs}, spec, residual=residual, heads=heads,
                        valid=valid, at=at)  # fmt: skip
        elif plain:
            got = apply([record], attn_use, {**float64_needs(), **extra_inputs}, spec, residual=residual,
                        heads=heads, valid=valid, per_sample_inputs=tuple(extra_inputs), at=at)  # fmt: skip
        else:  # each sample on its real tokens, with its own sinks
            got = []
            for b, i in enumerate(idx):
                one = {k: _real(v, b, i) for k, v in float64_needs().items()}
                keys = "auto" if sink_mask is None else sink_mask[b : b + 1, :top][..., i]  # (1, top, H, T_b)
                options = CausalSpec(sinks=mode, sink_positions=keys, receptive_field=receptive_field)
                got += apply([record], _real(attn_use, b, i), {**one, **extra_inputs}, spec, options,
                             residual=residual, heads=heads, per_sample_inputs=tuple(extra_inputs),
                             at=None if at is None else [at[b]])  # fmt: skip
        for b in range(bsz):
            maps[b][name] = np.asarray(got[b][name])[chosen]  # (len(chosen), T_b)
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
        found = [] if sink_mask is None else sink_keys(sink_mask[b][..., idx[b]])
        results.append({"maps": maps[b], "row": row_of[b], "layer": layer, "logits": logits, "lm": lm,
                        "keep": keep, "sinks": found, "layers": chosen})  # fmt: skip
    return out, results


def _streamable(
    model: Any, inputs: Mapping[str, Any], specs: list, rows: Any, heads: Any, extra_inputs: Mapping[str, Any]
) -> bool:
    """Whether `explain_batch` can compute every method inside the forward (`attnflow.stream`)."""
    from attnflow.bridge import is_study_model
    from attnflow.methods import METHODS
    from attnflow.stream import GRAD_STREAM_METHODS, STREAM_METHODS

    modeling = sys.modules.get(type(model).__module__)
    streamed = (*STREAM_METHODS, *GRAD_STREAM_METHODS)
    return (
        heads == "mean"
        and model_device(model).type != "meta"  # the classic path refuses it in one line
        and not getattr(getattr(model, "config", None), "is_encoder_decoder", False)
        and hasattr(modeling, "eager_attention_forward")  # transformers' attention interface
        and not extra_inputs
        and rows not in ("max", "mean")
        and isinstance(inputs.get("input_ids"), torch.Tensor)
        and not is_study_model(model)
        and all(name in streamed and METHODS[name].function is fn for name, fn, _ in specs)
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
    progress: bool | None = None,
    sinks: str | None = None,
    sink_positions: Any = "auto",
    receptive_field: str = "none",
    layers: int | Sequence[int] | None = None,
) -> Explanations:
    """`explain_text` for many texts: one model, length-sorted batches, results in input order.

    progress: a tqdm bar over the texts (None: when the call may take more than a few seconds,
    i.e. more than one batch or a text of PROGRESS_TOKENS tokens or more; False: never).
    sinks, sink_positions, receptive_field, layers: as in `explain_text`.
    """
    from attnflow.batches import length_batches
    from attnflow.explain import sink_mode

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be strings")
    causal = is_causal_model(model)
    choice = resolve_sinks(sinks, causal=causal)
    mode = sink_mode(choice)
    check_receptive_field(receptive_field)
    if model_layers(model):
        check_layers(layers, model_layers(model) or 0)  # a bad layer fails before any work
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
    batches = list(length_batches(lengths, batch_size))
    if progress is None:
        progress = len(batches) > 1 or max(lengths, default=0) >= PROGRESS_TOKENS
    names = [n for n, _, _ in _method_specs(methods)]
    alarms: list[tuple[str | None, tuple[float, str]]] = []  # texts whose sink takes most of a map
    piled: list[tuple[str | None, tuple[float, str]]] = []  # texts where one token takes a whole map
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(texts), desc=f"explain ({', '.join(names)})", unit="text")
    try:
        for idx in batches:
            enc = _tokenize(tokenizer, [texts[i] for i in idx], limit=limit, truncate=truncate, device=device)
            if bar is not None:
                bar.set_postfix_str(f"{enc['input_ids'].shape[1]} tokens", refresh=True)
            _, per_sample = explain_batch(
                model, enc, methods=methods, layer=layer, rows=rows, residual=residual, heads=heads,
                target=_batch_target(target, idx, len(texts)), extra_inputs=extra_inputs,
                mask_token_id=getattr(tokenizer, "mask_token_id", None), sinks=choice,
                sink_positions=sink_positions, receptive_field=receptive_field, layers=layers,
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
                found = res.get("sinks", [])
                meta = {
                    "model_tokens": tokens,
                    "row_label": None if isinstance(res["row"], str) else _label([tokens[res["row"]]], tokenizer, special),
                    "special": [k for k, g in enumerate(groups) if len(g) == 1 and tokens[g[0]] in special],
                    "residual": residual,
                    "heads": heads,
                }  # fmt: skip
                if causal or choice != "none" or receptive_field != "none":
                    meta["sinks"] = sink_record(choice, mode, found, receptive_field, groups, labels, tokens,
                                                causal=causal)  # fmt: skip
                if layers is not None:
                    meta["layers"] = list(res["layers"])
                if mode == "none" and found:
                    alarm = sink_alarm(maps, found, labels, groups, layers=res["layers"])
                    if alarm is not None:
                        alarms.append((texts[int(i)], alarm))
                elif causal and receptive_field == "none":
                    shown = next((k for k, g in enumerate(groups) if res["row"] in g), None)
                    alarm = concentration_alarm(maps, labels, layers=res["layers"], row=shown)
                    if alarm is not None:
                        piled.append((texts[int(i)], alarm))
                results[int(i)] = Explanation(
                    tokens=labels, maps=maps, layer=res["layer"], row=res["row"], logits=res["logits"],
                    prediction=pred, label=label, text=texts[int(i)], groups=groups, kind="text", meta=meta,
                )  # fmt: skip
            if bar is not None:
                bar.update(len(idx))
    finally:
        if bar is not None:
            bar.close()
    warn_sinks(alarms, len(texts), stacklevel=3)  # once per call, naming the worst sink
    warn_concentration(piled, len(texts), stacklevel=3)  # and the worst receptive-field pile-up
    return Explanations(results)  # a list that is also one table (.to_pandas()); every slot is filled


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
    sinks: str | None = None,
    sink_positions: Any = "auto",
    receptive_field: str = "none",
    layers: int | Sequence[int] | None = None,
    progress: bool | None = None,
) -> Explanation:
    """Explain one text with every method of `methods`, at every layer: one forward of any model.

    maps[method][l, j] = the method's attribution of token j to the explained query row at layer l
    (the explainer applied to the eager attentions [layer, head, query, key] of the real tokens,
    with A = (1 - residual) W + residual I; see attnflow.methods.EXPLAINERS).
    rows: "auto" ("cls" = row 0 for encoders, "last" = the last real token for decoder-only
    language models and decoder-only sequence classifiers, which pool it; left or right padding),
    "cls", "last", a token index, or "max" / "mean" over
    rows. layer: the layer `Explanation.scores()` shows (maps hold all layers). merge: one entry
    per word (sub-word scores summed). Methods needing attention gradients ("attn_grad", e.g.
    Chefer et al.) get d score / d attention of `target` (default: the predicted class / next
    token); other extra inputs come from `extra_inputs`. Raises ValueError for an unknown method,
    a text longer than the model takes (unless truncate=True), or a model without attentions.

    Decoder LMs (causal attention) park most attention on a sink token (`attnflow.explain.causal`):
    sinks=None (default) handles them on causal models as the generation path does ("auto" =
    "diagonal" at the sinks `find_sinks` finds: their attention moved to each row's own token)
    and leaves encoders unchanged ("none"); "drop" re-normalises without them; "none" keeps them,
    with a SinkWarning naming the sink when it holds >= 50 % of a layer's map. sink_positions:
    "auto" or the positions / mask to treat as sinks. receptive_field: "none", "uniform" or
    "column" (`attnflow.explain.normalize_receptive_field`). meta["sinks"] records the choice,
    the sinks found and the columns removed (drawn as removed). layers: the 0-based layers to
    compute (None: all); maps then hold those rows, meta["layers"] names them, and `layer`
    indexes them. progress: a tqdm bar (None: for long texts, PROGRESS_TOKENS tokens or more).

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
        target=target, merge=merge, truncate=truncate, extra_inputs=extra_inputs, sinks=sinks,
        sink_positions=sink_positions, receptive_field=receptive_field, layers=layers, progress=progress,
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
