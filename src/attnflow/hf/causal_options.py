"""The causal options of `explain_text` / `explain_texts`: attention sinks, the receptive field and
the layers to compute, decided once per call and recorded in each `Explanation`.

Decoder LMs park most of many heads' attention on their first token (attention sinks, Xiao et al.
2023; `attnflow.explain.causal`): plain rollout of SmolLM2-135M puts >= 99 % of the explained row on
token 0 at its top layers (a short prompt: raw attention 94 % there too). `explain_text` therefore
handles sinks on causal models by default (sinks=None -> "auto" = `AUTO_SINK_MODE` at the sinks
`find_sinks` finds; the same prompt's largest share of any token at any layer is then 0.96, the
explained token's own), as the generation path does, and leaves encoders as they are (None ->
"none"). Two warnings (`SinkWarning`, one per call) name what is left: with sinks="none", a
detected sink holding >= `SINK_WARN_SHARE` of a layer's map; with the sinks handled but no
receptive-field correction, a token holding >= `CONCENTRATION_SHARE` of a layer's map, which on
longer texts is rollout's receptive-field bias (every row sees token 0, whose row is e_0: a
modest share per layer adds up over 30 layers) and receptive_field="uniform" corrects.

>>> resolve_sinks(None, causal=True), resolve_sinks(None, causal=False), resolve_sinks("drop", causal=False)
('auto', 'none', 'drop')
>>> check_layers([0, -1], 4)
[0, 3]
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attnflow.options import RECEPTIVE_FIELDS, SINK_CHOICES

__all__ = [
    "CONCENTRATION_SHARE",
    "SINK_WARN_SHARE",
    "SinkWarning",
    "check_layers",
    "check_receptive_field",
    "concentration_alarm",
    "resolve_sinks",
    "sink_alarm",
    "sink_keys",
    "sink_record",
    "warn_concentration",
    "warn_sinks",
]

# With sinks="none", a detected sink holding at least this share of a layer's map is named in a
# warning: it then takes most of the picture (plain rollout of SmolLM2-135M: >= 0.996 at every layer).
SINK_WARN_SHARE = 0.5
# With the sinks handled and no receptive-field correction, a token (not the explained row) holding
# at least this share of a layer's map is named in a warning (the receptive-field bias of rollout).
CONCENTRATION_SHARE = 0.99
# The maps whose shares the warning reads: distributions over the tokens (signed methods are not).
_SHARE_METHODS = ("raw", "rollout", "flow")


class SinkWarning(UserWarning):
    """One token takes most of a map: an attention sink kept (sinks="none"), or the receptive-field
    bias of a causal map left uncorrected (receptive_field="none")."""


def _row_shares(m: Any) -> np.ndarray:
    """Each entry's share of its row's total |mass|, (L, T) float64; a row without mass is 0."""
    m = np.abs(np.asarray(m, dtype=np.float64))  # (L, T)
    total = m.sum(axis=1, keepdims=True)
    return np.divide(m, total, out=np.zeros_like(m), where=total > 0)


def resolve_sinks(sinks: str | None, *, causal: bool) -> str:
    """The sink choice of a call: None -> "auto" for causal models, "none" for encoders; a choice
    of `attnflow.options.SINK_CHOICES` as given (ValueError otherwise)."""
    if sinks is None:
        return "auto" if causal else "none"
    if sinks not in SINK_CHOICES:
        raise ValueError(
            f"sinks must be None (auto for causal models) or one of {SINK_CHOICES}, got {sinks!r}"
        )
    return sinks


def check_receptive_field(receptive_field: str) -> str:
    """`receptive_field` when it is one of `attnflow.options.RECEPTIVE_FIELDS` (ValueError otherwise)."""
    if receptive_field not in RECEPTIVE_FIELDS:
        raise ValueError(f"receptive_field must be one of {RECEPTIVE_FIELDS}, got {receptive_field!r}")
    return receptive_field


def check_layers(layers: int | Sequence[int] | None, n_layers: int) -> list[int]:
    """The 0-based layers to compute, sorted and unique: None -> every layer; an index or indices
    (negative from the top). ValueError names a layer outside the model's."""
    if layers is None:
        return list(range(n_layers))
    items = [layers] if isinstance(layers, numbers.Integral) else list(layers)
    if not items or any(isinstance(x, bool) or not isinstance(x, numbers.Integral) for x in items):
        raise ValueError(
            f"layers must be None or layer indices (0-based, negative from the top), got {layers!r}"
        )
    bad = [int(x) for x in items if not -n_layers <= int(x) < n_layers]
    if bad:
        raise ValueError(
            f"layers {bad} are outside the model's {n_layers} layers (0..{n_layers - 1}, or -1..-{n_layers})"
        )
    return sorted({int(x) % n_layers for x in items})


def sink_keys(mask: np.ndarray | None) -> list[int]:
    """Sink keys of one sample's (L, H, T) bool mask: the positions that are a sink of any head."""
    if mask is None or not np.asarray(mask).any():
        return []
    return [int(j) for j in np.flatnonzero(np.asarray(mask, dtype=bool).any(axis=(0, 1)))]


def sink_record(
    choice: str, mode: str, found: Sequence[int], receptive_field: str, groups: Sequence[Sequence[int]],
    labels: Sequence[str], model_tokens: Sequence[str] | None, *, causal: bool,
) -> dict[str, Any]:  # fmt: skip
    """What `Explanation.meta["sinks"]` holds: the choice, the mode applied, the sink positions
    found (model tokens), their displayed columns and tokens, and which columns were removed
    (moved to the diagonal or dropped: shown as removed, not as a low score)."""
    column = {j: k for k, g in enumerate(groups) for j in g}
    cols = sorted({column[j] for j in found if j in column})
    return {
        "choice": choice,
        "mode": mode,
        "causal": causal,
        "positions": list(found),
        "tokens": [
            model_tokens[j] if model_tokens is not None else labels[column[j]] for j in found if j in column
        ],
        "columns": cols,
        "removed": cols if mode != "none" else [],
        "receptive_field": receptive_field,
    }


def sink_alarm(
    maps: Mapping[str, np.ndarray], found: Sequence[int], labels: Sequence[str], groups: Sequence[Sequence[int]],
    *, layers: Sequence[int],
) -> tuple[float, str] | None:  # fmt: skip
    """(share, what) when a detected sink holds >= SINK_WARN_SHARE of a layer's map of raw /
    rollout / flow (the largest such share, and a phrase naming the token, method and layer);
    None otherwise. `layers`: the model layer (0-based) of each map row."""
    column = {j: k for k, g in enumerate(groups) for j in g}
    cols = sorted({column[j] for j in found if j in column})
    if not cols:
        return None
    worst: tuple[float, str, int, int] | None = None
    for name in _SHARE_METHODS:
        m = maps.get(name)
        if m is None:
            continue
        share = _row_shares(m)[:, cols]  # (L, len(cols))
        layer, k = np.unravel_index(int(np.argmax(share)), share.shape)
        if worst is None or share[layer, k] > worst[0]:
            worst = (float(share[layer, k]), name, int(layer), cols[k])
    if worst is None or worst[0] < SINK_WARN_SHARE:
        return None
    value, name, layer, col = worst
    return value, f"token {col} {labels[col]!r} holds {value:.1%} of {name} at layer {layers[layer] + 1}"


def concentration_alarm(
    maps: Mapping[str, np.ndarray], labels: Sequence[str], *, layers: Sequence[int], row: Any = None,
) -> tuple[float, str] | None:  # fmt: skip
    """(share, what) when one token other than the explained row holds >= CONCENTRATION_SHARE of a
    layer's map of raw / rollout / flow; None otherwise. On a causal model with its sinks handled
    this is the receptive-field bias: token 0 is seen by every row, and rollout keeps whatever
    reaches it (`attnflow.explain.causal`), which receptive_field="uniform" corrects."""
    worst: tuple[float, str] | None = None
    for name in _SHARE_METHODS:
        m = maps.get(name)
        if m is None:
            continue
        share = _row_shares(m)  # (L, T)
        if isinstance(row, int) and 0 <= row < share.shape[1]:
            share[:, row] = 0.0  # a token's own share is not a bias
        layer, col = np.unravel_index(int(np.argmax(share)), share.shape)
        value = float(share[layer, col])
        if value >= CONCENTRATION_SHARE and (worst is None or value > worst[0]):
            worst = (
                value,
                f"token {col} {labels[col]!r} holds {value:.1%} of {name} at layer {layers[layer] + 1}",
            )
    return worst


def warn_concentration(
    alarms: Sequence[tuple[str | None, tuple[float, str]]], n_texts: int, *, stacklevel: int = 3
) -> str | None:
    """One SinkWarning for a call whose texts raised `concentration_alarm`s, naming the worst and the fix."""
    if not alarms:
        return None
    text, (_, what) = max(alarms, key=lambda a: a[1][0])
    about = f" of {text[:37] + '...' if len(text) > 40 else text!r}" if text else ""
    where = (
        f"in {len(alarms)} of {n_texts} texts; the worst: {what}{about}" if n_texts > 1 else f"{what}{about}"
    )
    message = (
        f"one token takes the whole map ({where}): the causal receptive-field bias, as every row sees "
        "the first tokens; pass receptive_field='uniform' to correct it"
    )
    warnings.warn(message, SinkWarning, stacklevel=stacklevel)
    return message


def warn_sinks(
    alarms: Sequence[tuple[str | None, tuple[float, str]]], n_texts: int, *, stacklevel: int = 3
) -> str | None:
    """One SinkWarning for a call whose texts raised `alarms` [(text, `sink_alarm`)], naming the
    worst; returns the message (None when there is nothing to say)."""
    if not alarms:
        return None
    text, (_, what) = max(alarms, key=lambda a: a[1][0])
    about = f" of {text[:37] + '...' if len(text) > 40 else text!r}" if text else ""
    detail = f"{what}{about}"
    where = f"in {len(alarms)} of {n_texts} texts; the worst: {detail}" if n_texts > 1 else detail
    message = (
        f"attention sink: a sink token takes most of the map with sinks='none' ({where}); "
        "pass sinks='auto' (or 'drop') to remove it"
    )
    warnings.warn(message, SinkWarning, stacklevel=stacklevel)
    return message
