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
sink-handled attention, with the model's gradient); `receptive_field` to raw, rollout and flow
(it is a no-op for raw: uniform attention's raw map is constant on each row).

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

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.explain import (
    EXPLAINERS,
    RECEPTIVE_FIELDS,
    SINK_CHOICES,
    SINK_MIN_ROWS,
    SINK_THRESHOLD,
    find_sinks,
    normalize_receptive_field,
    remove_sinks,
    sink_mode,
    uniform_baseline,
)
from attnflow.generate.gradient_maps import attnlrp_maps, chefer_maps

__all__ = ["GenerationExplanation", "explain_generation", "explain_generation_grid", "generation_table"]

GENERATION_METHODS = ("raw", "rollout", "flow", "chefer", "attnlrp")
SIGNED_METHODS = ("attnlrp",)  # maps with negative evidence: normalised by the sum of |values|
OVER = ("prompt", "all")
# Generated tokens explained per forward/backward of the "chefer" target (a batch of copies).
GRAD_BATCH_SIZE = 8


# --------------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------------


@dataclass
class GenerationExplanation:
    """What `explain_generation` returns: M per method plus everything needed to read and re-check it.

    maps[method]: (n_generated, n_columns, layers) float64 -- row t explains generated token t
    (model row rows[t] = P + t - 1); columns are the prompt tokens (over="prompt") or every token
    of the teacher-forced sequence (over="all").
    """

    prompt: str
    completion: str
    prompt_tokens: list[str]  # display labels, one per prompt token
    generated_tokens: list[str]  # display labels, one per generated token
    columns: list[str]  # labels of M's second axis
    maps: dict[str, np.ndarray]  # method -> (n_generated, n_columns, layers)
    first_token_share: dict[str, np.ndarray]  # method -> (n_generated,) share of column 0, last layer
    coverage: dict[str, np.ndarray]  # method -> (n_generated, layers) mass of the shown columns in the row
    logprobs: np.ndarray  # (n_generated,) teacher-forced log p(g_t | prompt, g_<t)
    rows: list[int]  # model row that predicted each generated token: P + t - 1
    prompt_ids: list[int]
    generated_ids: list[int]
    sinks: np.ndarray  # (layers, heads, T) bool: the sink keys of each head, found or given (see options)
    head_sinks: np.ndarray  # (layers, heads, T) bool: find_sinks(scope="head"), for the record
    options: dict[str, Any] = field(default_factory=dict)
    special_columns: list[int] = field(default_factory=list)  # columns holding special tokens

    @property
    def methods(self) -> list[str]:
        return list(self.maps)

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def n_generated(self) -> int:
        return len(self.generated_ids)

    @property
    def num_layers(self) -> int:
        return next(iter(self.maps.values())).shape[2] if self.maps else 0

    def sink_positions(self, *, per_head: bool = False) -> dict[int, float]:
        """{position: share of the (layer, head) pairs in which it is a sink}, positions in order:
        of the sinks handled (`sinks`), or with per_head=True of the per-head detection."""
        mask = self.head_sinks if per_head else self.sinks
        share = mask.reshape(-1, mask.shape[-1]).mean(axis=0)
        return {int(j): round(float(share[j]), 4) for j in np.flatnonzero(share)}

    def matrix(self, method: str | None = None, layer: int | str = "mean") -> np.ndarray:
        """(n_generated, n_columns): M at one layer (negative counts from the top) or its mean over layers."""
        m = self.maps[self._method(method)]
        if layer == "mean":
            return m.mean(axis=2)
        if (
            isinstance(layer, bool)
            or not isinstance(layer, int | np.integer)
            or not -m.shape[2] <= layer < m.shape[2]
        ):
            raise ValueError(
                f"layer must be 'mean' or an index in [-{m.shape[2]}, {m.shape[2] - 1}], got {layer!r}"
            )
        return m[:, :, int(layer)]

    def scores(self, method: str | None = None, token: int = 0, layer: int | str = "mean") -> np.ndarray:
        """(n_columns,) attributions of generated token `token` (negative counts from the end)."""
        mat = self.matrix(method, layer)
        if (
            isinstance(token, bool)
            or not isinstance(token, int | np.integer)
            or not -mat.shape[0] <= token < mat.shape[0]
        ):
            raise ValueError(
                f"token must be an index in [-{mat.shape[0]}, {mat.shape[0] - 1}] (generated tokens), got {token!r}"
            )
        return mat[int(token)]

    def _method(self, method: str | None) -> str:
        if method is None:
            return next(iter(self.maps))
        if method not in self.maps:
            raise ValueError(f"no method {method!r} in this explanation; it has {sorted(self.maps)}")
        return method

    # ---- files ----
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (maps as nested lists)."""
        d = self._meta()
        d["maps"] = {m: v.tolist() for m, v in self.maps.items()}
        d["coverage"] = {m: v.tolist() for m, v in self.coverage.items()}
        d["sinks"] = self.sinks.astype(int).tolist()
        d["head_sinks"] = self.head_sinks.astype(int).tolist()
        return d

    def _meta(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "completion": self.completion,
            "prompt_tokens": list(self.prompt_tokens),
            "generated_tokens": list(self.generated_tokens),
            "columns": list(self.columns),
            "first_token_share": {m: v.tolist() for m, v in self.first_token_share.items()},
            "logprobs": self.logprobs.tolist(),
            "rows": list(self.rows),
            "prompt_ids": list(self.prompt_ids),
            "generated_ids": list(self.generated_ids),
            "sink_positions": {str(k): v for k, v in self.sink_positions().items()},
            "head_sink_positions": {str(k): v for k, v in self.sink_positions(per_head=True).items()},
            "options": dict(self.options),
            "special_columns": list(self.special_columns),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GenerationExplanation:
        return cls(
            prompt=d["prompt"],
            completion=d["completion"],
            prompt_tokens=list(d["prompt_tokens"]),
            generated_tokens=list(d["generated_tokens"]),
            columns=list(d["columns"]),
            maps={m: np.asarray(v, dtype=np.float64) for m, v in d["maps"].items()},
            first_token_share={m: np.asarray(v, dtype=np.float64) for m, v in d["first_token_share"].items()},
            coverage={m: np.asarray(v, dtype=np.float64) for m, v in d["coverage"].items()},
            logprobs=np.asarray(d["logprobs"], dtype=np.float64),
            rows=list(d["rows"]),
            prompt_ids=list(d["prompt_ids"]),
            generated_ids=list(d["generated_ids"]),
            sinks=np.asarray(d["sinks"], dtype=bool),
            head_sinks=np.asarray(d["head_sinks"], dtype=bool),
            options=dict(d.get("options") or {}),
            special_columns=list(d.get("special_columns") or []),
        )

    def save(self, path: str | Path) -> Path:
        """Write as ``.json`` or ``.safetensors`` (by the suffix; atomically). See `save_generations`."""
        return save_generations([self], path)


def save_generations(explanations: Sequence[GenerationExplanation], path: str | Path) -> Path:
    """Write explanations to ``.json`` (a list of `to_dict`) or ``.safetensors`` (tensors
    ``"{i}/maps/{method}"`` (n, columns, layers), ``"{i}/coverage/{method}"``, ``"{i}/sinks"``; the
    rest as JSON in the metadata under ``"generations"``), atomically."""
    from attnflow.io import write_bytes

    path = Path(path)
    if path.suffix == ".json":
        return write_bytes(path, json.dumps([e.to_dict() for e in explanations], ensure_ascii=False))
    if path.suffix == ".safetensors":
        from safetensors.numpy import save

        tensors: dict[str, np.ndarray] = {}
        for i, e in enumerate(explanations):
            for m, v in e.maps.items():
                tensors[f"{i}/maps/{m}"] = np.ascontiguousarray(v, dtype=np.float32)
                tensors[f"{i}/coverage/{m}"] = np.ascontiguousarray(e.coverage[m], dtype=np.float32)
            tensors[f"{i}/sinks"] = np.ascontiguousarray(e.sinks, dtype=np.uint8)
            tensors[f"{i}/head_sinks"] = np.ascontiguousarray(e.head_sinks, dtype=np.uint8)
        meta = [dict(e._meta(), methods=e.methods) for e in explanations]
        return write_bytes(
            path, save(tensors, metadata={"generations": json.dumps(meta, ensure_ascii=False)})
        )
    raise ValueError(f"unknown file type {path.suffix!r}: use .json or .safetensors")


def load_generations(path: str | Path) -> list[GenerationExplanation]:
    """Read what `save_generations` wrote."""
    path = Path(path)
    if path.suffix == ".json":
        return [GenerationExplanation.from_dict(d) for d in json.loads(path.read_text(encoding="utf-8"))]
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        out = []
        with safe_open(str(path), framework="numpy") as f:
            for i, d in enumerate(json.loads(f.metadata()["generations"])):
                methods = d.pop("methods")
                d["maps"] = {m: f.get_tensor(f"{i}/maps/{m}") for m in methods}
                d["coverage"] = {m: f.get_tensor(f"{i}/coverage/{m}") for m in methods}
                d["sinks"] = f.get_tensor(f"{i}/sinks").astype(bool)
                d["head_sinks"] = f.get_tensor(f"{i}/head_sinks").astype(bool)
                d.pop("sink_positions", None)
                d.pop("head_sink_positions", None)
                out.append(GenerationExplanation.from_dict(d))
        return out
    raise ValueError(f"unknown file type {path.suffix!r}: use .json or .safetensors")


# --------------------------------------------------------------------------------------------------
# Generation and the teacher-forced forward
# --------------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """One generation and its teacher-forced forward (shared by every method and option)."""

    prompt_ids: list[int]
    generated_ids: list[int]
    attn: np.ndarray  # (L, H, T, T) float64, T = P + n - 1
    logprobs: np.ndarray  # (n,)
    chefer: dict[str, np.ndarray]  # sink mode -> (n, L, T): R - I, row P + t - 1, target g_t
    generate_kwargs: dict[str, Any]
    attnlrp: np.ndarray | None = None  # (n, L, T): AttnLRP of logit g_t at row P + t - 1


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

    from attnflow.hf import _model_device

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
    device = _model_device(model)
    ids = torch.tensor([prompt_ids], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    finally:
        model.train(was_training)
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

    from attnflow.hf import _model_device, forward_attentions

    device = _model_device(model)
    p, n = len(prompt_ids), len(generated_ids)
    seq = torch.tensor([prompt_ids + generated_ids[:-1]], device=device)  # (1, T), T = P + n - 1
    rows = torch.arange(p - 1, p - 1 + n, device=device)  # (n,) row P + t - 1 predicts g_t
    targets = torch.tensor(generated_ids, device=device)  # (n,)
    out = forward_attentions(model, {"input_ids": seq, "attention_mask": torch.ones_like(seq)})
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
) -> _Run:
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
    attn, logprobs = _teacher_forced(model, prompt_ids, generated)
    return _Run(prompt_ids, generated, attn, logprobs, {}, used)


# --------------------------------------------------------------------------------------------------
# Maps
# --------------------------------------------------------------------------------------------------


def _method_rows(
    name: str, attn: np.ndarray, rows: list[int], *, residual: float, heads: str | int, mode: str,
    sink_mask: np.ndarray, receptive_field: str,
) -> np.ndarray:  # fmt: skip
    """(L, len(rows), T) map of raw / rollout / flow for the given rows, sinks and receptive field."""
    if name in ("rollout", "flow"):  # the registry's causal options
        return EXPLAINERS[name](attn, residual=residual, heads=heads, rows=rows, sinks=mode,
                                sink_positions=sink_mask, receptive_field=receptive_field)  # fmt: skip
    # raw: the same steps by hand (the registry's raw has no causal options)
    a = attn if mode == "none" else remove_sinks(attn, mode=mode, sinks=sink_mask)
    fn = EXPLAINERS["raw"]
    if receptive_field == "none":
        return fn(a, residual=residual, heads=heads, rows=rows)
    if receptive_field == "column":
        full = normalize_receptive_field(fn(a, residual=residual, heads=heads), mode="column", causal=True)
        return full[:, rows, :]
    maps = fn(a, residual=residual, heads=heads, rows=rows)
    base = uniform_baseline(fn, attn, causal=True, residual=residual, heads=heads, rows=rows)
    return normalize_receptive_field(maps, mode="uniform", baseline=base, causal=True)


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
    ncols = p if over == "prompt" else run.attn.shape[-1]
    maps: dict[str, np.ndarray] = {}
    coverage: dict[str, np.ndarray] = {}
    first: dict[str, np.ndarray] = {}
    for name in methods:
        if name == "chefer":
            full = run.chefer[mode]  # (n, L, T)
        elif name == "attnlrp":
            full = run.attnlrp  # (n, L, T), signed; the same under every sink / receptive-field option
        else:
            m = _method_rows(name, run.attn, rows, residual=residual, heads=heads, mode=mode,
                             sink_mask=sink_mask, receptive_field=receptive_field)  # fmt: skip
            full = np.transpose(np.asarray(m, dtype=np.float64), (1, 0, 2))  # (L, n, T) -> (n, L, T)
        size = np.abs(full) if name in SIGNED_METHODS else full  # shares of |relevance| for signed maps
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
    from attnflow.explain.causal import _sink_mask as expand

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
    sinks applies to every method, receptive_field to raw, rollout and flow (chefer has no uniform
    baseline). generate_kwargs: any ``model.generate``
    settings (default greedy: do_sample=False); seed seeds torch before generating.
    completion_ids: explain this completion instead of generating one. residual / heads: as in
    `attnflow.explain.EXPLAINERS`. normalize: shares over the shown columns (`coverage` keeps
    the mass they had).
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
    )[(sinks, receptive_field)]  # fmt: skip


def explain_generation_grid(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    max_new_tokens: int = 20,
    methods: str | Sequence[str] = GENERATION_METHODS,
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
) -> dict[tuple[str, str], GenerationExplanation]:
    """`explain_generation` for every (sinks, receptive_field) pair, from ONE generation and forward.

    Returns {(sinks, receptive_field): GenerationExplanation}; the completion, the attentions and
    the chefer gradients are shared (chefer maps depend on the sink option only).
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
    run = _run(
        model, tokenizer, prompt, max_new_tokens=max_new_tokens, generate_kwargs=generate_kwargs, seed=seed,
        completion_ids=completion_ids,
    )  # fmt: skip
    mask = _sink_mask(run, sink_positions, sink_threshold, sink_min_rows, sink_scope)
    head_sinks = np.asarray(
        find_sinks(run.attn, threshold=sink_threshold, min_rows=sink_min_rows, scope="head", causal=True),
        dtype=bool,
    )
    if "chefer" in names:
        modes = list(dict.fromkeys(sink_mode(s) for s in sinks))
        run.chefer = chefer_maps(model, run, modes, mask, grad_batch_size)
    if "attnlrp" in names:
        run.attnlrp = attnlrp_maps(model, run)
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
