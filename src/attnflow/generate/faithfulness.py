"""Does a ranking of the prompt tokens matter to the model? Delete the top k and watch log p fall.

For generated token g_t (predicted from prompt + g_<t) and a ranking of the P prompt tokens:

    drop_k(t) = log p(g_t | prompt, g_<t) - log p(g_t | prompt without its k top-ranked tokens, g_<t)

The k tokens are deleted from the input and the rest re-packed (positions 0, 1, ... again), not
masked, so no position is left that the model never saw in training. The baseline deletes k random
prompt tokens (numpy seeded): n_random sets per k, the same sets for every generated token, and
the random drop is their mean. A ranking is informative when its drop is well above the random
one. Ties in a ranking go to the earlier position.

Cheap: every removal set is one teacher-forced forward over (prompt - removed) + g_0 .. g_{n-2},
which gives log p(g_t) for every t that uses that set; identical sets are run once.

>>> import torch, transformers
>>> _ = torch.manual_seed(0)
>>> model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=16, n_embd=8, n_layer=2,
...     n_head=2, n_positions=32)).eval()
>>> scores = {"first": np.array([[1.0, 0, 0, 0], [1.0, 0, 0, 0]])}  # (n_generated, P)
>>> f = removal_faithfulness(model, [1, 2, 3, 4], [5, 6], scores, ks=(1,), n_random=2)
>>> sorted({(r["method"], r["k"]) for r in f.records})
[('first', 1), ('random', 1)]
>>> f.records[0]["removed"]  # the top-ranked prompt token, position 0
[0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.modes import eval_mode, keeps_logits

__all__ = [
    "Faithfulness",
    "continuation_logprobs",
    "faithfulness",
    "faithfulness_grid",
    "removal_faithfulness",
]

N_RANDOM = 5  # random removal sets per k
BATCH_SIZE = 16  # sequences per forward


@dataclass
class Faithfulness:
    """Tidy records, one per (generated token, k, method); method "random" holds the mean over draws.

    Each record: token_index, token, k, method, removed (positions, None for "random"), logprob,
    logprob_removed, drop (= logprob - logprob_removed; positive: the removal hurt), and for
    "random" drop_std and draws.
    """

    records: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[Any, dict[int, float]]:
        """{method: {k: mean drop over the generated tokens}} ("random" included); with the
        options of `faithfulness_grid` the key is the tuple (method, sinks, receptive_field)."""
        out: dict[Any, dict[int, list[float]]] = {}
        for r in self.records:
            name = r["method"] if r.get("sinks") is None else (r["method"], r["sinks"], r["receptive_field"])
            out.setdefault(name, {}).setdefault(r["k"], []).append(r["drop"])
        return {m: {k: float(np.mean(v)) for k, v in sorted(ks.items())} for m, ks in out.items()}


def _check_ks(ks: Sequence[int], prompt_len: int) -> list[int]:
    ks = [ks] if isinstance(ks, int) else list(ks)
    if not ks:
        raise ValueError("ks must name at least one k")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k < prompt_len:
            raise ValueError(
                f"every k must be an int in [1, {prompt_len - 1}] (at least one prompt token must stay), got {k!r}"
            )
    return [int(k) for k in dict.fromkeys(ks)]


def continuation_logprobs(
    model: Any, prefixes: Sequence[Sequence[int]], generated_ids: Sequence[int], batch_size: int
) -> np.ndarray:
    """(len(prefixes), n): log p(g_t | prefix, g_<t) for each prefix (all prefixes the same length),
    teacher-forced, in batches; the logits of the last n positions only."""
    import torch

    from attnflow.devices import model_device

    device = model_device(model)
    n = len(generated_ids)
    targets = torch.tensor(list(generated_ids), device=device)
    out = np.zeros((len(prefixes), n))
    # the logits of the last n positions (those that predict g_0 .. g_n-1) are all that is read
    kept = {"logits_to_keep": n} if keeps_logits(model) else {}
    with eval_mode(model):
        for start in range(0, len(prefixes), batch_size):
            chunk = prefixes[start : start + batch_size]
            ids = torch.tensor([[*c, *generated_ids[:-1]] for c in chunk], device=device)  # (c, p + n - 1)
            with torch.no_grad():
                logits = model(
                    input_ids=ids, attention_mask=torch.ones_like(ids), **kept
                ).logits  # (c, T or n, V)
            logp = torch.log_softmax(logits[:, -n:].double(), dim=-1)  # (c, n, V)
            out[start : start + len(chunk)] = (
                logp.gather(2, targets[None, :, None].expand(len(chunk), n, 1))[..., 0].cpu().numpy()
            )
    return out


def removal_faithfulness(
    model: Any,
    prompt_ids: Sequence[int],
    generated_ids: Sequence[int],
    scores: Mapping[str, Any],
    *,
    ks: Sequence[int] = (1, 3),
    n_random: int = N_RANDOM,
    seed: int = 0,
    batch_size: int = BATCH_SIZE,
    tokens: Sequence[str] | None = None,
) -> Faithfulness:
    """Log-prob drop of each generated token when the k top-ranked prompt tokens are deleted.

    scores: {name: (n_generated, P) array}: row t ranks the prompt tokens for generated token t
    (higher = more important). Returns a `Faithfulness` with one record per (t, k, name) and per
    (t, k) for "random" (mean over n_random seeded sets of k prompt positions, shared by every t).
    """
    prompt_ids = [int(i) for i in prompt_ids]
    generated_ids = [int(i) for i in generated_ids]
    p, n = len(prompt_ids), len(generated_ids)
    if n < 1:
        raise ValueError("generated_ids is empty")
    ks = _check_ks(ks, p)
    if isinstance(n_random, bool) or not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random must be an int >= 0, got {n_random!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if "random" in scores:
        raise ValueError("'random' is the name of the baseline; rename that ranking")
    ranked: dict[str, np.ndarray] = {}
    for name, s in scores.items():
        arr = np.asarray(s, dtype=np.float64)
        if arr.shape != (n, p):
            raise ValueError(
                f"scores[{name!r}] must have shape (n_generated, n_prompt) = {(n, p)}, got {arr.shape}"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"scores[{name!r}] contains NaN or inf")
        ranked[name] = np.argsort(-arr, axis=1, kind="stable")  # (n, P): ties -> earlier position
    labels = list(tokens) if tokens is not None else [str(i) for i in generated_ids]
    base = continuation_logprobs(model, [prompt_ids], generated_ids, batch_size)[0]  # (n,)
    rng = np.random.default_rng(seed)
    records: list[dict[str, Any]] = []
    for k in ks:
        sets: dict[tuple[int, ...], int] = {}  # removal set -> index of its forward
        uses: list[tuple[str, int, tuple[int, ...]]] = []
        for name, order in ranked.items():
            for t in range(n):
                removed = tuple(sorted(int(j) for j in order[t, :k]))
                sets.setdefault(removed, len(sets))
                uses.append((name, t, removed))
        draws = [tuple(sorted(int(j) for j in rng.choice(p, size=k, replace=False))) for _ in range(n_random)]
        for removed in draws:
            sets.setdefault(removed, len(sets))
        prefixes = [[i for j, i in enumerate(prompt_ids) if j not in set(s)] for s in sets]
        logp = continuation_logprobs(model, prefixes, generated_ids, batch_size)  # (sets, n)
        for name, t, removed in uses:
            lp = float(logp[sets[removed], t])
            records.append({"token_index": t, "token": labels[t], "k": k, "method": name, "removed": list(removed),
                            "logprob": float(base[t]), "logprob_removed": lp, "drop": float(base[t]) - lp})  # fmt: skip
        if draws:
            rand = np.stack([logp[sets[s]] for s in draws])  # (draws, n)
            for t in range(n):
                drops = base[t] - rand[:, t]
                records.append({"token_index": t, "token": labels[t], "k": k, "method": "random", "removed": None,
                                "logprob": float(base[t]), "logprob_removed": float(rand[:, t].mean()),
                                "drop": float(drops.mean()), "drop_std": float(drops.std()), "draws": len(draws)})  # fmt: skip
    records.sort(key=lambda r: (r["token_index"], r["k"], r["method"] == "random"))
    return Faithfulness(records, {"ks": ks, "n_random": n_random, "seed": seed, "methods": list(ranked)})


def faithfulness(
    model: Any,
    explanation: Any,
    *,
    ks: Sequence[int] = (1, 3),
    layer: int | str = -1,
    methods: Sequence[str] | None = None,
    n_random: int = N_RANDOM,
    seed: int = 0,
    batch_size: int = BATCH_SIZE,
) -> Faithfulness:
    """`removal_faithfulness` of a `GenerationExplanation`: rank the prompt columns of M at `layer`
    (an index, default the last; or "mean" over layers) for each of its methods (or `methods`)."""
    names = explanation.methods if methods is None else list(methods)
    p = explanation.n_prompt
    scores = {m: explanation.matrix(m, layer)[:, :p] for m in names}
    result = removal_faithfulness(
        model, explanation.prompt_ids, explanation.generated_ids, scores, ks=ks, n_random=n_random,
        seed=seed, batch_size=batch_size, tokens=explanation.generated_tokens,
    )  # fmt: skip
    result.options.update(
        layer=layer, **{k: explanation.options.get(k) for k in ("sinks", "receptive_field", "over")}
    )
    return result


def faithfulness_grid(
    model: Any,
    grid: Mapping[tuple[str, str], Any],
    *,
    ks: Sequence[int] = (1, 3),
    layer: int | str = -1,
    n_random: int = N_RANDOM,
    seed: int = 0,
    batch_size: int = BATCH_SIZE,
) -> Faithfulness:
    """`removal_faithfulness` of every method x (sinks, receptive_field) entry of
    `explain_generation_grid`, in one call: identical removal sets run once and every ranking
    shares the same random baseline. Records carry "method", "sinks" and "receptive_field"
    (None for "random")."""
    entries = list(grid.items())
    if not entries:
        raise ValueError("the grid is empty")
    first = entries[0][1]
    scores = {}
    for (sinks, field_), e in entries:
        if e.generated_ids != first.generated_ids or e.prompt_ids != first.prompt_ids:
            raise ValueError("every grid entry must explain the same prompt and completion")
        for m in e.methods:
            scores[(m, sinks, field_)] = e.matrix(m, layer)[:, : e.n_prompt]
    result = removal_faithfulness(
        model, first.prompt_ids, first.generated_ids, scores, ks=ks, n_random=n_random, seed=seed,
        batch_size=batch_size, tokens=first.generated_tokens,
    )  # fmt: skip
    for r in result.records:
        if r["method"] == "random":
            r.update(sinks=None, receptive_field=None)
        else:
            r["method"], r["sinks"], r["receptive_field"] = r["method"]  # the (method, sinks, field) key
    result.options.update(layer=layer, over=first.options.get("over"))
    return result
