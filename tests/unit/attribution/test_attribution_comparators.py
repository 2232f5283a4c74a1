"""The faithfulness table's comparators: hand-derived values on a linear model, AttnLRP's reach,
the decomposition methods on the study's wrapped Hugging Face classifier (and why not elsewhere)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnflow.attribution.comparators import DECOMPOSITION, GRADIENT, comparator_scores, compare_on_subset

pytest.importorskip("captum")

IDS = [[2, 4, 5, 6], [2, 7, 3]]
PAD = 0


def _linear(position_linear):
    torch.manual_seed(0)
    return position_linear(torch.randn(12, 3), torch.randn(2, 4, 3))  # logits_c = Σ_t <W[c, t], x_t>


def test_on_a_linear_model_ig_is_the_embedding_difference_times_the_weights_and_x_gradient_is_exact(
    position_linear,
):
    model = _linear(position_linear)
    scores, seconds, skipped = comparator_scores(model, IDS, pad_id=PAD, keep_positions=(0,))
    assert set(scores) == {GRADIENT, "integrated_gradients"} and set(seconds) == set(scores)
    assert "no AttnLRP rules for PositionLinear" in skipped["attnlrp"]
    emb, w = model.emb.weight.detach(), model.w.detach()
    for b, ids in enumerate(IDS):
        x = emb[torch.tensor(ids)]  # (T, D)
        c = int(torch.einsum("td,ctd->c", x, w[:, : len(ids)]).argmax())
        np.testing.assert_allclose(scores[GRADIENT][b], (x * w[c, : len(ids)]).sum(-1).numpy(), atol=1e-10)
        ig = ((x - emb[PAD]) * w[c, : len(ids)]).sum(-1)  # IG of a linear function, exactly
        ig[0] = 0.0  # the kept CLS is its own baseline
        np.testing.assert_allclose(scores["integrated_gradients"][b], ig.numpy(), atol=1e-8)


class Wrapped(torch.nn.Module):  # the study's HFClassifier keeps the transformers model as .hf
    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids=None, attention_mask=None):
        return self.hf(input_ids=input_ids, attention_mask=attention_mask)

    def get_input_embeddings(self):
        return self.hf.get_input_embeddings()


def test_attnlrp_runs_on_a_wrapped_hugging_face_classifier():
    from attnflow.attnlrp.maps import attnlrp_map
    from tests.unit.attnlrp._attnlrp_models import tiny

    hf = tiny("bert")
    scores, _, skipped = comparator_scores(Wrapped(hf), IDS, pad_id=PAD, names=["attnlrp"])
    assert not skipped
    for b, ids in enumerate(IDS):
        np.testing.assert_allclose(scores["attnlrp"][b], attnlrp_map(hf, torch.tensor(ids))[-1], atol=1e-10)


def test_the_cost_table_counts_in_gradients_and_names_what_could_not_run(position_linear):
    model = _linear(position_linear)
    _scores, table = compare_on_subset(
        model, SimpleNamespace(pad_id=PAD), IDS, methods=[], task_rows="cls", keep_positions=(0,),
        importance_options={},
    )  # fmt: skip
    rows = table.set_index("method")
    assert rows.loc[GRADIENT, "vs_gradient"] == 1.0 and (rows["n"] == 2).all()
    assert rows.loc["integrated_gradients", "vs_gradient"] > 1.0  # 50 integration points
    assert np.isnan(rows.loc["attnlrp", "seconds_per_sentence"]) and rows.loc["attnlrp", "skipped"]


def test_the_decomposition_methods_score_the_cls_row_of_the_wrapped_classifier():
    """Each is its map at the [CLS] row of the last layer, as explain_batch gives it for the text
    alone (the batch is padded: the second sample is shorter)."""
    from attnflow.hf import explain_batch
    from tests.unit.attnlrp._attnlrp_models import tiny

    hf = tiny("bert")
    scores, seconds, skipped = comparator_scores(Wrapped(hf), IDS, pad_id=PAD, names=DECOMPOSITION)
    assert not skipped and set(scores) == set(DECOMPOSITION) and all(s > 0 for s in seconds.values())
    for b, ids in enumerate(IDS):
        alone = {
            "input_ids": torch.tensor([ids]),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        }
        _, (res,) = explain_batch(hf, alone, methods=list(DECOMPOSITION), layer=-1, rows="auto", residual=0.5,
                                  heads="mean", target="predicted", extra_inputs=None)  # fmt: skip
        for name in DECOMPOSITION:
            np.testing.assert_allclose(scores[name][b], res["maps"][name][-1], atol=1e-9, err_msg=name)


def test_a_model_without_a_hugging_face_encoder_skips_them_with_the_reason(position_linear):
    from tests.unit.attnlrp._attnlrp_models import tiny

    _, _, skipped = comparator_scores(_linear(position_linear), IDS, pad_id=PAD, names=DECOMPOSITION)
    assert set(skipped) == set(DECOMPOSITION)
    assert "reads a Hugging Face model's own vectors; PositionLinear holds none" in skipped["alti"]
    gpt2 = tiny("gpt2_cls")
    gpt2.config.pad_token_id = PAD  # its classifier reads the last real token of a padded batch
    _, _, skipped = comparator_scores(Wrapped(gpt2), IDS, pad_id=PAD, names=DECOMPOSITION)
    assert "is defined for post-LayerNorm encoders" in skipped["alti"]
    assert "decompx decomposes a BERT-type encoder" in skipped["decompx"] and "attention_norm" not in skipped
