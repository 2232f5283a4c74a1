"""The generation and its teacher-forced forward, shared by every method and option of
:func:`attnflow.generate.explain_generation` (:mod:`attnflow.generate.explanation`): the prompt's
ids, the greedy (or given) completion, one eager forward over prompt + g_0 .. g_{n-2} for the captured
attentions and the log-probabilities, or the streamed forwards (`attnflow.stream`) that compute the
maps without holding (L, H, T, T)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.modes import eval_mode

__all__: list[str] = []  # private helpers of attnflow.generate.explanation


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
