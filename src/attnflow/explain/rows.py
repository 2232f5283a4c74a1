"""Row selection: reduce a [..., layer, query, key] map to one attribution vector per layer."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from attnflow.options import ROW_CHOICES

from ._common import as_numpy, is_torch, valid_positions

__all__ = ["select_rows"]


def select_rows(maps: Any, rows: str | int = "cls", *, lengths: Any = None, mask: Any = None) -> Any:
    """One row per layer: a given query position, or the max / mean over query rows.

    rows = "cls" (row 0, the study's choice), an int position, "max" (elementwise max over rows,
    the authors' SST-2 reduction) or "mean". maps: [..., layer, query, key] (numpy or torch), e.g.
    the output of an explainer. lengths (batch,) or mask (batch, query) exclude padded query rows
    from max / mean (maps must then be [batch, layer, query, key] with query == key).
    Returns [..., layer, key] of the input's kind.

    >>> import numpy as np
    >>> maps = np.array([[[0.5, 0.5], [0.0, 1.0]]])  # (1 layer, 2 queries, 2 keys)
    >>> select_rows(maps, "cls").tolist()
    [[0.5, 0.5]]
    >>> select_rows(maps, "max").tolist()
    [[0.5, 1.0]]
    >>> select_rows(maps, "mean").tolist()
    [[0.25, 0.75]]
    """
    x = as_numpy(maps, "maps")
    if x.ndim < 3:
        raise ValueError(f"maps must be [..., layer, query, key], got shape {x.shape}")
    n_rows = x.shape[-2]
    if isinstance(rows, str):
        if rows not in ROW_CHOICES:
            raise ValueError(f"rows must be one of {ROW_CHOICES} or a row index, got {rows!r}")
    elif isinstance(rows, bool) or not isinstance(rows, numbers.Integral):
        raise ValueError(f"rows must be one of {ROW_CHOICES} or a row index, got {rows!r}")
    elif not 0 <= rows < n_rows:
        raise ValueError(f"row index {rows} out of range for {n_rows} query rows")
    padded = lengths is not None or mask is not None
    if padded:
        if x.ndim != 4 or x.shape[-1] != n_rows:
            raise ValueError(
                f"lengths / mask need maps of shape [batch, layer, query, key], query == key; got {x.shape}"
            )
        valid = valid_positions(lengths, mask, x.shape[0], n_rows)  # (B, Q)
    if rows == "cls" or not isinstance(rows, str):
        index = 0 if rows == "cls" else int(rows)
        if padded and not valid[:, index].all():
            raise ValueError(
                f"row index {index} out of range: it is padding in sample {int(np.argmin(valid[:, index]))}"
            )
        out = x[..., index, :].astype(np.float64)
    elif not padded:
        out = x.max(axis=-2) if rows == "max" else x.mean(axis=-2, dtype=np.float64)
    else:
        keep = valid[:, None, :, None]  # (B, 1, Q, 1)
        if rows == "max":
            out = np.where(keep, x, -np.inf).max(axis=-2)
        else:
            out = np.where(keep, x, 0.0).sum(axis=-2, dtype=np.float64) / valid.sum(axis=1)[:, None, None]
    out = np.asarray(out, dtype=np.float64)
    if is_torch(maps):
        import torch

        dtype = maps.dtype if maps.dtype.is_floating_point else torch.float64
        return torch.from_numpy(np.ascontiguousarray(out)).to(device=maps.device, dtype=dtype)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    return out.astype(dtype)
