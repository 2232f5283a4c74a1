"""attnflow.compare.captum judged by captum itself: its metrics run on our attributions, our
attributions are attnflow's own maps, and Integrated Gradients keeps captum's completeness."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("captum", reason='captum is not installed: pip install "attnflow[compare]"')

from captum.attr import FeatureAblation, LayerIntegratedGradients
from captum.metrics import infidelity, sensitivity_max

import attnflow.compare.captum as compare_captum
from attnflow.attnlrp import attnlrp
from attnflow.compare import infidelity_masking, sensitivity_masking
from attnflow.compare.captum import AttnflowAttribution, integrated_gradients
from attnflow.hf import eager_attention, explain_texts

# float32 scores vs attnflow's float64 maps of the same float32 attentions.
ATOL = 1e-6
# Integrated Gradients' per-token sums are float32 sums over 16 hidden units.
IG_ATOL = 1e-5
# Gauss-Legendre with 64 points on a 2-layer model: the approximation error is far below this share.
IG_REL_DELTA = 1e-3
N_PERTURB = 8


def _forward_args(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return batch["attention_mask"], batch["token_type_ids"]


@pytest.mark.parametrize("method", ["raw", "rollout", "flow"])
@pytest.mark.parametrize("layer", [0, 1])
def test_attribution_is_attnflow_row_of_that_layer(bert, batch, method, layer, texts):
    # explain_texts' maps[method][layer] of the [CLS] row, on each text's real tokens; padding is 0
    model, tokenizer = bert
    scores = AttnflowAttribution(model, method, layer=layer).attribute(
        batch["input_ids"], additional_forward_args=_forward_args(batch)
    )
    assert scores.shape == batch["input_ids"].shape
    for b, e in enumerate(explain_texts(model, tokenizer, texts, methods=[method])):
        real = batch["attention_mask"][b].bool()
        np.testing.assert_allclose(scores[b][real].numpy(), e.maps[method][layer], atol=ATOL)
        assert scores[b][~real].abs().sum() == 0


def test_gradient_method_explains_the_given_target(bert, batch, texts):
    # Chefer et al.'s rule needs d logit[target] / d attention: the same target as explain_texts'
    model, tokenizer = bert
    for target in (0, 1):
        scores = AttnflowAttribution(model, "chefer").attribute(
            batch["input_ids"], target=target, additional_forward_args=_forward_args(batch)
        )
        maps = [
            e.maps["chefer"][-1]
            for e in explain_texts(model, tokenizer, texts, methods=["chefer"], target=target)
        ]
        for b, expected in enumerate(maps):
            np.testing.assert_allclose(
                scores[b][batch["attention_mask"][b].bool()].numpy(), expected, atol=ATOL
            )


def test_attnlrp_attribution_is_input_relevance(bert, batch):
    model, _ = bert
    scores = AttnflowAttribution(model, "attnlrp").attribute(
        batch["input_ids"], target=[1, 0, 1], additional_forward_args=_forward_args(batch)
    )
    with eager_attention(model):
        for b, target in enumerate([1, 0, 1]):
            real = batch["attention_mask"][b].bool()
            res = attnlrp(model, batch["input_ids"][b][real], target=target)
            np.testing.assert_allclose(scores[b][real].numpy(), res.input_relevance.numpy(), atol=ATOL)


def test_tuple_inputs_give_tuple_attributions(bert, batch):
    model, _ = bert
    (scores,) = AttnflowAttribution(model).attribute(
        (batch["input_ids"],), additional_forward_args=_forward_args(batch)
    )
    assert scores.shape == batch["input_ids"].shape and scores.dtype == torch.float32


def test_captum_infidelity_compares_attnflow_and_captum_methods(bert, batch, texts):
    # infidelity = E_I[(Iᵀ Φ − (f(x) − f(x with I masked)))²], I binary; normalize=True rescales Φ by
    # its best factor, so methods on different scales (rollout rows sum to 1, logit units) compare
    model, tokenizer = bert
    forward = AttnflowAttribution(model).forward_func
    args, ids, target = _forward_args(batch), batch["input_ids"], 1
    lig = LayerIntegratedGradients(forward, model.get_input_embeddings())
    attributions = {
        method: AttnflowAttribution(model, method).attribute(ids, target=target, additional_forward_args=args)
        for method in ("rollout", "flow", "chefer", "attnlrp")
    }
    attributions["feature_ablation"] = FeatureAblation(forward).attribute(
        ids, baselines=tokenizer.mask_token_id, target=target, additional_forward_args=args
    )
    attributions["integrated_gradients"] = lig.attribute(
        ids, baselines=tokenizer.pad_token_id, target=target, additional_forward_args=args
    ).sum(-1)  # (B, T, H) -> (B, T)
    for name, attribution in attributions.items():
        perturb = infidelity_masking(
            tokenizer.mask_token_id,
            protected_ids=tokenizer.all_special_ids,
            generator=torch.Generator().manual_seed(0),
        )
        score = infidelity(
            forward, perturb, ids, attribution, additional_forward_args=args, target=target,
            n_perturb_samples=N_PERTURB, normalize=True,
        )  # fmt: skip
        assert score.shape == (len(texts),), name
        assert torch.isfinite(score).all() and (score >= 0).all(), name


def test_captum_sensitivity_max_is_finite_and_zero_without_perturbation(bert, batch, texts):
    # sensitivity_max = max over perturbed x̃ of ‖Φ(x̃) − Φ(x)‖ / ‖Φ(x)‖: 0 when nothing is masked
    model, tokenizer = bert
    rollout = AttnflowAttribution(model, "rollout")
    perturb = sensitivity_masking(
        tokenizer.mask_token_id,
        protected_ids=tokenizer.all_special_ids,
        generator=torch.Generator().manual_seed(0),
    )
    kwargs = dict(perturb_func=perturb, n_perturb_samples=4, additional_forward_args=_forward_args(batch))
    none = sensitivity_max(rollout.attribute, batch["input_ids"], perturb_radius=0.0, **kwargs)
    half = sensitivity_max(rollout.attribute, batch["input_ids"], perturb_radius=0.5, **kwargs)
    assert none.shape == half.shape == (len(texts),)
    assert (none == 0).all()
    assert torch.isfinite(half).all() and (half > 0).any()


def test_integrated_gradients_complete_within_convergence_delta(bert, texts):
    # completeness: Σ_t IG_t = f(x) − f(x') − delta, and captum's delta is small next to f(x) − f(x')
    model, tokenizer = bert
    results = integrated_gradients(model, tokenizer, texts, n_steps=64, batch_size=2)
    assert [r.text for r in results] == texts
    for r in results:
        assert r.scores.shape == (len(r.tokens),)
        assert abs(r.scores.sum() - (r.output_difference - r.convergence_delta)) <= IG_ATOL
        assert abs(r.convergence_delta) <= IG_REL_DELTA * abs(r.output_difference) + IG_ATOL


def test_integrated_gradients_leaves_special_tokens_at_zero(bert, texts):
    # [CLS] and [SEP] are the same in x and in the baseline: (e − e') = 0, so IG × input is exactly 0
    model, tokenizer = bert
    for r in integrated_gradients(model, tokenizer, texts[:2], target=0, baseline="mask", n_steps=8):
        assert r.target == 0
        assert r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]"
        assert r.scores[0] == 0 and r.scores[-1] == 0


def test_missing_captum_names_the_extra_not_a_file_outside_the_wheel(bert, monkeypatch):
    monkeypatch.setattr(compare_captum, "_Attribution", object)
    monkeypatch.setattr(
        compare_captum, "_IMPORT_ERROR", ModuleNotFoundError("No module named 'captum'", name="captum")
    )
    with pytest.raises(ImportError, match=r"not installed: pip install \"attnflow\[compare\]\""):
        compare_captum.require_captum()
    monkeypatch.setattr(
        compare_captum, "_IMPORT_ERROR", ImportError("numpy.core.multiarray failed to import")
    )
    with pytest.raises(
        ImportError, match=r"captum is installed but importing it failed: ImportError: numpy\.core"
    ):
        compare_captum.require_captum()


def test_integrated_gradients_batches_by_length_and_answers_in_input_order(bert, texts):
    # longest first, so the length batches reorder the texts; each text keeps its own target,
    # and its attribution is the one it gets alone (to float32 rounding: padding changes sums)
    model, tokenizer = bert
    order = sorted(texts, key=lambda t: -len(tokenizer(t)["input_ids"]))
    assert order != texts
    targets = [k % 2 for k in range(len(order))]
    together = integrated_gradients(model, tokenizer, order, target=targets, n_steps=8, batch_size=2)
    assert [r.text for r in together] == order
    for text, target, r in zip(order, targets, together, strict=True):
        alone = integrated_gradients(model, tokenizer, [text], target=target, n_steps=8)[0]
        assert r.target == target and r.tokens == alone.tokens
        np.testing.assert_allclose(r.scores, alone.scores, rtol=1e-4, atol=1e-6)
