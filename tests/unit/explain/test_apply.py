"""One apply (attnflow.explain.apply): records applied to a padded batch, one row decoder (RowSpec),
one causal spec (CausalSpec) for every attention method."""

import numpy as np
import pytest

from attnflow.explain.apply import CausalSpec, RowSpec, apply
from attnflow.methods import EXPLAINERS, METHODS


def padded(rng, lengths, layers=2, heads=2, causal=False):
    tokens = max(lengths)
    attn = np.zeros((len(lengths), layers, heads, tokens, tokens))
    for b, n in enumerate(lengths):
        w = rng.random((layers, heads, n, n)) + 0.1
        w = np.tril(w) if causal else w
        attn[b, :, :, :n, :n] = w / w.sum(-1, keepdims=True)
    return attn, np.arange(tokens)[None] < np.array(lengths)[:, None]


@pytest.mark.parametrize(
    ("rows", "causal", "tokens", "expected"),
    [
        ("cls", False, 5, 0),
        ("auto", False, 5, 0),  # an encoder explains [CLS]
        ("auto", True, 5, 4),  # a decoder its last real token
        ("last", False, 5, 4),
        (1, False, 5, 1),
        (-2, False, 5, 3),
        ("max", False, 5, "max"),
        ((1, 3), True, 5, (1, 3)),
    ],
)
def test_rowspec_decodes_every_row_choice(rows, causal, tokens, expected):
    assert RowSpec(rows, causal=causal).position(tokens) == expected


def test_rowspec_refuses_what_is_no_row():
    for bad in ("first", 1.5, True, ()):
        with pytest.raises(ValueError, match="rows"):
            RowSpec(bad)
    with pytest.raises(ValueError, match="out of range"):
        RowSpec(7).position(5)


def test_a_class_specific_record_reads_the_classification_row_whatever_the_tasks_rows():
    task = RowSpec("max", task=True)
    assert task.for_record(METHODS["chefer"]).rows == "cls"
    assert task.for_record(METHODS["rollout"]).rows == "max"
    assert RowSpec("max").for_record(METHODS["chefer"]).rows == "max"  # the API: the caller's row for all


def test_apply_gives_each_sample_its_row_on_its_real_tokens():
    rng = np.random.default_rng(0)
    attn, valid = padded(rng, [4, 3])
    (a, b) = apply([METHODS["rollout"], METHODS["flow"]], attn, rows=RowSpec("cls"), valid=valid)
    assert a["flow"].shape == (2, 4) and b["flow"].shape == (2, 3)
    for name, s in (("rollout", b), ("flow", b)):
        alone = EXPLAINERS[name](attn[1, :, :, :3, :3])[:, 0, :]  # sample 1 alone, row 0
        np.testing.assert_allclose(s[name], alone, atol=1e-12)


def test_last_rows_differ_per_sample_and_are_explained_alone():
    rng = np.random.default_rng(1)
    attn, valid = padded(rng, [4, 3], causal=True)
    (a, b) = apply([METHODS["raw"]], attn, rows=RowSpec("auto", causal=True), valid=valid)
    np.testing.assert_array_equal(a["raw"], attn[0].mean(1)[:, 3, :4])  # raw: the mean head, row 3
    np.testing.assert_array_equal(b["raw"], attn[1].mean(1)[:, 2, :3])


def test_max_reduces_over_real_rows_only():
    rng = np.random.default_rng(2)
    attn, valid = padded(rng, [4, 3])
    (_, b) = apply([METHODS["raw"]], attn, rows=RowSpec("max"), valid=valid)
    np.testing.assert_allclose(b["raw"], attn[1].mean(1)[:, :3, :3].max(axis=1), atol=1e-12)


def test_several_rows_stay_each_kept():
    rng = np.random.default_rng(3)
    attn, _ = padded(rng, [5], causal=True)
    (got,) = apply([METHODS["rollout"]], attn, rows=RowSpec((2, 4)))
    np.testing.assert_array_equal(got["rollout"], EXPLAINERS["rollout"](attn[0], rows=[2, 4]))


def test_the_causal_spec_reaches_every_attention_method():
    rng = np.random.default_rng(4)
    attn, _ = padded(rng, [6], causal=True)
    grad = rng.standard_normal(attn.shape)
    causal = CausalSpec(sinks="diagonal", sink_positions=[0])
    records = [r for r in METHODS.values() if r.kind == "attention" and set(r.needs) <= {"attn_grad"}]
    (got,) = apply(records, attn, {"attn_grad": grad}, RowSpec("last"), causal)
    (plain,) = apply(records, attn, {"attn_grad": grad}, RowSpec("last"))
    for r in records:  # every method sees the sink handled: its map moves
        assert not np.allclose(got[r.name], plain[r.name]), r.name
    assert CausalSpec().options() == {}
    with pytest.raises(ValueError, match="sinks"):
        CausalSpec(sinks="sometimes")
    with pytest.raises(ValueError, match="receptive_field"):
        CausalSpec(receptive_field="wide")


def test_per_sample_inputs_explain_each_sample_alone():
    rng = np.random.default_rng(5)
    attn, valid = padded(rng, [3])
    grad = rng.standard_normal((2, 2, 3, 3))  # one sample's, unbatched
    (got,) = apply([METHODS["grad_sam"]], attn, {"attn_grad": grad}, RowSpec(0), valid=valid,
                   per_sample_inputs=("attn_grad",))  # fmt: skip
    np.testing.assert_allclose(
        got["grad_sam"], EXPLAINERS["grad_sam"](attn[0], attn_grad=grad)[:, 0], atol=1e-12
    )
