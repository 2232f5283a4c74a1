"""The calling convention of every attention method (`Explainer`). The methods by name are a view
of the method records, one layer up: ``attnflow.methods.EXPLAINERS`` (and ``EXPLAINER_INPUTS``);
this package (the kit and the algorithms) never reads the records, it is handed them.

Every entry is fn(attn, *, residual=0.5, heads="mean", rows=None, lengths=None, mask=None, **extra)
and returns, per layer, a token-attribution map [..., layer, query, key] (numpy in -> numpy out,
torch in -> torch out): entry [l, i, j] is how much input token j is attributed to position i at
layer l (0-based; l = 0 is the paper's L1). rows=[0] returns only the CLS row(s),
[..., layer, len(rows), key] -- the cheap path for flow, whose cost grows with the rows asked for.
Padded positions (lengths / mask) are 0. Then reduce rows with `select_rows`.
`EXPLAINER_INPUTS[name]` lists the extra inputs a method needs, passed as keyword arguments shaped
like attn (what a pipeline must capture besides attn; `attnflow.lrp.lrp_relevance` returns both).

The built-in methods (`attnflow.explain.adapters`):

- "raw": head-aggregated attention W(l) (no residual: `residual` is validated and ignored).
- "rollout": Ã(l) = A(l) Ã(l-1), A = (1 - residual) W + residual I; rows sum to 1.
- "flow": max-flow value from node (l+1, i) to input node (0, j), each row normalised to sum 1.
- "chefer": the generic rule of Chefer et al. (ICCV 2021), needs attn_grad (∂ logit / ∂ attn):
  R(l) = R(l-1) + mean_h[(∇A ⊙ A)⁺] R(l-1) from R = I; rows sum to >= 1 (`residual` ignored).
- "chefer_lrp": Chefer et al. (CVPR 2021), needs attn_grad and attn_relevance (LRP's R(A)):
  C(l) = rownorm(I + mean_h[(∇A ⊙ R(A))⁺]) C(l-1); rows sum to 1 (`residual` ignored).
  Both also take start_layer= and cls_self= (see `attnflow.explain.relevance`).

Every method takes sinks= / sink_positions= / receptive_field= for causal attention (attention
sinks and the receptive-field bias of decoders, `attnflow.explain.causal`; defaults: plain), raw,
rollout and flow through their causal variants, the others through the kit
(`attnflow.explain.kit`); a method with needs takes receptive_field="column" but refuses
"uniform" (no uniform baseline exists for gradients or LRP relevance).

>>> import numpy as np
>>> from attnflow.methods import EXPLAINER_INPUTS, EXPLAINERS
>>> attn = np.array([[[[1.0, 0.0], [0.5, 0.5]]], [[[0.5, 0.5], [0.0, 1.0]]]])  # (2, 1, 2, 2)
>>> {name: fn(attn, residual=0.0, rows=[0])[1, 0].round(4).tolist()
...  for name, fn in EXPLAINERS.items() if not EXPLAINER_INPUTS[name]}
{'raw': [0.5, 0.5], 'rollout': [0.75, 0.25], 'flow': [0.6667, 0.3333]}
>>> EXPLAINERS["chefer"](attn, attn_grad=np.ones_like(attn), rows=[0])[1, 0].tolist()  # ((I + A2)(I + A1))[0]
[3.25, 0.75]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Explainer"]

# fn(attn, *, residual, heads, rows, lengths, mask, **needs, **options) -> [..., layer, query (or len(rows)), key]
Explainer = Callable[..., Any]
