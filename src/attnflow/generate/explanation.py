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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.explain import (
    RECEPTIVE_FIELDS,
    SINK_CHOICES,
    SINK_MIN_ROWS,
    SINK_THRESHOLD,
    find_sinks,
    sink_mode,
)
from attnflow.explain.apply import CausalSpec, RowSpec, apply
from attnflow.generate.gradient_maps import gradient_maps
from attnflow.generate.result import GenerationExplanation
from attnflow.methods import METHODS, generation_methods
from attnflow.modes import eval_mode

from attnflow.generate.result import load_generations as load_generations  # isort: skip
from attnflow.generate.result import save_generations as save_generations  # isort: skip
from attnflow.options import GENERATION_OVER as OVER

__all__ = ["GenerationExplanation", "explain_generation", "explain_generation_grid", "generation_table"]

GENERATION_METHODS = tuple(r.name for r in generation_methods())  # the method records' (attnflow.methods)
DEFAULT_METHODS = ("raw", "rollout", "flow", "chefer")  # explain_generation_grid's default
# Generated tokens explained per forward/backward of the "chefer" target (a batch of copies).
GRAD_BATCH_SIZE = 8


# --------------------------------------------------------------------------------------------------
# Generation and the teacher-forced forward
# --------------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """One generation and its teacher-forced forward (shared by every method and option)."""

    prompt_ids: list[int]
    generated_ids: list[int]
    attn: np.ndarray | None  # (L, H, T, T) float64, T = P + n - 1; None on the stream
    logprobs: np.ndarray  # (n,)
    gradient: dict[
        str, dict[tuple[str, str], np.ndarray]
    ]  # method -> (sink mode, receptive field) -> (n, L, T), row P + t - 1, target g_t
    generate_kwargs: dict[str, Any]
    model_maps: dict[str, np.ndarray] = field(default_factory=dict)  # model-level method -> (n, L, T)
    # method -> sink mode -> (n, L, T), like `gradient`, computed on the stream
    streamed: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """T = P + n - 1, the teacher-forced sequence's length."""
        return len(self.prompt_ids) + len(self.generated_ids) - 1


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


def _prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    enc = tokenizer(prompt, return_tensors="pt")
    ids = enc["input_ids"]
    ids = ids[0].tolist() if getattr(ids, "ndim", 1) == 2 else list(ids)
    if not ids:
        raise ValueError(f"the prompt {prompt!r} has no tokens")
    return [int(i) for i in ids]


def _generate(
    model: Any, tokenizer: Any, prompt_ids: list[int], max_new_tokens: int, generate_kwargs: Mapping[str, Any] | None,
    seed: int | None,
) -> tuple[list[int], dict[str, Any]]:  # fmt: skip
    import torch

    from attnflow.devices import model_device

    kwargs: dict[str, Any] = {"do_sample": False, "max_new_tokens": max_new_tokens}
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    if pad is not None:
        kwargs["pad_token_id"] = pad
    kwargs.update(dict(generate_kwargs or {}))
    for key in ("input_ids", "attention_mask", "output_attentions", "return_dict_in_generate"):
        if key in kwargs:
            raise ValueError(f"generate_kwargs must not set {key!r} (explain_generation sets it)")
    if seed is not None:
        torch.manual_seed(seed)
    device = model_device(model)
    ids = torch.tensor([prompt_ids], device=device)
    with eval_mode(model):
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    seq = out.sequences if hasattr(out, "sequences") else out
    generated = [int(i) for i in seq[0, len(prompt_ids) :].tolist()]
    if not generated:
        raise ValueError("the model generated no tokens (max_new_tokens reached 0, or it stopped at once)")
    return generated, {
        k: v for k, v in kwargs.items() if isinstance(v, bool | int | float | str | type(None))
    }


def _teacher_forced(
    model: Any, prompt_ids: list[int], generated_ids: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(attn (L, H, T, T), logprobs (n,)) from one eager forward over prompt + g_0 .. g_{n-2}."""
    import torch

    from attnflow.bridge import forward
    from attnflow.devices import model_device

    device = model_device(model)
    p, n = len(prompt_ids), len(generated_ids)
    seq = torch.tensor([prompt_ids + generated_ids[:-1]], device=device)  # (1, T), T = P + n - 1
    rows = torch.arange(p - 1, p - 1 + n, device=device)  # (n,) row P + t - 1 predicts g_t
    targets = torch.tensor(generated_ids, device=device)  # (n,)
    out = forward(model, {"input_ids": seq, "attention_mask": torch.ones_like(seq)}, target=None)
    attn = out.attentions[0].to(device="cpu", dtype=torch.float64).numpy()  # (L, H, T, T)
    logp = torch.log_softmax(out.logits[0, rows].double(), dim=-1)  # (n, V)
    return attn, logp.gather(1, targets[:, None])[:, 0].cpu().numpy()


def _labels(tokenizer: Any, ids: Sequence[int]) -> tuple[list[str], list[int]]:
    """(display label per token, positions of special tokens)."""
    from attnflow.hf import token_labels

    if not ids:
        return [], []
    try:
        labels, _ = token_labels(tokenizer, list(ids))
    except Exception:  # a tokenizer without convert_ids_to_tokens: decode one id at a time
        labels = [tokenizer.decode([i]) for i in ids]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return labels, [k for k, i in enumerate(ids) if i in special]


def _run(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    max_new_tokens: int,
    generate_kwargs: Mapping[str, Any] | None,
    seed: int | None,
    completion_ids: Sequence[int] | None,
    capture: bool = True,
) -> _Run:
    """The generation and, with `capture`, its teacher-forced forward's attentions (else the
    stream computes the maps: `_stream`)."""
    from attnflow.hf import max_input_tokens

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    prompt_ids = _prompt_ids(tokenizer, prompt)
    limit = max_input_tokens(model, tokenizer)
    if completion_ids is None:
        if limit is not None and len(prompt_ids) + max_new_tokens > limit:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"limit of {limit} tokens"
            )
        generated, used = _generate(model, tokenizer, prompt_ids, max_new_tokens, generate_kwargs, seed)
    else:
        generated, used = [int(i) for i in completion_ids], {"completion_ids": "given"}
        if not generated:
            raise ValueError("completion_ids is empty")
    if not capture:
        return _Run(prompt_ids, generated, None, np.zeros(0), {}, used)
    attn, logprobs = _teacher_forced(model, prompt_ids, generated)
    return _Run(prompt_ids, generated, attn, logprobs, {}, used)


def _stream(
    model: Any, run: _Run, methods: list[str], modes: list[str], sink_positions: Any, threshold: float,
    min_rows: int, scope: str, residual: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Fill `run.streamed` and `run.logprobs` from streamed teacher-forced forwards (`attnflow.stream`:
    no (L, H, T, T) attention held), one per sink mode; the first also adds up the sink scores.
    Returns (the sink mask (L, H, T), the per-head sinks (L, H, T)), as `_sink_mask` and
    `find_sinks(scope="head")` give them on the captured attentions."""
    import torch

    from attnflow.devices import model_device
    from attnflow.explain.causal import sink_key_mask, sinks_from_scores
    from attnflow.stream import stream_maps

    device = model_device(model)
    p, n = len(run.prompt_ids), len(run.generated_ids)
    seq = torch.tensor([run.prompt_ids + run.generated_ids[:-1]], device=device)  # (1, T)
    batch = {"input_ids": seq, "attention_mask": torch.ones_like(seq)}
    rows = torch.arange(p - 1, p - 1 + n, device=device)[None]  # (1, n): row P + t - 1 predicts g_t

    def maps(mode: str, sinks: np.ndarray | None, names: list[str], scores: bool = False) -> dict[str, Any]:
        got = stream_maps(model, batch, rows, names, residual=residual, dtype=torch.float64,
                          sinks=None if sinks is None else sinks[None], sink_mode=mode, sink_scores=scores)  # fmt: skip
        for name in names:  # (1, L, n, T) -> (n, L, T)
            run.streamed.setdefault(name, {})[mode] = got[name][0].transpose(0, 1).cpu().numpy()
        return got

    # the first forward: the sink scores, the logits, and the plain maps when they are asked for
    got = maps("none", None, methods if "none" in modes else [], scores=True)
    scores, seen, _ = got["sink_scores"]
    if isinstance(sink_positions, str):
        if sink_positions != "auto":
            raise ValueError(f"sink_positions must be 'auto', positions or a mask, got {sink_positions!r}")
        mask = sinks_from_scores(scores, seen, threshold=threshold, min_rows=min_rows, scope=scope)[0]
    else:
        _, layers, heads, tokens = scores.shape
        mask = sink_key_mask(
            sink_positions, (1, layers, heads, tokens, tokens), np.ones((1, tokens), dtype=bool)
        )[0]
    head_sinks = sinks_from_scores(scores, seen, threshold=threshold, min_rows=min_rows, scope="head")[0]
    for mode in modes:
        if mode != "none":
            maps(mode, mask, methods)  # one forward per sink handling
    targets = torch.tensor(run.generated_ids, device=device)
    logp = torch.log_softmax(got["logits"][0].double(), dim=-1)  # (n, V) at the rows
    run.logprobs = logp.gather(1, targets[:, None])[:, 0].cpu().numpy()
    return mask, head_sinks


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
            full = run.streamed[name][mode]  # (n, L, T)
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
    *,
    max_new_tokens: int = 20,
    methods: str | Sequence[str] = ("rollout",),
    sinks: str = "auto",
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    receptive_field: str = "none",
    over: str = "prompt",
    residual: float = 0.5,
    heads: str | int = "mean",
    normalize: bool = True,
    generate_kwargs: Mapping[str, Any] | None = None,
    seed: int | None = None,
    completion_ids: Sequence[int] | None = None,
    grad_batch_size: int = GRAD_BATCH_SIZE,
    stream: bool | None = None,
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
    names = _check_options(methods, over, residual, grad_batch_size)
    sink_mode(sinks)
    if receptive_field not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {receptive_field!r}")
    return explain_generation_grid(
        model, tokenizer, prompt, max_new_tokens=max_new_tokens, methods=names, sinks=(sinks,),
        receptive_fields=(receptive_field,), sink_positions=sink_positions, sink_threshold=sink_threshold,
        sink_min_rows=sink_min_rows, sink_scope=sink_scope, over=over, residual=residual, heads=heads, normalize=normalize,
        generate_kwargs=generate_kwargs, seed=seed, completion_ids=completion_ids, grad_batch_size=grad_batch_size,
        stream=stream,
    )[(sinks, receptive_field)]  # fmt: skip


def _why_not_streamed(methods: Sequence[str], fields: Sequence[str], heads: str | int) -> str:
    """Why the stream cannot compute these maps ("" when it can)."""
    from attnflow.stream import STREAM_METHODS

    if other := [m for m in methods if m not in STREAM_METHODS]:
        return f"the stream computes {', '.join(STREAM_METHODS)}, not {', '.join(other)}"
    if heads != "mean":
        return f"the stream mixes heads by their mean, not heads={heads!r}"
    if list(fields) != ["none"]:
        return "the stream has no receptive-field normalisation (receptive_field='none' only)"
    return ""


def explain_generation_grid(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    max_new_tokens: int = 20,
    methods: str | Sequence[str] = DEFAULT_METHODS,
    sinks: Sequence[str] = ("none", "drop", "diagonal"),
    receptive_fields: Sequence[str] = RECEPTIVE_FIELDS,
    sink_positions: Any = "auto",
    sink_threshold: float = SINK_THRESHOLD,
    sink_min_rows: int = SINK_MIN_ROWS,
    sink_scope: str = "position",
    over: str = "prompt",
    residual: float = 0.5,
    heads: str | int = "mean",
    normalize: bool = True,
    generate_kwargs: Mapping[str, Any] | None = None,
    seed: int | None = None,
    completion_ids: Sequence[int] | None = None,
    grad_batch_size: int = GRAD_BATCH_SIZE,
    stream: bool | None = None,
) -> dict[tuple[str, str], GenerationExplanation]:
    """`explain_generation` for every (sinks, receptive_field) pair, from ONE generation and forward.

    Returns {(sinks, receptive_field): GenerationExplanation}; the completion, the attentions and
    the chefer gradients are shared (chefer maps depend on the sink option only).
    stream: compute the maps inside teacher-forced forwards (`attnflow.stream`, float64; one forward
    per sink mode, the first also finding the sinks) instead of capturing (L, H, T, T) attentions:
    memory O(L n T + T²) instead of O(L H T²), for long prompts. None (default) streams whenever it
    can: every method one of raw / rollout / flow, heads="mean", receptive_fields=("none",).
    The maps equal the captured path's to ~1e-12.
    """
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
