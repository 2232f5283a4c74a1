"""attnlrp as an API: the model instance is left as it was (also on error), unsupported models are
refused in one line, shapes, targets and positions behave as documented."""

from __future__ import annotations

import pytest
import torch

from attnflow.attnlrp import SUPPORTED, attnlrp, attnlrp_rules
from tests.unit.attnlrp._attnlrp_models import IDS, VOCAB, tiny, transformers

ARCHS = ["bert", "gpt2", "llama"]
SAME = 1e-12  # the rules' forwards recompute norms in another order: float64 rounding only


def _state(model):
    """Everything attnlrp could leave behind on the instance."""
    return {
        "forwards": [n for n, m in model.named_modules() if "forward" in m.__dict__],
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()),
        "training": [m.training for m in model.modules()],
        "grads": [n for n, p in model.named_parameters() if p.grad is not None],
    }


@pytest.mark.parametrize("name", ARCHS)
def test_model_is_unchanged_after_attnlrp(name):
    # the rules are swapped in on the instance only for the call: outputs bit-equal before and after
    model = tiny(name).train()  # a training model: attnlrp runs it in eval mode, then restores the flags
    with torch.no_grad():
        before = model.eval()(IDS[None]).logits
    model.train()
    state = _state(model)
    attnlrp(model, IDS)
    assert _state(model) == state
    with torch.no_grad():
        assert torch.equal(model.eval()(IDS[None]).logits, before)


@pytest.mark.parametrize("name", ARCHS)
def test_model_is_restored_when_attnlrp_raises(name):
    # the error comes from inside the rules' block (target checked after the forward)
    model = tiny(name)
    state = _state(model)
    with pytest.raises(ValueError, match="out of range"):
        attnlrp(model, IDS, target=10_000)
    assert _state(model) == state
    with pytest.raises(RuntimeError, match="boom"), attnlrp_rules(model):
        raise RuntimeError("boom")
    assert _state(model) == state


@pytest.mark.parametrize("name", ARCHS)
def test_rules_leave_the_forward_values_unchanged(name):
    # the rules change only the backward: the explained logits are the model's own
    model = tiny(name)
    out = attnlrp(model, IDS)
    with torch.no_grad():
        logits = model(IDS[None]).logits[0]
    expected = logits if name == "bert" else logits[-1]
    assert torch.allclose(out.logits, expected, rtol=0, atol=SAME)
    assert out.target == int(expected.argmax()) and out.logit == out.logits[out.target]


def test_unsupported_architecture_is_refused_in_one_line():
    config = transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=16, n_layers=1, n_heads=2, hidden_dim=32, attn_implementation="eager"
    )
    model = transformers.DistilBertForSequenceClassification(config)
    with pytest.raises(TypeError) as err:
        attnlrp(model, IDS)
    message = str(err.value)
    assert "\n" not in message and "DistilBertForSequenceClassification" in message
    assert all(name in message for name in SUPPORTED)


def test_non_eager_attention_is_refused_in_one_line():
    model = tiny("gpt2")
    model.config._attn_implementation = "sdpa"
    with pytest.raises(ValueError) as err:
        attnlrp(model, IDS)
    message = str(err.value)
    assert "\n" not in message and "GPT2LMHeadModel" in message and "attn_implementation='eager'" in message


def test_more_than_one_sequence_is_refused():
    with pytest.raises(ValueError, match="one sequence"):
        attnlrp(tiny("bert"), torch.stack([IDS, IDS]))


@pytest.mark.parametrize("name", ARCHS)
def test_shapes_and_which_embeddings_are_reported(name):
    # (T,) and (1, T) inputs are the same sequence; L = 2 layers, T = 7 tokens
    model = tiny(name)
    out, batched = attnlrp(model, IDS), attnlrp(model, IDS[None])
    t = len(IDS)
    assert out.input_relevance.shape == (t,)
    assert out.hidden_relevance.shape == (3, t)
    assert out.attn_relevance.shape == (2, t, t)
    assert out.softmax_absorbed.shape == (2,)
    assert (out.position_relevance is None) == (name == "llama")  # RoPE: no position table
    assert (out.token_type_relevance is None) == (name != "bert")
    assert torch.equal(out.input_relevance, batched.input_relevance)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoder_explains_the_chosen_position_causally(name):
    # the logit at position 3 depends on tokens 0..3 only (causal mask: attention to later keys is 0)
    model = tiny(name)
    out = attnlrp(model, IDS, position=3)
    with torch.no_grad():
        assert torch.allclose(out.logits, model(IDS[None]).logits[0, 3], rtol=0, atol=SAME)
    assert out.input_relevance[4:].abs().max() == 0
    assert out.attn_relevance.triu(1).abs().max() == 0  # no relevance above the diagonal (masked keys)


def test_padded_tokens_get_no_relevance():
    # BERT's mask gives padded keys attention exp(min) = 0: nothing of theirs reaches the CLS token
    mask = torch.tensor([1, 1, 1, 1, 1, 0, 0])
    out = attnlrp(tiny("bert"), IDS, mask)
    assert out.input_relevance[5:].abs().max() == 0
    assert out.attn_relevance[:, :, 5:].abs().max() == 0


def test_epsilon_absorbs_relevance_and_vanishes_at_zero():
    # ε-LRP: each linear layer passes z/(z + ε sign z) of its relevance; ε → 0 is gradient x input,
    # a huge ε leaves almost nothing for the input (6+ linear layers in a chain)
    model = tiny("bert")
    plain, tiny_eps, huge = (attnlrp(model, IDS, target=0, epsilon=e) for e in (0.0, 1e-12, 1e3))
    assert torch.allclose(tiny_eps.input_relevance, plain.input_relevance, rtol=1e-8, atol=1e-12)
    assert huge.input_relevance.abs().sum() < 1e-6 * plain.input_relevance.abs().sum()


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "gpt2_cls"])
def test_one_batched_pass_gives_each_sample_its_own_relevances(name):
    # Σ_b y_b backwards once: independent samples (masked keys weigh exactly 0) get ∂y_b/∂x each
    from attnflow.attnlrp import attnlrp_batch

    model = tiny(name)
    model.config.pad_token_id = 0
    lengths = [7, 5, 3] if name != "gpt2_cls" else [6, 6, 6]  # a decoder classifier: one length
    ids = torch.zeros(3, 7, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = IDS[:n] + b
    mask = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).long()
    targets, positions = [0, None, 2], [-1, 1, -2]
    batched = attnlrp_batch(model, ids, mask, targets=targets, positions=positions, lengths=lengths)
    for b, n in enumerate(lengths):
        alone = attnlrp(model, ids[b, :n], target=targets[b], position=positions[b])
        assert batched[b].target == alone.target
        for field in ("logit", "input_relevance", "hidden_relevance", "attn_relevance", "softmax_absorbed",
                      "bias_absorbed", "position_relevance", "token_type_relevance"):  # fmt: skip
            ours, ref = getattr(batched[b], field), getattr(alone, field)
            assert (ours is None) == (ref is None), field
            if ref is not None:
                torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-11, msg=field)


def test_a_batch_that_is_not_right_padded_is_refused():
    from attnflow.attnlrp import attnlrp_batch

    ids = torch.stack([IDS[:5], IDS[:5]])
    left = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    with pytest.raises(ValueError, match="right padding"):
        attnlrp_batch(tiny("bert"), ids, left)
    with pytest.raises(ValueError, match="one length per batch"):
        attnlrp_batch(tiny("gpt2_cls"), ids, torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]))
