"""The sensitivity table's ``blank_positions=skip_cls`` scores follow from the configured ``all``
pass without a model call, equal to the pass they replace (the attribute stage no longer runs it)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from attnflow.attribution.samples import (
    attribute_samples,
    blank_out_under_switches,
    blank_switches,
    method_options,
    switch_from_configured,
)
from tests._tiny import tiny_agreement

WORDS = ["the", "dog", "dogs", "near", "cat", "cats", "big"]
SETTINGS = dict(blank_positions="all", blank_token="unk", mask_blank=False, blank_target="gold")


def _study():
    """A tiny agreement model (float32, as the study's), its encoder, 12 sentences and labels."""
    model, encoder = tiny_agreement(32, WORDS)
    rng = random.Random(0)
    ids = encoder.encode_ids([" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(12)])
    return model, encoder, ids, [rng.randrange(2) for _ in ids]


@pytest.mark.parametrize("batch_size", [3, 256])  # 3: the dropped CLS copies shift every later batch
def test_skip_cls_from_the_configured_pass_equals_its_own_pass(batch_size):
    model, encoder, ids, labels = _study()

    def scores(**settings):
        options = method_options(["blank_out"], encoder, batch_size=batch_size, **{**SETTINGS, **settings})
        got = attribute_samples(
            model, ids, labels, options=options, pad_id=encoder.pad_id, batch_size=batch_size
        )
        return got["blank_out"]

    configured = scores()
    derived = switch_from_configured("blank_positions=skip_cls", SETTINGS, configured)
    own_pass = scores(blank_positions="skip_cls")
    assert all(np.array_equal(d, o) for d, o in zip(derived, own_pass, strict=True))
    assert any(c[0] != 0 for c in configured)  # CLS was blanked and mattered in the configured pass
    assert all(d[0] == 0 for d in derived)


def test_the_other_switches_still_need_their_own_pass():
    configured = [np.ones(3)]
    for name in blank_switches(SETTINGS):
        if not name.startswith("blank_positions"):
            assert switch_from_configured(name, SETTINGS, configured) is None
    skip = {**SETTINGS, "blank_positions": "skip_cls"}  # CLS's score under "all" is not in a skip_cls pass
    assert switch_from_configured("blank_positions=all", skip, configured) is None


def test_every_switch_of_the_stage_equals_its_own_pass():
    """blank_out_under_switches (what the attribute stage runs): each switch's scores, derived or
    computed, equal a pass with that switch flipped."""
    model, encoder, ids, labels = _study()
    common = dict(pad_id=encoder.pad_id, batch_size=4)
    gradient = dict(gradient_target="p0_minus_p1", gradient_class="gold")

    def blank_out(settings):
        options = method_options(["blank_out"], encoder, **gradient, **settings)
        return attribute_samples(model, ids, labels, options=options, **common)["blank_out"]

    got = blank_out_under_switches(model, ids, labels, settings=SETTINGS, configured=blank_out(SETTINGS),
                                   encoder=encoder, gradient=gradient, **common)  # fmt: skip
    flips = blank_switches(SETTINGS)
    assert sorted(got) == sorted(flips)
    for name, flipped in flips.items():
        assert all(np.array_equal(g, o) for g, o in zip(got[name], blank_out(flipped), strict=True)), name


def test_switches_of_a_subset_are_the_full_passes_scores_of_those_samples():
    """``samples`` (attribution.switch_samples): the subset's scores, in its order, are those of a
    pass over every sample (to float32 rounding: the subset is batched by its own lengths)."""
    model, encoder, ids, labels = _study()
    common = dict(pad_id=encoder.pad_id, batch_size=4)
    gradient = dict(gradient_target="p0_minus_p1", gradient_class="gold")
    configured = attribute_samples(
        model, ids, labels, options=method_options(["blank_out"], encoder, **gradient, **SETTINGS), **common
    )["blank_out"]
    kwargs = dict(settings=SETTINGS, configured=configured, encoder=encoder, gradient=gradient, **common)
    every = blank_out_under_switches(model, ids, labels, **kwargs)
    chosen = [7, 2, 9]
    some = blank_out_under_switches(model, ids, labels, samples=chosen, **kwargs)
    assert sorted(some) == sorted(every)
    for name in every:
        assert len(some[name]) == len(chosen)
        for got, i in zip(some[name], chosen, strict=True):
            np.testing.assert_allclose(got, every[name][i], rtol=0, atol=1e-6)
