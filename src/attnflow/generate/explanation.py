"""Rollout, flow, raw attention and Chefer relevance of every token a decoder-only LM generates.

For a prompt of P tokens and a completion g_0 .. g_{n-1}, token g_t is predicted by the row at
position P + t - 1 of the sequence prompt + g_0 .. g_{t-1}. Under a causal mask that row does not
depend on later tokens, so ONE teacher-forced forward over prompt + g_0 .. g_{n-2} (T = P + n - 1
tokens) holds every row generate computed step by step with its KV cache; generate itself runs
without gradients and, by default, with SDPA (no attention probabilities), so the explanation
comes from that second, eager forward.

M[method][t, j, l] = the method's map at layer l, row P + t - 1, column j, with the columns the
prompt (over="prompt", m = P: Deb 2021's [n, m, l]) or every position (over="all", T). With
normalize=True each M[t, :, l] is divided by its sum over the shown columns (shares); the mass the
shown columns had of the whole row is kept in `coverage`. For "chefer" (the generic rule,
R = I + sum of gradient-weighted attention, Chefer et al. ICCV 2021) the target is the logit of
g_t at row P + t - 1 and the map is R - I: the identity (a token's relevance to itself before any
attention) is left out, as Chefer et al. leave out the explained token's self-relevance.
`sinks` (attnflow.explain.causal) applies to every method (for chefer: the rule runs on the
sink-handled attention, with the model's gradient); `receptive_field` "uniform" to raw, rollout
and flow (it is a no-op for raw: uniform attention's raw map is constant on each row), "column"
to every method (for chefer: on R - I; see `attnflow.generate.gradient_maps`).

>>> import torch, transformers
>>> _ = torch.manual_seed(0)
>>> model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=16, n_embd=8, n_layer=2,
...     n_head=2, n_positions=32, eos_token_id=None)).eval()
>>> class Tok:  # one token per character "a".."p"
...     def __call__(self, text, return_tensors=None):
...         return {"input_ids": torch.tensor([[ord(c) - 97 for c in text]])}
...     def convert_ids_to_tokens(self, ids): return [chr(97 + i) for i in ids]
...     def decode(self, ids): return "".join(chr(97 + i) for i in ids)
>>> e = explain_generation(model, Tok(), "abcd", max_new_tokens=3, methods=["rollout", "flow"])
>>> e.maps["rollout"].shape, e.rows  # (n_generated, n_prompt, layers); rows P + t - 1
((3, 4, 2), [3, 4, 5])
>>> bool(np.allclose(e.maps["flow"].sum(axis=1), 1.0))  # shares over the prompt
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnflow.explain import (
    RECEPTIVE_FIELDS,
    SINK_CHOICES,
    find_sinks,
    sink_mode,
)
from attnflow.explain.apply import CausalSpec, RowSpec, apply
from attnflow.generate.forward import _labels, _Run, _run, _stream
from attnflow.generate.gradient_maps import gradient_maps
from attnflow.generate.result import GenerationExplanation
from attnflow.generate.spec import GRAD_BATCH_SIZE, GenerationSpec
from attnflow.methods import METHODS, generation_methods

from attnflow.generate.result import load_generations as load_generations  # isort: skip
from attnflow.generate.result import save_generations as save_generations  # isort: skip
from attnflow.options import GENERATION_OVER as OVER

__all__ = [
    "GRAD_BATCH_SIZE",
    "GenerationExplanation",
    "GenerationSpec",
    "explain_generation",
    "explain_generation_grid",
    "generation_table",
]

GENERATION_METHODS = tuple(r.name for r in generation_methods())  # the method records' (attnflow.methods)
DEFAULT_METHODS = ("raw", "rollout", "flow", "chefer")  # explain_generation_grid's default


def _check_options(methods: Sequence[str], over: str, residual: float, grad_batch_size: int) -> list[str]:
    names = [methods] if isinstance(methods, str) else list(methods)
    if not names:
        raise ValueError(f"methods is empty; choose from {GENERATION_METHODS}")
    bad = [m for m in names if m not in GENERATION_METHODS]
    if bad:
        raise ValueError(f"unknown method(s) {bad} for generation; choose from {GENERATION_METHODS}")
    if over not in OVER:
        raise ValueError(f"over must be one of {OVER}, got {over!r}")
    if isinstance(residual, bool) or not isinstance(residual, int | float) or not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual must be a number in [0, 1], got {residual!r}")
    if isinstance(grad_batch_size, bool) or not isinstance(grad_batch_size, int) or grad_batch_size < 1:
        raise ValueError(f"grad_batch_size must be an int >= 1, got {grad_batch_size!r}")
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------------------------------
# Maps
# --------------------------------------------------------------------------------------------------


def _method_rows(
    name: str, attn: np.ndarray, rows: list[int], *, residual: float, heads: str | int, mode: str,
    sink_mask: np.ndarray, receptive_field: str,
) -> np.ndarray:  # fmt: skip
    """(L, len(rows), T) map of an attention method for the given rows, sinks and receptive field
    (`attnflow.explain.apply`: the records' functions with the causal options)."""
    causal = CausalSpec(sinks=mode, sink_positions=sink_mask, receptive_field=receptive_field)
    (maps,) = apply([METHODS[name]], attn[None], rows=RowSpec(tuple(rows)), causal=causal, residual=residual,
                    heads=heads)  # fmt: skip
    return np.ascontiguousarray(maps[name])  # (L, R, T), laid out as the shares below expect


def _streamed_field(full: np.ndarray, name: str, rows: list[int], field: str, residual: float) -> np.ndarray:
    """A streamed (n, L, T) map with the receptive field ``field`` ("none" or "uniform") applied as
    `attnflow.explain.causal_rollout` applies it: divided by the rollout of uniform attention at the
    same rows (`uniform_rollout_rows`, no T x T matrix), rows rescaled to their sums; raw attention's
    uniform baseline is constant on each row, so its rows are kept."""
    if field == "none" or name == "raw":
        return full
    from attnflow.explain.receptive_field import normalize_receptive_field, uniform_rollout_rows

    _, layers, tokens = full.shape
    base = uniform_rollout_rows(tokens, rows, layers=layers, residual=residual)  # (L, n, T)
    fixed = normalize_receptive_field(np.transpose(full, (1, 0, 2)), mode="uniform", baseline=base)
    return np.ascontiguousarray(np.transpose(np.asarray(fixed), (1, 0, 2)))


def _explanation(
    run: _Run,
    tokenizer: Any,
    prompt: str,
    *,
    methods: list[str],
    sinks: str,
    sink_mask: np.ndarray,
    head_sinks: np.ndarray,
    receptive_field: str,
    over: str,
    residual: float,
    heads: str | int,
    normalize: bool,
    options: dict[str, Any],
) -> GenerationExplanation:
    p, n = len(run.prompt_ids), len(run.generated_ids)
    rows = list(range(p - 1, p - 1 + n))
    mode = sink_mode(sinks)
    ncols = p if over == "prompt" else run.tokens
    maps: dict[str, np.ndarray] = {}
    coverage: dict[str, np.ndarray] = {}
    first: dict[str, np.ndarray] = {}
    for name in methods:
        if name in run.streamed:
            full = _streamed_field(
                run.streamed[name][mode], name, rows, receptive_field, residual
            )  # (n, L, T)
        elif name in run.gradient:
            full = run.gradient[name][(mode, receptive_field)]  # (n, L, T)
        elif name in run.model_maps:
            full = run.model_maps[name]  # (n, L, T); the same under every sink / receptive-field option
        else:
            m = _method_rows(name, run.attn, rows, residual=residual, heads=heads, mode=mode,
                             sink_mask=sink_mask, receptive_field=receptive_field)  # fmt: skip
            full = np.transpose(np.asarray(m, dtype=np.float64), (1, 0, 2))  # (L, n, T) -> (n, L, T)
        size = np.abs(full) if METHODS[name].signed else full  # shares of |relevance| for signed maps
        total = size.sum(axis=-1)  # (n, L)
        shown = full[:, :, :ncols]  # (n, L, cols)
        mass = size[:, :, :ncols].sum(axis=-1)  # (n, L)
        coverage[name] = np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)
        if normalize:
            shown = np.divide(shown, mass[..., None], out=np.zeros_like(shown), where=mass[..., None] > 0)
        maps[name] = np.ascontiguousarray(np.transpose(shown, (0, 2, 1)))  # (n, cols, L)
        last = maps[name][:, :, -1]  # (n, cols)
        s = last.sum(axis=1)
        first[name] = np.divide(last[:, 0], s, out=np.zeros_like(s), where=s > 0)
    prompt_tokens, special_prompt = _labels(tokenizer, run.prompt_ids)
    generated_tokens, special_gen = _labels(tokenizer, run.generated_ids)
    columns = prompt_tokens if over == "prompt" else prompt_tokens + generated_tokens[:-1]
    special = special_prompt + ([p + k for k in special_gen if p + k < ncols] if over == "all" else [])
    try:
        completion = tokenizer.decode(run.generated_ids)
    except Exception:
        completion = "".join(generated_tokens)
    return GenerationExplanation(
        prompt=prompt, completion=completion, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens,
        columns=columns, maps=maps, first_token_share=first, coverage=coverage, logprobs=run.logprobs,
        rows=rows, prompt_ids=list(run.prompt_ids), generated_ids=list(run.generated_ids),
        sinks=np.array(sink_mask, dtype=bool), head_sinks=head_sinks, options=options, special_columns=special,
    )  # fmt: skip


def _sink_mask(run: _Run, sink_positions: Any, threshold: float, min_rows: int, scope: str) -> np.ndarray:
    """(L, H, T) bool sink keys: found ("auto", `find_sinks`) or given (positions / a mask)."""
    from attnflow.explain.causal import sink_key_mask as expand

    layers, heads, tokens, _ = run.attn.shape
    if isinstance(sink_positions, str):
        if sink_positions != "auto":
            raise ValueError(f"sink_positions must be 'auto', positions or a mask, got {sink_positions!r}")
        found = find_sinks(run.attn, threshold=threshold, min_rows=min_rows, scope=scope, causal=True)
        return np.asarray(found, dtype=bool)
    full = expand(sink_positions, (1, layers, heads, tokens, tokens), np.ones((1, tokens), dtype=bool))
    return full[0].copy()


def explain_generation(
    model: Any,
    tokenizer: Any,
    prompt: str,
    spec: GenerationSpec | None = None,
    **options: Any,
) -> GenerationExplanation:
    """Generate from `prompt`, then explain every generated token over the prompt (Deb 2021's M).

    M[method][t, j, l]: attribution of column j (a prompt token; every earlier token with
    over="all") to generated token t at layer l, read in the teacher-forced row P + t - 1 that
    predicted it (see the module docstring). methods: "raw", "rollout", "flow", "chefer"
    (the generic rule, target = the logit of token t at its row; one backward per
    grad_batch_size tokens, on a batch of copies of the sequence).
    sinks: "auto" (= "diagonal", recommended on real LMs), "diagonal", "drop" or "none" (plain, as
    in Deb 2021) at sink_positions ("auto": `attnflow.explain.find_sinks` with sink_threshold and
    sink_min_rows and sink_scope on the whole teacher-forced sequence; or positions / a
    [layer, head, key] mask);
    receptive_field: "none", "uniform" or "column" (`attnflow.explain.normalize_receptive_field`).
    sinks applies to every method; receptive_field "column" to every method, "uniform" to raw,
    rollout and flow (chefer has no uniform baseline: its map stays the plain one). generate_kwargs: any ``model.generate``
    settings (default greedy: do_sample=False); seed seeds torch before generating.
    completion_ids: explain this completion instead of generating one. residual / heads: as in
    `attnflow.methods.EXPLAINERS`. normalize: shares over the shown columns (`coverage` keeps
    the mass they had). stream: as in `explain_generation_grid` (None: raw / rollout / flow without a
    receptive field are computed on the stream, so long prompts need no (L, H, T, T) attentions).
    """
    o = GenerationSpec.of(spec, options)  # the options below are the spec's fields
    names = _check_options(o.methods, o.over, o.residual, o.grad_batch_size)
    sinks, receptive_field = o.sinks, o.receptive_field
    sink_mode(sinks)
    if receptive_field not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {receptive_field!r}")
    return explain_generation_grid(
        model, tokenizer, prompt, dataclasses.replace(o, methods=names), sinks=(sinks,),
        receptive_fields=(receptive_field,),
    )[(sinks, receptive_field)]  # fmt: skip


STREAM_RECEPTIVE_FIELDS = ("none", "uniform")  # the receptive fields the stream applies (`_streamed_field`)


def _why_not_streamed(methods: Sequence[str], fields: Sequence[str], heads: str | int) -> str:
    """Why the stream cannot compute these maps ("" when it can)."""
    from attnflow.stream import STREAM_METHODS

    if other := [m for m in methods if m not in STREAM_METHODS]:
        return f"the stream computes {', '.join(STREAM_METHODS)}, not {', '.join(other)}"
    if heads != "mean":
        return f"the stream mixes heads by their mean, not heads={heads!r}"
    if other := [f for f in fields if f not in STREAM_RECEPTIVE_FIELDS]:
        return f"the stream's receptive-field normalisation is {STREAM_RECEPTIVE_FIELDS}, not {other}"
    if "uniform" in fields and "flow" in methods:
        return (
            "the stream has no uniform baseline of flow (receptive_field='uniform' with raw and rollout only)"
        )
    return ""


def explain_generation_grid(
    model: Any,
    tokenizer: Any,
    prompt: str,
    spec: GenerationSpec | None = None,
    *,
    sinks: Sequence[str] = ("none", "drop", "diagonal"),
    receptive_fields: Sequence[str] = RECEPTIVE_FIELDS,
    **options: Any,
) -> dict[tuple[str, str], GenerationExplanation]:
    """`explain_generation` for every (sinks, receptive_field) pair, from ONE generation and forward.

    Returns {(sinks, receptive_field): GenerationExplanation}; the completion, the attentions and
    the chefer gradients are shared (chefer maps depend on the sink option only).
    stream: compute the maps inside teacher-forced forwards (`attnflow.stream`, float64; one forward
    per sink mode, the first also finding the sinks) instead of capturing (L, H, T, T) attentions:
    memory O(L n T + T²) instead of O(L H T²), for long prompts. None (default) streams whenever it
    can: every method one of raw / rollout / flow, heads="mean", receptive_fields=("none",).
    The maps equal the captured path's to ~1e-12. spec / options: as `explain_generation`'s
    (`GenerationSpec`; methods default to raw, rollout, flow and chefer here), except that the
    spec's sinks and receptive_field are replaced by the grid's axes ``sinks`` and
    ``receptive_fields``.
    """
    o = GenerationSpec.of(spec or GenerationSpec(methods=DEFAULT_METHODS), options)
    methods, over, residual, heads, normalize = o.methods, o.over, o.residual, o.heads, o.normalize
    max_new_tokens, generate_kwargs, seed, completion_ids = (
        o.max_new_tokens,
        o.generate_kwargs,
        o.seed,
        o.completion_ids,
    )
    sink_positions, sink_threshold, sink_min_rows = o.sink_positions, o.sink_threshold, o.sink_min_rows
    sink_scope, grad_batch_size, stream = o.sink_scope, o.grad_batch_size, o.stream
    names = _check_options(methods, over, residual, grad_batch_size)
    sinks = list(dict.fromkeys([sinks] if isinstance(sinks, str) else sinks))
    fields = list(
        dict.fromkeys([receptive_fields] if isinstance(receptive_fields, str) else receptive_fields)
    )
    if not sinks or not fields:
        raise ValueError("sinks and receptive_fields must each name at least one option")
    for s in sinks:
        if s not in SINK_CHOICES:
            raise ValueError(f"sinks must be one of {SINK_CHOICES}, got {s!r}")
    for f in fields:
        if f not in RECEPTIVE_FIELDS:
            raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {f!r}")
    why_not = _why_not_streamed(names, fields, heads)
    if stream and why_not:
        raise ValueError(f"stream=True cannot compute this explanation: {why_not}")
    streamed = stream is not False and not why_not
    run = _run(
        model, tokenizer, prompt, max_new_tokens=max_new_tokens, generate_kwargs=generate_kwargs, seed=seed,
        completion_ids=completion_ids, capture=not streamed,
    )  # fmt: skip
    if streamed:
        modes = list(dict.fromkeys(sink_mode(s) for s in sinks))
        mask, head_sinks = _stream(model, run, names, modes, sink_positions, sink_threshold, sink_min_rows,
                                   sink_scope, residual)  # fmt: skip
    else:
        mask = _sink_mask(run, sink_positions, sink_threshold, sink_min_rows, sink_scope)
        head_sinks = np.asarray(
            find_sinks(run.attn, threshold=sink_threshold, min_rows=sink_min_rows, scope="head", causal=True),
            dtype=bool,
        )
    needing_grad = [m for m in names if METHODS[m].kind == "attention" and METHODS[m].needs]
    if needing_grad:
        modes = list(dict.fromkeys(sink_mode(s) for s in sinks))
        run.gradient = gradient_maps(model, run, needing_grad, modes, mask, grad_batch_size, fields)
    run.model_maps = {m: METHODS[m].generator(model, run) for m in names if METHODS[m].kind == "model"}
    out = {}
    for s in sinks:
        for f in fields:
            options = {
                "methods": names, "sinks": s, "sink_mode": sink_mode(s),
                "sink_positions": sink_positions if isinstance(sink_positions, str) else "given",
                "sink_threshold": sink_threshold, "sink_min_rows": sink_min_rows, "sink_scope": sink_scope,
                "sink_keys": sorted(int(j) for j in np.flatnonzero(mask.all(axis=(0, 1)))), "receptive_field": f,
                "over": over, "residual": residual, "heads": heads, "normalize": normalize,
                "generate": run.generate_kwargs, "model": type(model).__name__,
            }  # fmt: skip
            out[(s, f)] = _explanation(
                run, tokenizer, prompt, methods=names, sinks=s, sink_mask=mask, head_sinks=head_sinks,
                receptive_field=f, over=over,
                residual=residual, heads=heads, normalize=normalize, options=options,
            )  # fmt: skip
    return out


def generation_table(
    explanations: Mapping[tuple[str, str], GenerationExplanation] | Sequence[GenerationExplanation],
) -> list[dict[str, Any]]:
    """Tidy rows, one per (explanation, method, generated token): the first-token share (last
    layer), the share of the top prompt token and its label, the coverage, and the options."""
    items = list(explanations.values()) if isinstance(explanations, Mapping) else list(explanations)
    rows = []
    for e in items:
        for m in e.methods:
            last = e.maps[m][:, :, -1]  # (n, cols)
            for t in range(e.n_generated):
                top = int(np.argmax(last[t]))
                rows.append({
                    "prompt": e.prompt, "completion": e.completion, "method": m,
                    "sinks": e.options.get("sinks"), "receptive_field": e.options.get("receptive_field"),
                    "over": e.options.get("over"), "token_index": t, "token": e.generated_tokens[t],
                    "row": e.rows[t], "logprob": float(e.logprobs[t]),
                    "first_token_share": float(e.first_token_share[m][t]),
                    "top_column": top, "top_token": e.columns[top], "top_share": float(last[t, top] / max(last[t].sum(), 1e-300)),
                    "coverage": float(e.coverage[m][t, -1]),
                })  # fmt: skip
    return rows
