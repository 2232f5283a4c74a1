"""The batch work of `explain_batch` (:mod:`attnflow.hf.text`): each sample's rows and real positions,
the target of a length batch, the sink keys, float64 attentions, the prediction, and the batch computed
inside the forward (`attnflow.stream`: raw / rollout / flow in float64)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from attnflow.bridge.hf import AttentionOutput, Target
from attnflow.hf.causal_options import sink_keys
from attnflow.hf.loading import model_layers
from attnflow.hf.rows import _check_layer, _scored_positions, is_causal_model

__all__: list[str] = []  # private helpers of attnflow.hf.text


def _real(x: np.ndarray, b: int, keep: np.ndarray) -> np.ndarray:
    """Sample b of a batch array cut to its real positions `keep`, with a batch axis of one:
    (B, ..., T, T) -> (1, ..., T_b, T_b); (B, T) -> (1, T_b); anything else as it is."""
    if x.ndim >= 3:
        rows, cols = np.ix_(keep, keep)
        return x[b][..., rows, cols][None]
    if x.ndim == 2:
        return x[b][keep][None]
    return x


def _sink_mask(attn: np.ndarray, valid: np.ndarray, positions: Any, *, causal: bool) -> np.ndarray:
    """(B, L, H, T) bool sink keys: found per sample ("auto", `find_sinks` with its defaults) or
    given (positions / a mask, `attnflow.explain.causal.sink_key_mask`)."""
    from attnflow.explain import find_sinks, sink_key_mask

    if isinstance(positions, str):
        if positions != "auto":
            raise ValueError(f"sink_positions must be 'auto', positions or a mask, got {positions!r}")
        return np.asarray(find_sinks(attn, mask=valid, causal=True if causal else None), dtype=bool)
    return sink_key_mask(positions, attn.shape, valid)


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


def _stream_batch(
    model: Any,
    inputs: Mapping[str, Any],
    names: list[str],
    *,
    layer: int,
    rows: Any,
    residual: float,
    mask_token_id: int | None,
    mode: str = "none",
    sink_positions: Any = "auto",
    detect: bool = False,
    layers: list[int] | None = None,
    target: Any = "predicted",
) -> tuple[AttentionOutput, list[dict[str, Any]]]:
    """`explain_batch` for raw / rollout / flow and the gradient methods (Chefer, Grad-SAM),
    computed inside the forward (and its backward) in float64.

    With sinks (mode "diagonal" / "drop"), a first forward adds up the sink scores
    (`attnflow.stream`) and computes what needs no sinks; a second one computes the maps with
    each head's sinks handled, when there are any. The gradient methods run one forward and one
    backward of `target` (`attnflow.stream.stream_gradient_maps`), each head's attention
    sink-handled in their products with ∇A. Flow is solved for `layers` only."""
    from attnflow.bridge import Captured
    from attnflow.bridge.hf import TOKENIZER_ONLY_KEYS, last_positions
    from attnflow.explain import sink_key_mask, sinks_from_scores
    from attnflow.stream import GRAD_STREAM_METHODS, stream_gradient_maps, stream_maps

    ids = inputs["input_ids"]
    batch = {k: v for k, v in inputs.items() if k not in TOKENIZER_ONLY_KEYS}
    mask = inputs.get("attention_mask")
    valid = (torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()).cpu()
    scored = _scored_positions(model, inputs, rows, mask_token_id)  # (B,) absolute, or None
    _, idx, _, row_of = _explained_rows(model, valid.numpy(), rows, scored)
    at = torch.tensor([[int(i[r])] for i, r in zip(idx, row_of, strict=True)], device=ids.device)  # (B, 1)
    if scored is None:
        scored = last_positions(valid.to(ids.device), ids.shape[0], ids.shape[1], ids.device)
    find = isinstance(sink_positions, str) and (mode != "none" or detect)
    if isinstance(sink_positions, str) and sink_positions != "auto":
        raise ValueError(f"sink_positions must be 'auto', positions or a mask, got {sink_positions!r}")
    grads = [n for n in names if n in GRAD_STREAM_METHODS]
    plain = [n for n in names if n not in GRAD_STREAM_METHODS]
    # with sinks to handle, the maps wait for the sinks (a trained LM nearly always has one)
    first = plain if mode == "none" else []
    got = stream_maps(model, batch, at, first, residual=residual, dtype=torch.float64,
                      logits_at=scored.to(ids.device), sink_scores=find,
                      flow_layers=layers)  # fmt: skip
    sink_mask = None  # (B, L, H, T) bool
    if find:
        scores, seen, _ = got["sink_scores"]
        sink_mask = sinks_from_scores(scores, seen)
    elif mode != "none":
        shape = (ids.shape[0], model_layers(model) or 0, 1, ids.shape[1], ids.shape[1])
        sink_mask = sink_key_mask(sink_positions, shape, valid.numpy())
    handled = mode != "none" and sink_mask is not None and bool(sink_mask.any())
    if grads:
        got.update(stream_gradient_maps(model, batch, at, grads, target=target, positions=scored.to(ids.device),
                                        dtype=torch.float64, sinks=_per_head(sink_mask, model) if handled else None,
                                        sink_mode=mode if handled else "none"))  # fmt: skip
    if mode != "none":
        again = plain if handled else [n for n in plain if n not in first]
        if again:
            more = stream_maps(model, batch, at, again, residual=residual, dtype=torch.float64,
                               logits_at=scored.to(ids.device), flow_layers=layers,
                               sinks=_per_head(sink_mask, model) if handled else None,
                               sink_mode=mode if handled else "none")  # fmt: skip
            got.update({n: more[n] for n in again})
    num_layers = got[names[0]].shape[1] if names[0] != "flow" else (model_layers(model) or 0)
    chosen = layers if layers is not None else list(range(num_layers))
    for n in names:
        if n != "flow":  # raw / rollout hold every layer; flow was solved for `chosen` only
            got[n] = got[n][:, chosen]
    layer = _check_layer(layer, len(chosen))
    logits = got["logits"]
    head = getattr(model, "get_output_embeddings", lambda: None)()
    lm = logits is not None and head is not None  # a language model's next-token (or masked) logits
    results = []
    for b, keep in enumerate(idx):
        maps = {
            name: got[name][b, :, 0][:, torch.from_numpy(keep)].cpu().numpy() for name in names
        }  # (L, T_b)
        z = None if logits is None else logits[b].float().cpu().numpy()
        found = [] if sink_mask is None else sink_keys(sink_mask[b][..., keep])
        results.append({"maps": maps, "row": row_of[b], "layer": layer, "logits": z, "lm": bool(lm),
                        "keep": valid[b], "sinks": found, "layers": chosen})  # fmt: skip
    out = Captured(logits=logits, attentions=None, attention_mask=valid, positions=scored)
    return out, results


def _per_head(mask: np.ndarray, model: Any) -> np.ndarray:
    """A (B, L, 1, T) sink mask (given positions) as (B, L, H, T), the stream's per-head layout."""
    if mask.shape[2] != 1:
        return mask
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(getattr(text, "num_attention_heads", None) or getattr(text, "n_head", 1))
    return np.broadcast_to(mask, (mask.shape[0], mask.shape[1], heads, mask.shape[3])).copy()


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
