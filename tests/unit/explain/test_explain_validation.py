"""Every input rule raises ValueError naming what is wrong (and nothing else does)."""

import numpy as np
import pytest
import torch

from attnflow.explain import (
    attention_flow,
    attention_rollout,
    head_flow,
    head_rollout,
    raw_attention,
    select_rows,
)
from attnflow.methods import EXPLAINER_INPUTS, EXPLAINERS
from attnflow.needs import NEEDS

PUBLIC = [raw_attention, attention_rollout, attention_flow, head_rollout, head_flow, *EXPLAINERS.values()]


def uniform(*shape):
    return np.full(shape, 1.0 / shape[-1])


@pytest.fixture
def good():
    return uniform(2, 2, 3, 3)  # (layer, head, query, key)


@pytest.mark.parametrize("fn", PUBLIC)
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda a: np.where(np.arange(3) == 1, np.nan, a), "NaN or inf"),
        (lambda a: np.where(np.arange(3) == 1, np.inf, a), "NaN or inf"),
        (lambda a: a - np.eye(3) * 0.5, "negative"),
        (lambda a: a[..., :2], "square"),
        (lambda a: a[0], "4 dims"),
        (lambda a: a[None, None], "4 dims"),
        (lambda a: a[:, :0], "empty"),
        (lambda a: a * 0.9, "sum to 1"),
        (lambda a: a.astype(complex), "real numbers"),
    ],
)
def test_bad_attention_is_rejected(fn, good, edit, message):
    with pytest.raises(ValueError, match=message):
        fn(edit(good))


@pytest.mark.parametrize("fn", [raw_attention, attention_rollout, attention_flow, head_rollout, head_flow])
def test_renormalize_accepts_rows_that_do_not_sum_to_one(fn, good):
    np.testing.assert_allclose(fn(good * 0.9, renormalize=True), fn(good))


def test_row_sum_tolerance_is_stated_in_the_message(good):
    with pytest.raises(ValueError, match=r"tolerance 0\.001"):
        attention_rollout(good * 1.01)


@pytest.mark.parametrize("fn", PUBLIC)
def test_padding_is_not_validated(fn):
    # garbage (NaN, negative, rows not summing to 1) in padded positions is ignored
    attn = uniform(2, 2, 2, 3, 3)
    attn[0, ..., 2, :] = np.nan
    attn[0, ..., :, 2] = -1.0
    attn[0, ..., :2, :2] = 0.5
    needs = {EXPLAINERS[n]: EXPLAINER_INPUTS[n] for n in EXPLAINERS}.get(fn, ())  # e.g. attention gradients
    rng = np.random.default_rng(0)
    values = {  # attention-shaped needs carry the same garbage; others a valid draw of their record
        key: np.where(np.isnan(attn), np.nan, 1.0)
        if NEEDS[key].like_attention
        else NEEDS[key].sample(rng, attn)
        for key in needs
    }
    out = np.asarray(fn(attn, lengths=[2, 3], **values))
    assert np.all(np.isfinite(out))
    assert np.all(out[0, ..., 2] == 0)  # the padded key of sample 0 gets exactly 0


@pytest.mark.parametrize("fn", PUBLIC)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": [3]}, "shape"),
        ({"lengths": [0, 3]}, r"\[1, 3\]"),
        ({"lengths": [2, 4]}, r"\[1, 3\]"),
        ({"lengths": [1.5, 3]}, "integers"),
        ({"mask": np.ones((2, 2), bool)}, "shape"),
        ({"mask": np.array([[1, 1, 1], [0, 0, 0]], bool)}, "at least one"),
        ({"mask": np.full((2, 3), 0.5)}, "boolean"),
        ({"mask": np.ones((2, 3), bool), "lengths": [3, 3]}, "not both"),
    ],
)
def test_bad_lengths_or_mask_is_rejected(fn, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fn(uniform(2, 2, 2, 3, 3), **kwargs)


@pytest.mark.parametrize("fn", PUBLIC)
def test_lengths_need_a_batch_axis(fn, good):
    with pytest.raises(ValueError, match="batched"):
        fn(good, lengths=[3])


@pytest.mark.parametrize("fn", PUBLIC)
@pytest.mark.parametrize(("heads", "message"), [("median", "one of"), (2, "out of range"), (True, "one of")])
def test_bad_heads_is_rejected(fn, good, heads, message):
    key = "heads_below" if fn in (head_rollout, head_flow) else "heads"
    with pytest.raises(ValueError, match=message):
        fn(good, **{key: heads})


@pytest.mark.parametrize(
    "fn", [attention_rollout, attention_flow, head_rollout, head_flow, *EXPLAINERS.values()]
)
@pytest.mark.parametrize("residual", [-0.1, 1.5, True, "half"])
def test_bad_residual_is_rejected(fn, good, residual):
    with pytest.raises(ValueError, match="residual"):
        fn(good, residual=residual)


@pytest.mark.parametrize("fn", [attention_flow, head_flow])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sources": [3]}, "sources index 3 out of range"),
        ({"sources": [-1]}, "sources index -1 out of range"),
        ({"sources": []}, "non-empty"),
        ({"sources": [0.5]}, "ints"),
        ({"sources": "cls"}, "int or a sequence"),
        ({"layers": [2]}, "layers index 2 out of range"),
        ({"layers": 5}, "layers index 5 out of range"),
        ({"normalize": "yes"}, "normalize"),
    ],
)
def test_bad_sources_or_layers_is_rejected(fn, good, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fn(good, **kwargs)


@pytest.mark.parametrize("fn", [attention_flow, head_flow])
def test_a_padded_source_is_out_of_range(fn):
    attn = uniform(2, 1, 1, 3, 3)
    attn[0, ..., :2] = 0.5  # sample 0 has 2 real tokens
    with pytest.raises(ValueError, match="sources index 2 out of range: it is padding in sample 0"):
        fn(attn, sources=[2], lengths=[2, 3])


@pytest.mark.parametrize("name", sorted(EXPLAINERS))
def test_registry_rows_out_of_range_is_rejected(name, good):
    with pytest.raises(ValueError, match="rows index 3 out of range"):
        EXPLAINERS[name](good, rows=[3])


@pytest.mark.parametrize(
    ("rows", "kwargs", "message"),
    [
        ("median", {}, "one of"),
        (3, {}, "out of range"),
        (1.0, {}, "one of"),
        ("max", {"lengths": [3]}, "shape"),
        (2, {"lengths": [2, 3]}, "padding in sample 0"),
    ],
)
def test_select_rows_bad_input_is_rejected(rows, kwargs, message):
    maps = uniform(2, 3, 3) if "lengths" not in kwargs or kwargs["lengths"] == [3] else uniform(2, 2, 3, 3)
    with pytest.raises(ValueError, match=message):
        select_rows(maps, rows, **kwargs)


def test_select_rows_needs_layer_query_key():
    with pytest.raises(ValueError, match="layer, query, key"):
        select_rows(np.ones((3, 3)), "cls")


def test_torch_input_is_validated_too(good):
    with pytest.raises(ValueError, match="NaN or inf"):
        attention_flow(torch.tensor(np.where(np.arange(3) == 1, np.nan, good)))


@pytest.mark.parametrize("name", sorted(EXPLAINERS))
def test_registry_rows_that_are_padding_are_rejected(name):
    attn = uniform(2, 1, 1, 3, 3)
    attn[0, ..., :2] = 0.5  # sample 0 has 2 real tokens
    with pytest.raises(ValueError, match="rows index 2 out of range: it is padding in sample 0"):
        EXPLAINERS[name](attn, rows=[2], lengths=[2, 3])
