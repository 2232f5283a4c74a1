"""attnflow.answer: FlashTrace's RISE / MAS / recovery, hand-derived and against an independent
vectorised formulation; span attribution on a tiny Llama (completeness of gradient x input's
ingredients, IG's limit, the guided deletion); the tasks' gold spans."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.answer import (
    arithmetic_items,
    deletion_areas,
    deletion_scores,
    gold_positions,
    guided_deletion,
    multihop_items,
    recovery_at,
    retrieval_items,
    span_attribution,
)
from attnflow.generate.faithfulness import continuation_logprobs


def _oracle(scores: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """The same three areas, written with array operations instead of loops."""
    s = scores.astype(float)
    span = abs(s[0] - s[-1])
    n = np.minimum.accumulate(np.concatenate([[1.0], np.clip((s - s[-1]) / span, 0, 1)]))[1:]
    order = np.argsort(-w, kind="stable")
    d = (
        np.concatenate([[1.0], 1.0 - np.cumsum(w[order]) / w.sum()])
        if w.sum() > 0
        else np.linspace(1, 0, len(s))
    )
    p = np.abs(n - d)
    c = np.clip(n + p, 0, 1)
    c = (c - c.min()) / (c.max() - c.min())

    def area(a):
        return (a.sum() - a[0] / 2 - a[-1] / 2) / (len(a) - 1)

    return area(n), area(c), area(n + p)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 10_000))
def test_the_areas_equal_an_independent_formulation(n, seed):
    rng = np.random.default_rng(seed)
    scores = np.sort(rng.normal(0, 3, n + 1))[::-1] + rng.normal(
        0, 0.5, n + 1
    )  # mostly falling, not monotone
    scores[0] += 1.0
    w = rng.exponential(1.0, n)
    got, want = deletion_areas(scores, w), _oracle(scores, w)
    assert np.allclose(got, want, rtol=0, atol=1e-12)


def test_hand_cases():
    # a perfect attribution: all the log-prob goes with the first deletion, and all the mass is on it
    assert deletion_areas(np.array([0.0, -4.0, -4.0]), np.array([1.0, 0.0])) == pytest.approx(
        (0.25, 0.25, 0.25)
    )
    # nothing changes when tokens go: the curve stays at 1 (a NaN never lowers it)
    rise, _, _ = deletion_areas(np.array([-2.0, -2.0, -2.0]), np.array([1.0, 1.0]))
    assert rise == 1.0
    # no positive mass: the density is the straight line
    assert deletion_areas(np.array([0.0, -1.0, -2.0]), np.array([-1.0, -1.0]))[1] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="P \\+ 1"):
        deletion_areas(np.zeros(2), np.ones(2))


def test_recovery_counts_gold_in_the_top_share():
    w = np.array([0.0, 5.0, 1.0, 4.0, np.nan, -3.0, 0.5, 0.2, 0.1, 0.0])
    assert recovery_at(w, [1, 3], fraction=0.1) == 0.5  # k = 1: only position 1
    assert recovery_at(w, [1, 3], fraction=0.2) == 1.0
    assert np.isnan(recovery_at(w, [42], fraction=0.5))
    with pytest.raises(ValueError, match="fraction"):
        recovery_at(w, [1], fraction=0.0)


def _llama() -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=32, max_position_embeddings=64,
                                      attn_implementation="eager")  # fmt: skip
    return transformers.LlamaForCausalLM(config).double().eval()


PROMPT, ANSWER = [5, 9, 13, 2, 21, 7], [11, 3]


def test_gradient_times_input_against_finite_differences():
    """w_j = e_j · ∂y/∂e_j: the directional derivative of the summed answer logits along e_j."""
    model = _llama()
    w = span_attribution(model, None, PROMPT, ANSWER, "input_gradients")
    ids = torch.tensor([PROMPT + ANSWER[:-1]])
    e = model.get_input_embeddings()(ids).detach()

    def y(embeds):
        with torch.no_grad():
            logits = model(inputs_embeds=embeds).logits[0]
        return sum(float(logits[len(PROMPT) - 1 + t, a]) for t, a in enumerate(ANSWER))

    h = 1e-3  # Llama's RMSNorm computes in float32 even for a float64 model: no smaller step pays
    for j in (0, 3, 5):
        up, down = e.clone(), e.clone()
        up[0, j] += h * e[0, j]
        down[0, j] -= h * e[0, j]
        assert w[j] == pytest.approx((y(up) - y(down)) / (2 * h), rel=2e-2, abs=2e-5)
    assert w.shape == (len(PROMPT),)


def test_integrated_gradients_with_one_step_is_gradient_times_input():
    model = _llama()
    one = span_attribution(model, None, PROMPT, ANSWER, "integrated_gradients", ig_steps=1)
    assert np.allclose(one, span_attribution(model, None, PROMPT, ANSWER, "input_gradients"), atol=1e-12)


def test_attnlrp_runs_on_the_span_and_differs_from_the_plain_gradient():
    model = _llama()
    lrp = span_attribution(model, None, PROMPT, ANSWER, "attnlrp")
    assert lrp.shape == (len(PROMPT),) and np.isfinite(lrp).all()
    assert not np.allclose(lrp, span_attribution(model, None, PROMPT, ANSWER, "input_gradients"))


def test_the_deletion_curve_is_the_answers_log_prob_with_tokens_padded():
    model = _llama()
    w = np.array([0.1, 3.0, 0.2, 2.0, 0.0, 0.5])
    scores = deletion_scores(model, PROMPT, ANSWER, w, pad_id=0)
    assert scores.shape == (len(PROMPT) + 1,)
    assert scores[0] == pytest.approx(continuation_logprobs(model, [PROMPT], ANSWER, 8).sum())
    two_gone = PROMPT.copy()
    two_gone[1] = two_gone[3] = 0  # the two largest weights
    assert scores[2] == pytest.approx(continuation_logprobs(model, [two_gone], ANSWER, 8).sum())
    coarse = deletion_scores(model, PROMPT, ANSWER, w, pad_id=0, steps=2)  # measured at 0, 3, 6
    assert coarse[[0, 3, 6]] == pytest.approx(scores[[0, 3, 6]])
    protected = deletion_scores(model, PROMPT, ANSWER, w, pad_id=0, protect=[0, 5])
    assert protected.shape == (len(PROMPT) - 1,)
    areas = guided_deletion(model, PROMPT, ANSWER, w, pad_id=0)
    assert set(areas) == {"rise", "mas", "rise_ap"} and all(0 <= v <= 2 for v in areas.values())


def test_a_bad_method_or_empty_answer_is_refused():
    with pytest.raises(ValueError, match="unknown span method"):
        span_attribution(None, None, PROMPT, ANSWER, "shap")
    with pytest.raises(ValueError, match="answer"):
        span_attribution(None, None, PROMPT, [], "input_gradients")


class _CharTokenizer:
    """One token per word, with character offsets (what gold_positions reads)."""

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        import re

        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        out = {"input_ids": list(range(len(spans)))}
        if return_offsets_mapping:
            out["offset_mapping"] = spans
        return out


def test_the_tasks_gold_spans_hold_the_source():
    tok = _CharTokenizer()
    for item in arithmetic_items(5, seed=3) + multihop_items(5, seed=3):
        texts = [item.prompt[a:b] for a, b in item.gold]
        if item.task == "arithmetic":
            assert sum(int(t) for t in texts) == int(item.answer)
        else:
            assert texts == [item.answer.strip()]
        assert gold_positions(tok, item.prompt, item.gold)
    filler = [f"Sentence number {i} says nothing at all ." for i in range(50)]
    (item,) = retrieval_items(filler, tok, n=1, length=120, seed=0)
    (span,) = item.gold
    assert item.prompt[span[0] : span[1]] == item.answer.strip()
    assert 110 <= len(tok(item.prompt)["input_ids"]) <= 140
    with pytest.raises(ValueError, match="filler"):
        retrieval_items([], tok, n=1, length=10)


def test_a_span_explains_only_its_tokens_the_rest_being_context():
    """Gradient × input is linear in the target: the whole answer's attribution is the sum of its
    one-token spans' (the earlier tokens stay in the input as context either way)."""
    model = _llama()
    whole = span_attribution(model, None, PROMPT, ANSWER, "input_gradients")
    parts = [
        span_attribution(model, None, PROMPT, ANSWER, "input_gradients", span=(t, t))
        for t in range(len(ANSWER))
    ]
    assert np.allclose(whole, sum(parts), atol=1e-10)
    assert not np.allclose(parts[0], parts[-1])
    with pytest.raises(ValueError, match="span"):
        span_attribution(model, None, PROMPT, ANSWER, "input_gradients", span=(1, len(ANSWER)))


def test_the_deletion_curve_of_a_span_sums_only_its_tokens_log_probs():
    model = _llama()
    w = np.array([0.1, 3.0, 0.2, 2.0, 0.0, 0.5])
    last = len(ANSWER) - 1
    scores = deletion_scores(model, PROMPT, ANSWER, w, pad_id=0, span=(last, last))
    assert scores[0] == pytest.approx(continuation_logprobs(model, [PROMPT], ANSWER, 8)[0, last])
    whole = deletion_scores(model, PROMPT, ANSWER, w, pad_id=0)
    first = deletion_scores(model, PROMPT, ANSWER, w, pad_id=0, span=(0, last - 1))
    assert np.allclose(whole, first + scores)


@pytest.mark.parametrize("method", ["input_gradients", "attnlrp"])
def test_keeping_only_the_explained_rows_logits_changes_no_value(method, monkeypatch):
    """The gradient methods ask the model for the logits from the first explained token's row on
    (no (T, V) logits, no gradient of them); the weights are those of the full logits."""
    import attnflow.modes

    model = _llama()
    kept = span_attribution(model, None, PROMPT, ANSWER, method, span=(1, len(ANSWER) - 1))
    monkeypatch.setattr(attnflow.modes, "keeps_logits", lambda m: False)
    full = span_attribution(model, None, PROMPT, ANSWER, method, span=(1, len(ANSWER) - 1))
    np.testing.assert_allclose(kept, full, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("method", ["input_gradients", "integrated_gradients", "attnlrp"])
def test_checkpointed_blocks_give_the_same_weights_and_keep_less_for_the_backward(method):
    """checkpoint=True: the same values (each block recomputed in the backward), the blocks' own
    forward back afterwards, and a fraction of the bytes autograd keeps for the backward."""
    from attnflow.answer.span import blocks

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    prompt, answer = list(range(3, 60)), [5, 6, 7]
    kept = []

    def pack(t):
        kept.append(t.numel() * t.element_size())
        return t

    options = {"attention": "sdpa"} if method == "attnlrp" else {}
    sizes = {}
    for checkpoint in (False, True):
        kept.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            w = span_attribution(model, None, prompt, answer, method, checkpoint=checkpoint, **options)
        sizes[checkpoint] = (w, sum(kept))
    np.testing.assert_array_equal(sizes[True][0], sizes[False][0])
    assert sizes[True][1] < 0.5 * sizes[False][1]
    assert all("forward" not in vars(b) for b in blocks(model))
