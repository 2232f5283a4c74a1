"""attnflow.explain: raw attention, attention rollout and attention flow (Abnar & Zuidema 2020),
and the class-specific relevance of Chefer, Gur & Wolf (2021): generic (ICCV) and LRP-based (CVPR).

Pure functions, arrays in and arrays out (numpy in -> numpy out, torch in -> torch out, same float
dtype and device; computed in float64 on the CPU). Inputs are attention probabilities with the
axis order

    [batch, layer, head, query, key]    (one sample: [layer, head, query, key])

and variable-length batches say which positions are real with `lengths` (batch,) or a boolean
`mask` (batch, key); padded positions get exactly 0 in every output. Invalid input raises
ValueError naming the rule it breaks. Conventions (the authors' code): heads are averaged, then
A = (1 - residual) W + residual I with rows re-normalised (residual = 0.5); "raw" is W itself.
The Chefer methods also take the gradient of the explained logit w.r.t. attn (and, for the LRP
rule, LRP's relevance of each attention map), shaped like attn: see `attnflow.lrp`.

>>> import numpy as np
>>> from attnflow.explain import attention_flow, attention_rollout, raw_attention
>>> attn = np.array([[[[1.0, 0.0], [0.5, 0.5]]], [[[0.5, 0.5], [0.0, 1.0]]]])  # (2, 1, 2, 2)
>>> attention_rollout(attn, residual=0.0)[-1, 0].tolist()
[0.75, 0.25]
>>> attention_flow(attn, residual=0.0, sources=[0])[-1, 0].round(4).tolist()
[0.6667, 0.3333]
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import causal
from .causal import *  # noqa: F403  (sinks of causal attention and their choices: causal.__all__)
from .raw import raw_attention
from .relevance import CLS_SELF, chefer_generic, chefer_lrp
from .rollout import attention_rollout
from .rows import select_rows

if TYPE_CHECKING:  # the lazy names below, for type checkers and linters
    from .flow import attention_flow
    from .heads import head_flow, head_rollout
    from .receptive_field import (
        causal_flow,
        causal_rollout,
        normalize_receptive_field,
        uniform_attention,
        uniform_baseline,
    )
    from .registry import Explainer

# Imported on first use: the flow solver (its compiled kernels). Light imports of this package (the
# method kit, `attnflow.explain.kit`, which the method records import) stay light. The methods by
# name (EXPLAINERS) are the records' view, one layer up: attnflow.methods.
_LAZY = {
    "attention_flow": "flow",
    "head_flow": "heads",
    "head_rollout": "heads",
    "causal_flow": "receptive_field",
    "causal_rollout": "receptive_field",
    "normalize_receptive_field": "receptive_field",
    "uniform_attention": "receptive_field",
    "uniform_baseline": "receptive_field",
    "Explainer": "registry",
}


def __getattr__(name: str) -> Any:
    if name in ("EXPLAINERS", "EXPLAINER_INPUTS"):
        raise AttributeError(
            f"attnflow.explain.{name} is now attnflow.methods.{name}: the methods by name are a view of "
            "the method records, which live above the kit and the algorithms"
        )
    if name in _LAZY:
        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def flow_threads() -> int:
    """The threads the next `attention_flow` call may use: ATTNFLOW_THREADS (checked, at most the
    CPUs this process may use), else the CPUs free now. The solver's public face for benchmarks."""
    from ._maxflow._threads import flow_threads as threads

    return threads()


def solver_file() -> str:
    """The path of the compiled max-flow extension: what a copy of the package must carry."""
    from ._maxflow import _kernels

    return str(_kernels.__file__)


# The axis order of every attention input (a 4-d input is one sample, without "batch").
AXES = ("batch", "layer", "head", "query", "key")
# numpy.ndarray or torch.Tensor of attention probabilities, axes AXES.
Attention = Any

__all__ = [  # this module's names, then causal's
    "AXES",
    "CLS_SELF",
    "Attention",
    "Explainer",
    "attention_flow",
    "attention_rollout",
    "causal_flow",
    "causal_rollout",
    "chefer_generic",
    "chefer_lrp",
    "flow_threads",
    "head_flow",
    "head_rollout",
    "normalize_receptive_field",
    "raw_attention",
    "select_rows",
    "solver_file",
    "uniform_attention",
    "uniform_baseline",
    *causal.__all__,
]
