"""The causal reference of the pronoun test (attnflow.pronouns.causal): blanking, margins and effects
by hand, on a bag-of-words causal LM whose logits are sums one can add up on paper, and on a tiny
random Llama against one plain forward per blanked copy."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attnflow.pronouns.causal import (
    CAUSAL_COLUMNS,
    CAUSAL_VALUE,
    blank_spans,
    blank_token_id,
    causal_reference,
    margin_effects,
)

torch = pytest.importorskip("torch")


# --- pure parts ----------------------------------------------------------------------------------


def test_blank_spans_replaces_each_span_in_its_own_copy_and_keeps_positions():
    ids = [5, 6, 7, 8]
    out = blank_spans(ids, [[1], [2, 3]], blank_id=0)
    assert out.tolist() == [[5, 6, 7, 8], [5, 0, 7, 8], [5, 6, 0, 0]]
    assert ids == [5, 6, 7, 8]  # the input is not changed
    with pytest.raises(ValueError, match="outside a text of 4 tokens"):
        blank_spans(ids, [[4]], blank_id=0)
    with pytest.raises(ValueError, match="empty"):
        blank_spans(ids, [[]], blank_id=0)


def test_margin_effects_by_hand():
    # vocabulary (x, p, q): p preferred. m = z_p - z_q: x 3 - 1 = 2, without the referent 1 - 1 = 0,
    # without the distractor 2.5 - 1 = 1.5 -> effects 2 and 0.5: the choice rests on the referent
    z = np.array([[0.0, 3.0, 1.0], [0.0, 1.0, 1.0], [0.0, 2.5, 1.0]])
    e = margin_effects(z, 1, 2)
    assert (e["margin"], e["margin_blank_referent"], e["margin_blank_distractor"]) == (2.0, 0.0, 1.5)
    assert (e["effect_referent"], e["effect_distractor"], e["causal_choice"]) == (2.0, 0.5, "referent")
    # m = 2, 2.5 - 1 = 1.5, 1 - 2 = -1: effects 0.5 and 3, the distractor's removal costs more
    z2 = np.array([[0.0, 3.0, 1.0], [0.0, 2.5, 1.0], [0.0, 1.0, 2.0]])
    assert margin_effects(z2, 1, 2)["causal_choice"] == "distractor"
    tie = np.array([[0.0, 3.0, 1.0], [0.0, 2.0, 1.0], [0.0, 2.0, 1.0]])  # effects 1 and 1
    assert margin_effects(tie, 1, 2)["causal_choice"] == "tie"
    assert CAUSAL_VALUE == {"referent": 1.0, "tie": 0.5, "distractor": 0.0}
    with pytest.raises(ValueError, match="must be \\(3, vocabulary\\)"):
        margin_effects(np.zeros((2, 3)), 1, 2)


def test_blank_is_the_pad_token_else_eos():
    assert blank_token_id(SimpleNamespace(pad_token_id=3, eos_token_id=2)) == 3
    assert blank_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=2)) == 2
    with pytest.raises(ValueError, match="no pad and no eos"):
        blank_token_id(SimpleNamespace(pad_token_id=None, eos_token_id=None))


# --- a bag-of-words causal LM: logits at position t = sum_{s <= t} W[ids_s] ------------------------


class BagOfWords(torch.nn.Module):
    """A causal LM whose next-token logits after position t are the sum of its tokens' rows of W."""

    def __init__(self, table: np.ndarray):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(table, dtype=torch.float64), requires_grad=False)
        self.calls: list[tuple[int, ...]] = []

    def forward(self, input_ids):
        self.calls.append(tuple(input_ids.shape))
        return SimpleNamespace(logits=self.table[input_ids].cumsum(dim=1))  # (B, T, V)


# vocabulary: 0 blank, 1 "John", 2 "Mary", 3 "said", 4 " himself" (p), 5 " herself" (q)
W = np.zeros((6, 6))
W[1, 4] = 2.0  # John pushes " himself" up by 2
W[2, 5] = 1.0  # Mary pushes " herself" up by 1
W[3, 4] = 0.5  # "said" pushes " himself" up by 0.5


def test_causal_reference_by_hand_on_a_bag_of_words_lm():
    model = BagOfWords(W)
    # "John said Mary" (referent John at 0, distractor Mary at 2): himself 2.5, herself 1 -> m = 1.5;
    # without John: 0.5 - 1 = -0.5 (effect 2); without Mary: 2.5 - 0 = 2.5 (effect -1) -> referent.
    # "Mary said John said" (referent Mary at 0, distractor John at 2; the model prefers himself):
    # m = 3 - 1 = 2; without Mary 3 - 0 = 3 (effect -1); without John 1 - 1 = 0 (effect 2) -> distractor
    table = causal_reference(
        model, [[1, 3, 2], [2, 3, 1, 3]], [[0], [0]], [[2], [2]], [4, 4], [5, 5], blank_id=0, batch_size=4
    )
    assert list(table.columns) == list(CAUSAL_COLUMNS)
    assert table["margin"].tolist() == [1.5, 2.0]
    assert table["effect_referent"].tolist() == [2.0, -1.0]
    assert table["effect_distractor"].tolist() == [-1.0, 2.0]
    assert table["causal_choice"].tolist() == ["referent", "distractor"]
    # two lengths: one forward each, the three copies of a sentence in one batch, nothing padded
    assert sorted(model.calls) == [(3, 3), (3, 4)]


def test_causal_reference_batches_sentences_of_one_length_together():
    model = BagOfWords(W)
    ids, ref, dis = [[1, 3, 2]] * 5, [[0]] * 5, [[2]] * 5
    one = causal_reference(model, ids, ref, dis, [4] * 5, [5] * 5, blank_id=0, batch_size=2)
    assert model.calls == [(6, 3), (6, 3), (3, 3)]  # 2 + 2 + 1 sentences, 3 rows each
    assert one["effect_referent"].tolist() == [2.0] * 5
    with pytest.raises(ValueError, match="one entry per sentence"):
        causal_reference(model, ids, ref, dis, [4], [5], blank_id=0)


def test_causal_reference_equals_plain_forwards_on_a_tiny_random_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=20, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, max_position_embeddings=32, bos_token_id=None, eos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    ids = [[1, 5, 6, 7, 8], [1, 9, 6, 7, 10, 11], [1, 8, 6, 7, 5]]
    ref, dis = [[1], [4, 5], [4]], [[4], [1], [1]]
    table = causal_reference(model, ids, ref, dis, [12, 13, 12], [13, 12, 13], blank_id=0, batch_size=8)

    def margin(row, p, q):  # one plain forward of one copy
        with torch.no_grad():
            z = model(torch.tensor([row])).logits[0, -1].double()
        return float(z[p] - z[q])

    for k, (row, r, d, p, q) in enumerate(zip(ids, ref, dis, [12, 13, 12], [13, 12, 13], strict=True)):
        no_r = [0 if j in r else t for j, t in enumerate(row)]
        no_d = [0 if j in d else t for j, t in enumerate(row)]
        m, mr, md = margin(row, p, q), margin(no_r, p, q), margin(no_d, p, q)
        got = table.iloc[k]
        assert got["margin"] == pytest.approx(m, abs=1e-5)
        assert got["effect_referent"] == pytest.approx(m - mr, abs=1e-5)
        assert got["effect_distractor"] == pytest.approx(m - md, abs=1e-5)
        assert got["causal_choice"] == ("referent" if m - mr > m - md else "distractor")
