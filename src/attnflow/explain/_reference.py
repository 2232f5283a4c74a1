"""The authors' attention-flow formulation with networkx: a slow, independent oracle (internal).

One networkx graph over all layers (node id = layer * T + position, edges only for nonzero
capacities, as `nx.from_numpy_matrix` built it), then `maximum_flow_value` with Edmonds-Karp once
per (source node, input node) pair, each source row normalised to sum 1. Used by the tests and by
benchmarks/flow_speed.py; networkx is imported only here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["reference_flow", "reference_graph"]


def reference_graph(caps: np.ndarray):
    """networkx DiGraph of the layered attention graph. caps: (L, T, T) residual-mixed, one sample."""
    import networkx as nx

    n_layers, tokens, _ = caps.shape
    graph = nx.DiGraph()
    graph.add_nodes_from(range((n_layers + 1) * tokens))
    for layer in range(1, n_layers + 1):
        for i in range(tokens):
            for k in range(tokens):
                c = float(caps[layer - 1, i, k])
                if c > 0:
                    graph.add_edge(layer * tokens + i, (layer - 1) * tokens + k, capacity=c)
    return graph


def reference_flow(
    caps: np.ndarray,
    *,
    sources: list[int] | None = None,
    layers: list[int] | None = None,
    normalize: bool = True,
    graph=None,
) -> np.ndarray:
    """Max flow from (layer l+1, source s) to every input node, networkx Edmonds-Karp per pair.

    caps: (L, T, T) residual-mixed capacities of one sample (caps[l] = A_{l+1}). layers are 0-based
    layer-axis indices as in `attention_flow`. Returns (len(layers), len(sources), T) float64.
    """
    import networkx as nx
    from networkx.algorithms.flow import edmonds_karp

    caps = np.asarray(caps, dtype=np.float64)
    n_layers, tokens, _ = caps.shape
    graph = reference_graph(caps) if graph is None else graph
    sources = list(range(tokens)) if sources is None else list(sources)
    layers = list(range(n_layers)) if layers is None else list(layers)
    out = np.zeros((len(layers), len(sources), tokens))
    for a, layer in enumerate(layers):
        for b, s in enumerate(sources):
            u = (layer + 1) * tokens + s
            for j in range(tokens):
                out[a, b, j] = nx.maximum_flow_value(graph, u, j, flow_func=edmonds_karp)
            if normalize and out[a, b].sum() > 0:
                out[a, b] /= out[a, b].sum()
    return out
