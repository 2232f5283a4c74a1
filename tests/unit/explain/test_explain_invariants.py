"""Invariants every method in EXPLAINERS must keep (scikit-learn test_common style).

Methods that need more than attn (EXPLAINER_INPUTS) get each need as its record draws a valid one
for the attention (`attnflow.needs`: NeedRecord.sample; e.g. a gradient ∂logit/∂A of either sign,
an LRP relevance R(A) = A ⊙ (random of either sign), value vectors (L, H, T, D)), and every edit of
the inputs (a batch or token permutation, a slice, padding) is made on each need along its own
axes (NeedRecord.select). Where an invariant differs per method (row sums, layer one) the expected
value is stated per method; nothing here knows a method's formula.
"""

import numpy as np
import pytest
import torch

from attnflow.explain import CLS_SELF, select_rows
from attnflow.methods import EXPLAINER_INPUTS, EXPLAINERS, METHODS, ROW_SUM_LAWS, resolve
from attnflow.needs import NEEDS

NAMES = sorted(EXPLAINERS)
CLOSE = 1e-10  # float64 agreement between two routes to the same numbers

# What each method's rows sum to on real positions: its record's row-sum law (attnflow.methods
# ROW_SUM_LAWS): 1 (row-stochastic maps), >= 1 because the map is I plus a nonnegative matrix
# (Chefer's generic rule has no normalisation), or only >= 0 (Grad-SAM weighs the attention itself).
ROW_SUMS = {r.name: r.row_sums for r in METHODS.values() if r.kind == "attention"}


def test_every_attention_method_states_its_facts():
    # a method added without them fails here, before any invariant silently skips it
    for name, record in METHODS.items():
        if record.kind != "attention":
            continue
        assert record.row_sums in ROW_SUM_LAWS, f"{name}: state row_sums= on its record ({ROW_SUM_LAWS})"
        assert callable(record.function) and record.label and record.summary, name
        if "cls_self" in record.options:
            assert record.authors_cls_self in CLS_SELF, name


def extra_inputs(name, attn, seed=0):
    """The needs EXPLAINER_INPUTS[name] asks for, each drawn by its record for this attention (numpy)."""
    rng = np.random.default_rng(seed)
    return {key: NEEDS[key].sample(rng, np.asarray(attn)) for key in EXPLAINER_INPUTS[name]}


def run(name, attn, extras, **kwargs):
    kwargs = {"residual": 0.5, "heads": "mean", **kwargs}
    return EXPLAINERS[name](attn, **kwargs, **extras)


def apply(extras, fn):
    """The same elementwise edit (a copy, a conversion) on every extra input."""
    return {key: fn(value) for key, value in extras.items()}


def take(extras, **where):
    """The same selection on every extra input, each along its own axes (NeedRecord.select:
    batch=, heads=, tokens= along every token axis)."""
    return {key: NEEDS[key].select(value, **where) for key, value in extras.items()}


def random_attention(rng, *shape, sharpness=2.0):
    """Softmax of random logits: attention probabilities [..., query, key]."""
    logits = rng.standard_normal(shape) * sharpness
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def padded_batch(rng, lengths, layers=3, heads=2):
    """A batch [B, L, H, T, T] where sample b only attends within its first lengths[b] tokens."""
    tokens = max(lengths)
    attn = np.zeros((len(lengths), layers, heads, tokens, tokens))
    for b, n in enumerate(lengths):
        attn[b, :, :, :n, :n] = random_attention(rng, layers, heads, n, n)
        attn[b, :, :, n:, :] = 1.0 / tokens  # padded query rows: whatever the model wrote
    return attn


def test_the_registry_is_every_attention_record_and_each_takes_what_its_record_says_it_needs():
    import inspect

    from attnflow.methods import METHODS

    assert NAMES == sorted(r.name for r in METHODS.values() if r.kind == "attention")
    for name in NAMES:
        params = inspect.signature(EXPLAINERS[name]).parameters
        assert {"attn", "residual", "heads", "rows", "lengths", "mask"} <= set(params)
        assert set(EXPLAINER_INPUTS[name]) <= set(params)  # each need is a keyword argument
        assert set(METHODS[name].options) <= set(params)  # and each option


@pytest.mark.parametrize("name", [n for n in NAMES if EXPLAINER_INPUTS[n]])
def test_a_missing_extra_input_is_named(name):
    attn = random_attention(np.random.default_rng(0), 2, 2, 3, 3)
    extras = extra_inputs(name, attn)
    for key in EXPLAINER_INPUTS[name]:
        with pytest.raises(ValueError, match=key):
            run(name, attn, {k: v for k, v in extras.items() if k != key})
        with pytest.raises(ValueError, match=f"{key} must have the shape"):
            run(name, attn, {**extras, key: NEEDS[key].select(extras[key], tokens=[0, 1])})


@pytest.mark.parametrize("name", NAMES)
def test_shape_finite_and_nonnegative(name):
    attn = random_attention(np.random.default_rng(0), 3, 2, 4, 4)  # (L, H, T, T)
    out = run(name, attn, extra_inputs(name, attn))
    assert out.shape == (3, 4, 4)
    assert np.all(np.isfinite(out)) and np.all(out >= 0)
    batched_attn = attn[None].repeat(2, 0)
    batched = run(name, batched_attn, extra_inputs(name, batched_attn))
    assert batched.shape == (2, 3, 4, 4)


@pytest.mark.parametrize("name", NAMES)
def test_row_sums(name):
    # "one": raw (mean of stochastic heads), rollout and chefer_lrp (products of stochastic
    # matrices), flow (normalised); "identity_plus_nonnegative": chefer, R = I + (>= 0), rows >= 1;
    # "nonnegative": grad_sam, mean_h ReLU(∇A) ⊙ A, entries >= 0 and no law on the sums
    attn = random_attention(np.random.default_rng(1), 3, 2, 4, 4)
    out = run(name, attn, extra_inputs(name, attn))
    law = ROW_SUMS[name]
    assert law in ROW_SUM_LAWS
    if law == "one":
        np.testing.assert_allclose(out.sum(-1), 1.0, atol=CLOSE)
    elif law == "identity_plus_nonnegative":
        assert np.all(out - np.eye(4) >= 0)
        assert np.all(out.sum(-1) >= 1.0)
    else:
        assert np.all(out >= 0)
        assert not np.allclose(out.sum(-1), 1.0)  # a law would have been stated


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_never_mutated(name):
    lengths = np.array([3, 4])
    attn = padded_batch(np.random.default_rng(2), lengths)
    extras = extra_inputs(name, attn)
    before, lengths_before, extras_before = attn.copy(), lengths.copy(), apply(extras, np.copy)
    run(name, attn, extras, lengths=lengths)
    np.testing.assert_array_equal(attn, before)
    np.testing.assert_array_equal(lengths, lengths_before)
    for key in extras:
        np.testing.assert_array_equal(extras[key], extras_before[key])
    tensor, tensors = torch.tensor(attn), apply(extras, torch.tensor)
    run(name, tensor, tensors)
    np.testing.assert_array_equal(tensor.numpy(), before)
    for key in extras:
        np.testing.assert_array_equal(tensors[key].numpy(), extras_before[key])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("residual", [0.0, 0.5])
def test_identity_attention_mixes_no_tokens(name, residual):
    # every method's map is diagonal, and each token's diagonal entry is the method on that token
    # alone (nothing reaches it from the others); the row-stochastic ones give I itself
    attn = np.tile(np.eye(4), (3, 2, 1, 1))
    extras = extra_inputs(name, attn)
    out = run(name, attn, extras, residual=residual)
    np.testing.assert_allclose(out * (1.0 - np.eye(4)), 0.0, atol=CLOSE)
    for i in range(4):
        alone = run(name, attn[:, :, i : i + 1, i : i + 1], take(extras, tokens=[i]), residual=residual)
        np.testing.assert_allclose(out[:, i, i], alone[:, 0, 0], atol=CLOSE)
    if ROW_SUMS[name] == "one":
        np.testing.assert_allclose(out, np.tile(np.eye(4), (3, 1, 1)), atol=CLOSE)


@pytest.mark.parametrize("name", [n for n in NAMES if EXPLAINER_INPUTS[n]])
def test_residual_is_validated_and_ignored(name):
    attn = random_attention(np.random.default_rng(12), 2, 2, 3, 3)
    extras = extra_inputs(name, attn)
    np.testing.assert_array_equal(
        run(name, attn, extras, residual=0.0), run(name, attn, extras, residual=1.0)
    )
    with pytest.raises(ValueError, match="residual"):
        run(name, attn, extras, residual=1.5)


@pytest.mark.parametrize("name", NAMES)
def test_batch_order_equivariance(name):
    attn = random_attention(np.random.default_rng(3), 4, 2, 2, 5, 5)
    extras = extra_inputs(name, attn)
    perm = np.array([2, 0, 3, 1])
    out = run(name, attn, extras)
    np.testing.assert_allclose(run(name, attn[perm], take(extras, batch=perm)), out[perm], atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_token_permutation_equivariance(name):
    # relabelling the tokens (same permutation on query and key) permutes every map the same way
    # (the Chefer methods with their default cls_self="keep"; "min" / "zero" single out position 0)
    attn = random_attention(np.random.default_rng(4), 3, 2, 5, 5)
    extras = extra_inputs(name, attn)
    perm = np.array([3, 0, 4, 1, 2])

    def move(x):
        return x[..., perm, :][..., perm]

    out = run(name, attn, extras)
    np.testing.assert_allclose(run(name, move(attn), take(extras, tokens=perm)), move(out), atol=CLOSE)


@pytest.mark.parametrize("name", ["raw", "rollout", "flow", "chefer", "chefer_lrp"])  # hand cases
def test_layer_one(name):
    # raw: W(1); rollout and flow: A(1) = .5 W(1) + .5 I (the paper: layer 1 of rollout = flow);
    # chefer: I + mean_h[(∇A ⊙ A)⁺]; chefer_lrp: rownorm(I + mean_h[(∇A ⊙ R(A))⁺])
    attn = random_attention(np.random.default_rng(5), 2, 3, 4, 4)
    extras = extra_inputs(name, attn)
    w1 = attn[0].mean(0)
    if name == "raw":
        expected = w1
    elif name == "chefer":
        expected = np.eye(4) + np.maximum(extras["attn_grad"][0] * attn[0], 0).mean(0)
    elif name == "chefer_lrp":
        a = np.eye(4) + np.maximum(extras["attn_grad"][0] * extras["attn_relevance"][0], 0).mean(0)
        expected = a / a.sum(-1, keepdims=True)
    else:
        expected = 0.5 * w1 + 0.5 * np.eye(4)
    np.testing.assert_allclose(run(name, attn, extras)[0], expected, atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_padded_positions_get_exactly_zero_and_real_ones_match_the_unpadded_sample(name):
    rng = np.random.default_rng(6)
    lengths = [3, 5, 1]
    attn = padded_batch(rng, lengths)
    extras = extra_inputs(name, attn)  # garbage (nonzero) in padded positions too
    out = run(name, attn, extras, lengths=lengths)
    for b, n in enumerate(lengths):
        assert np.all(out[b, :, n:, :] == 0) and np.all(out[b, :, :, n:] == 0)
        alone = run(name, attn[b, :, :, :n, :n], take(extras, batch=b, tokens=np.arange(n)))
        np.testing.assert_allclose(out[b, :, :n, :n], alone, atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
def test_mask_with_holes_equals_dropping_the_masked_tokens(name):
    rng = np.random.default_rng(7)
    real = np.array([0, 2, 3])  # token 1 and 4 are padding (a left/middle-padded layout)
    inner = random_attention(rng, 3, 2, 3, 3)
    attn = np.full((1, 3, 2, 5, 5), 0.2)
    attn[0][np.ix_(range(3), range(2), real, real)] = inner
    attn[0][np.ix_(range(3), range(2), real, [1, 4])] = 0.0
    extras = extra_inputs(name, attn)
    mask = np.isin(np.arange(5), real)[None]
    out = run(name, attn, extras, mask=mask)[0]
    alone = run(name, inner, take(extras, batch=0, tokens=real))
    np.testing.assert_allclose(out[np.ix_(range(3), real, real)], alone, atol=CLOSE)
    assert np.all(out[:, [1, 4], :] == 0) and np.all(out[:, :, [1, 4]] == 0)


@pytest.mark.parametrize("name", NAMES)
def test_rows_option_equals_taking_rows_of_the_full_map(name):
    attn = random_attention(np.random.default_rng(8), 3, 2, 5, 5)
    extras = extra_inputs(name, attn)
    full = run(name, attn, extras)
    np.testing.assert_allclose(run(name, attn, extras, rows=[0]), full[:, [0]], atol=CLOSE)
    np.testing.assert_allclose(run(name, attn, extras, rows=[4, 1]), full[:, [4, 1]], atol=CLOSE)
    np.testing.assert_allclose(select_rows(full, "cls"), full[:, 0], atol=CLOSE)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_in_torch_out_same_dtype_and_values(name, dtype):
    attn = random_attention(np.random.default_rng(9), 2, 2, 3, 3)
    extras = extra_inputs(name, attn)
    out = run(name, torch.tensor(attn, dtype=dtype), apply(extras, lambda x: torch.tensor(x, dtype=dtype)))
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.device.type == "cpu"
    tol = 1e-6 if dtype == torch.float32 else CLOSE
    rtol = 1e-6 if dtype == torch.float32 else 1e-7  # float32: ~7 digits of maps of any scale (GlobEnc's)
    np.testing.assert_allclose(out.double().numpy(), run(name, attn, extras), atol=tol, rtol=rtol)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_float32_in_float32_out(name):
    attn = random_attention(np.random.default_rng(10), 2, 2, 3, 3).astype(np.float32)
    out = run(name, attn, apply(extra_inputs(name, attn), lambda x: x.astype(np.float32)))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32


@pytest.mark.parametrize("name", NAMES)
def test_single_head_choice_equals_a_one_head_input(name):
    attn = random_attention(np.random.default_rng(11), 2, 3, 4, 4)
    extras = extra_inputs(name, attn)
    np.testing.assert_allclose(
        run(name, attn, extras, heads=2),
        run(name, attn[:, 2:3], take(extras, heads=[2])),
    )


def test_class_specific_methods_read_the_classification_row_whatever_the_tasks_rows():
    # rows="max" is the task's choice for raw/rollout/flow (the authors' SST-2 reduction); chefer
    # reads the CLS row: the same numbers as with rows="cls".
    from attnflow.explain.samples import explain_batch

    rng = np.random.default_rng(0)
    attn = rng.random((2, 2, 2, 4, 4))  # (B, L, H, T, T)
    attn /= attn.sum(-1, keepdims=True)
    grad = rng.normal(size=attn.shape)
    common = dict(
        methods=resolve(["raw", "chefer"]),
        residual=0.5,
        heads="mean",
        per_head=False,
        extra={"attn_grad": grad},
    )
    by_max = explain_batch(attn, np.array([4, 4]), rows="max", **common)
    by_cls = explain_batch(attn, np.array([4, 4]), rows="cls", **common)
    np.testing.assert_array_equal(by_max["chefer"], by_cls["chefer"])
    assert not np.allclose(by_max["raw"], by_cls["raw"])
