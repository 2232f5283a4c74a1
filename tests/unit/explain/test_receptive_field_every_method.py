"""The receptive field (`attnflow.explain.receptive_field`) for every attention method of the records.

"column" reads the maps alone: M'[l, i, j] = M[l, i, j] / c[l, j], c[l, j] the mean of column j over
the real rows that can see key j (i >= j under a causal mask), each row then rescaled to its
original sum. It therefore holds for the methods with needs (Chefer, Grad-SAM, Chefer-LRP) as for
raw and rollout. "uniform" divides by the method on uniform attention; a method with needs has no
such baseline (its gradients / LRP relevance exist only for the attention the model computed), so
it is refused, saying why.
"""

import numpy as np
import pytest

from attnflow.explain import normalize_receptive_field
from attnflow.explain.apply import CausalSpec, RowSpec, apply
from attnflow.methods import EXPLAINERS, METHODS
from attnflow.needs import NEEDS

EXACT = 1e-12  # float64 round-off of a few divisions
A = np.array([[[[1.0, 0.0], [0.5, 0.5]]]])  # (1 layer, 1 head, 2, 2), causal


def causal_attention(rng, layers=2, heads=2, tokens=6):
    w = np.tril(rng.random((layers, heads, tokens, tokens)) + 0.1)
    return w / w.sum(-1, keepdims=True)


def needs_of(name, attn, rng):
    """Positive needs shaped like attn (the study's maps of these methods are then nonnegative);
    the other needs (value vectors, ...) as their records draw them (`attnflow.needs`)."""
    return {
        k: rng.random(attn.shape) + 0.1 if NEEDS[k].like_attention else NEEDS[k].sample(rng, attn)
        for k in METHODS[name].needs
    }


def test_grad_sam_column_by_hand():
    # G = ReLU(g) ⊙ A with g = [[1, 1], [1, 2]]: G = [[1, 0], [.5, 1]].
    # Column 0 is seen by rows 0 and 1: c0 = (1 + .5) / 2 = .75; column 1 by row 1 only: c1 = 1.
    # Row 0: [1 / .75, 0] rescaled to its sum 1 -> [1, 0].
    # Row 1: [.5 / .75, 1 / 1] = [2/3, 1], shares [.4, .6], rescaled to its sum 1.5 -> [.6, .9].
    g = np.array([[[[1.0, 1.0], [1.0, 2.0]]]])
    got = EXPLAINERS["grad_sam"](A, attn_grad=g, receptive_field="column")
    np.testing.assert_allclose(got, [[[1.0, 0.0], [0.6, 0.9]]], atol=EXACT)


def test_chefer_column_by_hand():
    # One layer, gradient 1: R = I + (∇A ⊙ A)⁺ = I + A = [[2, 0], [.5, 1.5]].
    # c0 = (2 + .5) / 2 = 1.25, c1 = 1.5. Row 0: [1.6, 0] -> sum 2 -> [2, 0].
    # Row 1: [.4, 1], shares [2/7, 5/7], rescaled to its sum 2 -> [4/7, 10/7].
    got = EXPLAINERS["chefer"](A, attn_grad=np.ones_like(A), receptive_field="column")
    np.testing.assert_allclose(got, [[[2.0, 0.0], [4 / 7, 10 / 7]]], atol=EXACT)
    # the explained row alone (rows=[1]) is that row of the normalised map of every row
    np.testing.assert_allclose(
        EXPLAINERS["chefer"](A, attn_grad=np.ones_like(A), receptive_field="column", rows=[1]),
        [[[4 / 7, 10 / 7]]],
        atol=EXACT,
    )


@pytest.mark.parametrize("name", [n for n, r in METHODS.items() if r.kind == "attention"])
def test_column_is_the_normalisation_of_the_methods_own_maps(name):
    # for every attention method, needs or not: column(method(A))[rows], padding 0
    rng = np.random.default_rng(11)
    a = causal_attention(rng)[None].repeat(2, axis=0)  # (2, L, H, T, T)
    a[1, ..., 4:] = 0.0  # sample 1 has 4 real tokens
    a[1, ..., :4, :4] /= a[1, ..., :4, :4].sum(-1, keepdims=True)
    a[1, ..., 4:, :] = 0.0
    lengths = [6, 4]
    needs = needs_of(name, a, rng)
    fn = EXPLAINERS[name]
    maps = fn(a, lengths=lengths, **needs)
    want = normalize_receptive_field(maps, mode="column", causal=True, lengths=lengths)[..., [1, 3], :]
    got = fn(a, lengths=lengths, rows=[1, 3], receptive_field="column", **needs)
    np.testing.assert_allclose(got, want, atol=EXACT)
    assert np.all(got[1, ..., 4:] == 0.0)  # padding stays 0
    # rows keep their sums (rollout, flow and Chefer-LRP rows still sum to 1)
    np.testing.assert_allclose(got.sum(-1), maps[..., [1, 3], :].sum(-1), atol=EXACT)


@pytest.mark.parametrize("name", [n for n, r in METHODS.items() if r.kind == "attention" and r.needs])
def test_a_method_with_needs_refuses_the_uniform_baseline_and_says_why(name):
    rng = np.random.default_rng(12)
    a = causal_attention(rng)
    with pytest.raises(
        ValueError, match=r"takes no receptive_field='uniform'.*not for the uniform attention"
    ):
        EXPLAINERS[name](a, receptive_field="uniform", **needs_of(name, a, rng))


def test_apply_gives_every_attention_method_the_column_receptive_field():
    # one CausalSpec for the study's records, the gradient methods included
    rng = np.random.default_rng(13)
    attn = causal_attention(rng)[None]  # (1, L, H, T, T)
    records = [r for r in METHODS.values() if r.kind == "attention"]
    inputs = {k: v for r in records for k, v in needs_of(r.name, attn, rng).items()}
    (got,) = apply(records, attn, inputs, RowSpec("last"), CausalSpec(receptive_field="column"))
    (plain,) = apply(records, attn, inputs, RowSpec("last"))
    for r in records:
        assert got[r.name].shape == plain[r.name].shape
        assert not np.allclose(got[r.name], plain[r.name]), r.name  # the bias toward token 0 corrected
