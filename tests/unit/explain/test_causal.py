"""Causal attention: mask detection, attention sinks and the receptive-field normalisation.

Each test states the math it checks; oracles are a direct matrix product (rollout) and the
networkx formulation of the authors (flow, `attnflow.explain._reference`).
"""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.explain import (
    attention_flow,
    attention_rollout,
    causal_flow,
    causal_rollout,
    find_sinks,
    is_causal,
    normalize_receptive_field,
    remove_sinks,
    sink_scores,
    uniform_attention,
    uniform_baseline,
)
from attnflow.methods import EXPLAINERS

EXACT = 1e-12  # float64 round-off of a few exact operations
ROW_TOL = 1e-9  # rows of float64 products stay stochastic within this


def _causal_softmax(
    rng: np.random.Generator, layers: int, heads: int, tokens: int, scale: float = 1.0
) -> np.ndarray:
    """Random causal attention [layer, head, query, key]: softmax of Gaussian logits below the diagonal."""
    logits = rng.normal(scale=scale, size=(layers, heads, tokens, tokens))
    logits = np.where(np.tril(np.ones((tokens, tokens), dtype=bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def _plant_sink(attn: np.ndarray, key: int, heads: list[tuple[int, int]], share: float) -> np.ndarray:
    """Every row i > key of the given (layer, head) pairs sends `share` of its attention to `key`."""
    out = attn.copy()
    for layer, head in heads:
        rows = out[layer, head, key + 1 :]
        rows *= 1.0 - share
        rows[:, key] += share
    return out


def _mix(w: np.ndarray, residual: float) -> np.ndarray:
    """A = (1 - r) W + r I, rows re-normalised: the authors' residual, for the oracles."""
    a = (1.0 - residual) * w + residual * np.eye(w.shape[-1])
    return a / a.sum(axis=-1, keepdims=True)


def _rollout_oracle(attn: np.ndarray, residual: float) -> np.ndarray:
    """Direct matrix product: R(l) = A(l) ... A(1), heads averaged. attn (L, H, T, T) -> (L, T, T)."""
    a = _mix(attn.mean(axis=1), residual)
    out, r = [], np.eye(attn.shape[-1])
    for layer in range(a.shape[0]):
        r = a[layer] @ r
        out.append(r)
    return np.stack(out)


# --------------------------------------------------------------------------------------------------
# is_causal
# --------------------------------------------------------------------------------------------------


def test_causal_attention_is_detected_and_full_attention_is_not():
    rng = np.random.default_rng(0)
    assert is_causal(_causal_softmax(rng, 2, 3, 5))
    assert is_causal(uniform_attention(5, layers=2))
    assert not is_causal(uniform_attention(5, causal=False))
    assert is_causal(np.ones((1, 1, 1, 1)))  # one token: nothing later to look at


def test_any_weight_on_a_later_key_breaks_causality():
    a = uniform_attention(4)
    a[0, 0, 1] = [0.5, 0.5 - 1e-9, 1e-9, 0.0]  # row 1 puts 1e-9 on key 2: not "exactly 0"
    assert not is_causal(a)


def test_padding_is_ignored_by_is_causal_on_either_side():
    # left padding: positions 0-1 are padding with junk, the 3 real tokens are causal among themselves
    real = uniform_attention(3)[0, 0]
    a = np.full((1, 1, 1, 5, 5), 0.2)
    a[0, 0, 0, 2:, 2:] = real
    a[0, 0, 0, 2:, :2] = 0.0
    mask = np.array([[False, False, True, True, True]])
    assert is_causal(a, mask=mask)
    b = np.full((1, 1, 1, 5, 5), 0.2)  # right padding
    b[0, 0, 0, :3, :3] = real
    b[0, 0, 0, :3, 3:] = 0.0
    assert is_causal(b, lengths=[3])


# --------------------------------------------------------------------------------------------------
# The receptive field
# --------------------------------------------------------------------------------------------------


def test_uniform_causal_attention_is_biased_to_token_0():
    # the number: 6 layers of uniform causal attention over 8 tokens, residual 0.5
    rollout = attention_rollout(uniform_attention(8, layers=6))
    assert rollout[-1, -1, 0] == pytest.approx(0.5292, abs=1e-4)
    assert rollout[-1, -1, 0] > 4 * (1 / 8)


@pytest.mark.parametrize("residual", [0.0, 0.5, 0.9])
@pytest.mark.parametrize(("layers", "tokens"), [(1, 3), (6, 8), (4, 13)])
def test_uniform_normalisation_maps_uniform_attention_to_exactly_uniform_rows(residual, layers, tokens):
    # R'(l)[i, j] = R(l)[i, j] / U(l)[i, j] with R = U: every visible entry 1, row i -> 1/(i+1) on 0..i
    u = uniform_attention(tokens, layers=layers, heads=2)
    out = causal_rollout(u, residual=residual, receptive_field="uniform")
    np.testing.assert_allclose(out, np.broadcast_to(u[:, 0], out.shape), atol=EXACT)
    flow = causal_flow(u, residual=residual, sources=[0, tokens - 1], receptive_field="uniform")
    np.testing.assert_allclose(flow, u[:, 0][:, [0, tokens - 1]], atol=EXACT)


def test_uniform_normalisation_is_per_sample_on_a_padded_batch():
    # two samples of 5 and 3 real tokens in one [2, L, H, 5, 5] batch: each row uniform on its own keys
    a = np.zeros((2, 3, 1, 5, 5))
    a[0] = uniform_attention(5, layers=3)
    a[1, :, :, :3, :3] = uniform_attention(3, layers=3)
    out = causal_rollout(a, receptive_field="uniform", lengths=[5, 3])
    np.testing.assert_allclose(out[0], np.broadcast_to(uniform_attention(5)[0, 0], (3, 5, 5)), atol=EXACT)
    np.testing.assert_allclose(
        out[1, :, :3, :3], np.broadcast_to(uniform_attention(3)[0, 0], (3, 3, 3)), atol=EXACT
    )
    assert np.all(out[1, :, 3:] == 0) and np.all(out[1, :, :, 3:] == 0)


def test_uniform_normalisation_divides_by_the_uniform_rollout():
    rng = np.random.default_rng(1)
    attn = _causal_softmax(rng, 3, 2, 6)
    r, u = _rollout_oracle(attn, 0.5), _rollout_oracle(uniform_attention(6, layers=3), 0.5)
    expected = np.divide(r, u, out=np.zeros_like(r), where=u > 0)
    expected /= expected.sum(axis=-1, keepdims=True)  # rows back to their sum, 1
    np.testing.assert_allclose(causal_rollout(attn, receptive_field="uniform"), expected, atol=ROW_TOL)
    base = uniform_baseline(attention_rollout, attn)
    np.testing.assert_allclose(base, u, atol=ROW_TOL)


def test_column_normalisation_by_hand():
    # M = [[1, 0], [.75, .25]]: column means over the rows that see them: (1 + .75)/2 = .875, .25/1.
    # Row 1 -> [.75/.875, 1] = [6/7, 1] -> rescaled to sum 1: [6/13, 7/13]; row 0 stays [1, 0].
    m = np.array([[[1.0, 0.0], [0.75, 0.25]]])
    out = normalize_receptive_field(m, mode="column")
    np.testing.assert_allclose(out[0], [[1.0, 0.0], [6 / 13, 7 / 13]], atol=EXACT)
    # without a causal mask the column mean runs over every row: (.75 + .25)/2 = .5 for column 1
    full = normalize_receptive_field(np.array([[[0.5, 0.5], [0.75, 0.25]]]), mode="column", causal=False)
    # means: col 0 (.5 + .75)/2 = .625, col 1 .375; row 0: [.8, 4/3] -> [.375, .625]
    np.testing.assert_allclose(full[0, 0], [0.375, 0.625], atol=EXACT)


def test_receptive_field_keeps_row_sums_and_padding():
    rng = np.random.default_rng(2)
    a = np.stack([_causal_softmax(rng, 2, 2, 5), _causal_softmax(rng, 2, 2, 5)])
    a[1, :, :, 4, :] = 0.0  # sample 1 has 4 real tokens
    a[1, :, :, :, 4] = 0.0
    for mode in ("column", "uniform"):
        out = causal_rollout(a, receptive_field=mode, lengths=[5, 4])
        np.testing.assert_allclose(out[0].sum(-1), 1.0, atol=ROW_TOL)
        np.testing.assert_allclose(out[1, :, :4].sum(-1), 1.0, atol=ROW_TOL)
        assert np.all(out[1, :, 4] == 0) and np.all(out[1, :, :, 4] == 0)
        assert np.all(out >= 0)


def test_column_flow_needs_every_row_and_takes_the_asked_ones():
    rng = np.random.default_rng(3)
    attn = _causal_softmax(rng, 3, 2, 5)
    every = causal_flow(attn, receptive_field="column")
    some = causal_flow(attn, sources=[1, 4], receptive_field="column")
    np.testing.assert_allclose(some, every[:, [1, 4]], atol=EXACT)
    with pytest.raises(ValueError, match="every query row"):
        normalize_receptive_field(attention_flow(attn, sources=[4]), mode="column")


# --------------------------------------------------------------------------------------------------
# Attention sinks
# --------------------------------------------------------------------------------------------------


def test_sink_scores_average_the_rows_that_can_see_each_key():
    # key 0: rows 1, 2 give .5 and .5 -> .5; key 1: row 2 gives .25; key 2: no later row -> 0
    a = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]]])
    np.testing.assert_allclose(sink_scores(a)[0, 0], [0.5, 0.25, 0.0], atol=EXACT)
    # without a causal mask every other row sees every key: key 2 gets mean(.25, .25) from rows 0, 1
    f = np.array([[[[0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25]]]])
    np.testing.assert_allclose(sink_scores(f)[0, 0], [0.5, 0.25, 0.25], atol=EXACT)


def test_a_planted_sink_is_found_in_its_heads_and_nowhere_else():
    rng = np.random.default_rng(4)
    attn = _causal_softmax(rng, 3, 4, 10, scale=0.3)  # nearly uniform: no key above 0.5 on average
    heads = [(0, 1), (1, 1), (1, 3), (2, 0)]
    planted = _plant_sink(attn, 2, heads, share=0.8)
    assert not find_sinks(attn, scope="head").any()
    per_head = find_sinks(planted, scope="head")  # (L, H, T)
    expected = np.zeros_like(per_head)
    for layer, head in heads:
        expected[layer, head, 2] = True
    np.testing.assert_array_equal(per_head, expected)
    # 4 of the 12 heads (1/3 >= SINK_HEAD_SHARE = 1/4): key 2 is a sink of every head
    by_position = find_sinks(planted)
    assert by_position[:, :, 2].all() and not np.delete(by_position, 2, axis=-1).any()
    # in fewer than a quarter of the heads it stays a per-head sink only
    assert not find_sinks(_plant_sink(attn, 2, heads[:2], share=0.8)).any()


def test_keys_seen_by_fewer_than_min_rows_rows_are_never_sinks():
    # a previous-token head: A[i, i-1] = 1. Key T-2 gets 1.0 from its one later row: not a sink
    tokens = 6
    prev = np.zeros((1, 1, tokens, tokens))
    prev[0, 0, 0, 0] = 1.0
    prev[0, 0, np.arange(1, tokens), np.arange(tokens - 1)] = 1.0
    assert sink_scores(prev)[0, 0, tokens - 2] == 1.0
    assert not find_sinks(prev, scope="head").any()
    assert find_sinks(prev, scope="head", min_rows=1)[0, 0, tokens - 2]


@pytest.mark.parametrize("mode", ["drop", "diagonal"])
@pytest.mark.parametrize("scope", ["head", "position"])
def test_sink_handling_keeps_rows_stochastic(mode, scope):
    rng = np.random.default_rng(5)
    attn = _plant_sink(_causal_softmax(rng, 3, 4, 9), 0, [(0, 0), (1, 2), (2, 1), (2, 3)], share=0.9)
    out = remove_sinks(attn, mode=mode, scope=scope)
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, atol=ROW_TOL)
    assert np.all(out >= 0) and is_causal(out)
    assert find_sinks(attn, scope=scope)[..., 0].any()
    # the sink column is empty off the diagonal wherever it was a sink
    sinks = find_sinks(attn, scope=scope)[..., 0]  # (L, H)
    assert np.all(out[sinks][:, 1:, 0] == 0)


@pytest.mark.parametrize("mode", ["drop", "diagonal"])
def test_sink_handling_is_a_no_op_without_sinks(mode):
    rng = np.random.default_rng(6)
    attn = _causal_softmax(rng, 2, 3, 7).astype(np.float32)
    before = attn.copy()
    for sinks in (None, [], "auto"):
        out = remove_sinks(attn, mode=mode, sinks=sinks, threshold=0.99)
        np.testing.assert_array_equal(out, attn)
        assert out.dtype == np.float32
    np.testing.assert_array_equal(
        remove_sinks(uniform_attention(8, layers=2), mode=mode), uniform_attention(8, layers=2)
    )
    np.testing.assert_array_equal(attn, before)  # input untouched


def test_sink_modes_by_hand():
    # row 2 = [.5, .25, .25] with sink 0: diagonal -> [0, .25, .75]; drop -> [0, .5, .5]
    # row 1 = [.5, .5, 0]: diagonal -> [0, 1, 0]; drop -> [0, 1, 0]; row 0 is its own sink: unchanged
    a = np.array([[[[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]]])
    np.testing.assert_allclose(
        remove_sinks(a, mode="diagonal", sinks=[0])[0, 0], [[1, 0, 0], [0, 1, 0], [0, 0.25, 0.75]], atol=EXACT
    )
    np.testing.assert_allclose(
        remove_sinks(a, mode="drop", sinks=[0])[0, 0], [[1, 0, 0], [0, 1, 0], [0, 0.5, 0.5]], atol=EXACT
    )
    # a row with all its mass on other sinks keeps its token: drop puts 1 on the diagonal
    b = np.array([[[[1, 0, 0], [1, 0, 0], [0.5, 0.5, 0]]]])
    np.testing.assert_allclose(
        remove_sinks(b, mode="drop", sinks=[0, 1])[0, 0], [[1, 0, 0], [0, 1, 0], [0, 0, 1]], atol=EXACT
    )
    np.testing.assert_array_equal(remove_sinks(a, mode="none"), a)


def test_explicit_sink_masks_of_every_accepted_shape_agree():
    rng = np.random.default_rng(7)
    attn = _causal_softmax(rng, 2, 2, 5)
    key = np.array([True, False, False, False, False])
    want = remove_sinks(attn, sinks=[0])
    for spec in (0, key, np.broadcast_to(key, (2, 2, 5))):
        np.testing.assert_allclose(remove_sinks(attn, sinks=spec), want, atol=EXACT)
    batched = remove_sinks(attn[None], sinks=key[None])
    np.testing.assert_allclose(batched[0], want, atol=EXACT)


def test_torch_in_torch_out_and_inputs_untouched():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    attn = torch.tensor(
        _plant_sink(_causal_softmax(rng, 2, 2, 6), 0, [(0, 0), (1, 1)], 0.9), dtype=torch.float32
    )
    before = attn.clone()
    out = remove_sinks(attn)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    sinks = find_sinks(attn)
    assert isinstance(sinks, torch.Tensor) and sinks.dtype == torch.bool
    maps = causal_rollout(attn, sinks="auto", receptive_field="uniform")
    assert isinstance(maps, torch.Tensor) and maps.dtype == torch.float32
    assert is_causal(attn) is True
    assert torch.equal(attn, before)


# --------------------------------------------------------------------------------------------------
# Rollout and flow on causal stacks stay exact
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sinks", ["none", "drop", "diagonal"])
def test_rollout_with_sinks_is_the_matrix_product_of_the_handled_attention(sinks):
    rng = np.random.default_rng(9)
    attn = _plant_sink(_causal_softmax(rng, 4, 3, 7), 0, [(1, 0), (2, 1), (3, 2)], share=0.85)
    handled = attn if sinks == "none" else remove_sinks(attn, mode=sinks, sinks=[0])
    expected = _rollout_oracle(handled, 0.5)
    np.testing.assert_allclose(
        EXPLAINERS["rollout"](attn, sinks=sinks, sink_positions=[0]), expected, atol=ROW_TOL
    )
    # rows=[k] takes row k of the same maps
    np.testing.assert_allclose(
        EXPLAINERS["rollout"](attn, rows=[6], sinks=sinks, sink_positions=[0])[:, 0],
        expected[:, 6],
        atol=ROW_TOL,
    )


def test_registry_defaults_are_plain_rollout_and_flow():
    rng = np.random.default_rng(10)
    attn = _causal_softmax(rng, 3, 2, 6)
    np.testing.assert_array_equal(EXPLAINERS["rollout"](attn), attention_rollout(attn))
    np.testing.assert_array_equal(EXPLAINERS["flow"](attn, rows=[5]), attention_flow(attn, sources=[5]))


@pytest.mark.parametrize("sinks", ["none", "diagonal"])
def test_flow_on_causal_stacks_matches_the_networkx_reference(sinks):
    pytest.importorskip("networkx")
    from attnflow.explain._reference import reference_flow

    rng = np.random.default_rng(11)
    attn = _plant_sink(_causal_softmax(rng, 3, 2, 6), 0, [(0, 0), (1, 1), (2, 0)], share=0.8)
    handled = attn if sinks == "none" else remove_sinks(attn, mode=sinks, sinks=[0])
    caps = _mix(handled.mean(axis=1), 0.5)  # (L, T, T)
    expected = reference_flow(caps, sources=[3, 5])
    got = EXPLAINERS["flow"](attn, rows=[3, 5], sinks=sinks, sink_positions=[0])
    np.testing.assert_allclose(got, expected, atol=1e-9)
    # the uniform normalisation divides by the reference flow of uniform causal attention
    base = reference_flow(_mix(uniform_attention(6, layers=3).mean(axis=1), 0.5), sources=[3, 5])
    ratio = np.divide(expected, base, out=np.zeros_like(expected), where=base > 0)
    ratio /= ratio.sum(axis=-1, keepdims=True)
    got = EXPLAINERS["flow"](attn, rows=[3, 5], sinks=sinks, sink_positions=[0], receptive_field="uniform")
    np.testing.assert_allclose(got, ratio, atol=1e-9)


# --------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: remove_sinks(a, mode="spread"), "mode must be one of"),
        (lambda a: remove_sinks(a, sinks="all"), "sinks must be 'auto'"),
        (lambda a: remove_sinks(a, sinks=[9]), "sinks index 9 out of range"),
        (lambda a: remove_sinks(a, sinks=np.ones(3, dtype=bool)), "boolean sinks mask must have shape"),
        (lambda a: find_sinks(a, threshold=1.0), "threshold must be a number in"),
        (lambda a: find_sinks(a, min_rows=0), "min_rows must be an int"),
        (lambda a: find_sinks(a, scope="layer"), "scope must be one of"),
        (lambda a: find_sinks(a, head_share=0), "head_share must be a number"),
        (lambda a: causal_rollout(a, receptive_field="row"), "receptive_field must be one of"),
        (lambda a: causal_rollout(a, sinks="some"), "sinks must be one of"),
        (lambda a: normalize_receptive_field(attention_rollout(a), mode="uniform"), "needs baseline"),
        (lambda a: uniform_attention(0), "tokens must be an int >= 1"),
        (lambda a: is_causal(a[..., :3]), "square"),
    ],
)
def test_bad_input_names_the_rule(call, message):
    with pytest.raises(ValueError, match=message):
        call(uniform_attention(5, layers=2))
