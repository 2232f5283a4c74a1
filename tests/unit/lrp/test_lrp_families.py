"""LRP model families are data rows with a public hook: the refusal lists what is supported and how
to add a family; a registered family is dispatched to (lrp_relevance and AttnLRP alike)."""

import pytest
import torch
from torch import nn

from attnflow.lrp import FAMILIES, SUPPORTED, LRPFamily, lrp_relevance, register_lrp_family


class Stranger(nn.Module):
    def forward(self, ids):
        return ids


def test_the_refusal_lists_every_family_and_names_the_hook():
    with pytest.raises(TypeError) as info:
        lrp_relevance(Stranger(), torch.tensor([[1, 2]]))
    message = str(info.value)
    assert "no LRP rules for Stranger" in message and "register_lrp_family" in message
    for family in FAMILIES.values():
        assert family.label in message


def test_the_built_in_families_are_rows_and_supported_lists_them():
    assert set(FAMILIES) >= {"agreement", "bert", "distilbert"}
    assert SUPPORTED == tuple(FAMILIES[n].label for n in ("agreement", "bert", "distilbert"))


def test_a_registered_family_is_dispatched_to_with_its_own_rules(monkeypatch):
    monkeypatch.setattr("attnflow.lrp.api.FAMILIES", dict(FAMILIES))  # leave the module's rows as they were
    seen = {}

    class Tiny(Stranger):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1))  # where the model runs

    def relevance(model, ids, keep, opt, *, token_type_ids=None):
        seen.update(ids=ids, keep=keep, target=opt.target)
        return "result"

    from attnflow.lrp import api

    api.register_lrp_family(LRPFamily("tiny", ("Stranger",), relevance, lambda m: 8))  # a base class matches
    assert lrp_relevance(Tiny(), torch.tensor([[1, 2, 3]]), target=1) == "result"
    assert seen["keep"].all() and seen["target"] == 1
    with pytest.raises(ValueError, match="exceeds the model's 8 positions"):
        lrp_relevance(Tiny(), torch.ones((1, 9), dtype=torch.long))


def test_a_family_without_classes_is_refused():
    with pytest.raises(ValueError, match="name its model classes"):
        register_lrp_family(LRPFamily("empty", (), lambda *a, **k: None, lambda m: 1))


def test_attnlrp_refuses_an_unknown_class_with_its_hook_and_takes_a_registered_one(monkeypatch):
    from attnflow.attnlrp import patch

    with pytest.raises(TypeError, match="register_architecture"):
        patch.architecture(Stranger())
    monkeypatch.setattr(patch, "ARCHITECTURES", dict(patch.ARCHITECTURES))
    parts = patch.ARCHITECTURES["GPT2LMHeadModel"]
    patch.register_architecture("Stranger", parts)
    model = Stranger()
    model.config = type("Config", (), {"_attn_implementation": "eager"})()
    assert patch.architecture(model) is parts
    with pytest.raises(ValueError, match="Architecture"):
        patch.register_architecture("Other", "not an architecture")
