"""Flow of a causal graph from packed lower triangles (`flow_rows_packed`, the `run_lower` kernel):
the layout, the values of networkx and of the dense solver, and what it refuses."""

import numpy as np
import pytest

from attnflow.explain._reference import reference_flow
from attnflow.explain.flow import flow_rows, flow_rows_packed, pack_lower

TIGHT = 1e-10  # vs networkx (Edmonds-Karp on the same float capacities)
SOLVERS = 1e-12  # packed vs dense: two exact solvers taking different paths to the same maximum


def causal_caps(rng, layers, tokens, sink=20.0):
    """(L, T, T) residual-mixed capacities of a causal model: rows over the prefix, a sink at 0."""
    w = np.tril(np.exp(rng.standard_normal((layers, tokens, tokens)) * 2.0))
    w[:, :, 0] *= sink
    a = 0.5 * w / w.sum(-1, keepdims=True) + 0.5 * np.eye(tokens)
    return a / a.sum(-1, keepdims=True)


def test_packed_rows_hold_the_lower_triangle_row_by_row():
    x = np.arange(2 * 16, dtype=float).reshape(2, 4, 4)
    packed = pack_lower(x)
    assert packed.shape == (2, 10)
    for i in range(4):
        for k in range(i + 1):
            assert packed[1, i * (i + 1) // 2 + k] == x[1, i, k]


# (7, 17): networkx solves 2,023 problems, ~25 s on 2 cores: the long tier's
@pytest.mark.parametrize(
    "layers, tokens", [(1, 6), (2, 7), (3, 5), (5, 12), pytest.param(7, 17, marks=pytest.mark.slow)]
)
def test_packed_flow_equals_networkx_on_every_layer_and_source(layers, tokens):
    caps = causal_caps(np.random.default_rng(layers * 100 + tokens), layers, tokens)
    row_layer = np.repeat(np.arange(layers), tokens)[::-1].copy()  # unsorted: the kernel wants them by layer
    row_src = np.tile(np.arange(tokens), layers)
    got = flow_rows_packed(pack_lower(caps), tokens, row_layer, row_src)
    want = reference_flow(caps, normalize=False)  # (L, T, T): [layer, source, sink]
    np.testing.assert_allclose(got, want[row_layer, row_src], atol=TIGHT, rtol=0)


def test_packed_flow_equals_the_dense_solver_on_a_long_last_row():
    layers, tokens = 8, 96
    caps = causal_caps(np.random.default_rng(7), layers, tokens)
    last = tokens - 1
    dense = flow_rows(
        caps[None], np.ones((1, tokens), bool), np.array([layers - 1, 3]), caps[None, [layers - 1, 3], [last, 40]],
        np.ones((1, 2), bool),
    )[0]  # fmt: skip
    got = flow_rows_packed(pack_lower(caps), tokens, [layers - 1, 3], [last, 40])
    np.testing.assert_allclose(got, dense, atol=SOLVERS, rtol=0)
    assert (got <= 1.0 + 1e-12).all() and (
        got[0] > 0
    ).all()  # the supply bounds each sink; every input is reached


@pytest.mark.parametrize(
    "args, message",
    [
        ((np.zeros((2, 9)), 4, [0], [0]), r"packed must be \(layers, 10\)"),
        ((np.zeros((2, 10)), 4, [2], [0]), r"row_layer must be 0-based layers in \[0, 2\)"),
        ((np.zeros((2, 10)), 4, [0], [4]), "row_src index 4 out of range"),
        ((np.zeros((2, 10)), 4, [0, 1], [0]), "one entry per row"),
    ],
)
def test_bad_packed_calls_are_refused_naming_the_argument(args, message):
    with pytest.raises(ValueError, match=message):
        flow_rows_packed(*args)
