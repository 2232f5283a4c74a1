"""Per-head maps of a subset of the samples (explain.per_head_samples): computed alone
(heads_only), joined to their importance by sample id, correlated as if the subset were the study."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.data.subsets import seeded_subset
from attnflow.explain.samples import explain_samples
from attnflow.io import ArtifactError, align_ids
from attnflow.methods import resolve
from attnflow.metrics.tables import CorrelationSettings, study_frame

SETTINGS = CorrelationSettings("dense_noties", "zero", {"blank_out": True})


def _attention(rng, n, layers=2, heads=2):
    out = []
    for t in rng.integers(3, 7, size=n):
        a = rng.random((layers, heads, t, t)) ** 4
        out.append(a / a.sum(-1, keepdims=True))
    return out


def test_heads_only_gives_the_per_head_maps_of_the_full_call_bit_for_bit_and_nothing_else():
    attn = _attention(np.random.default_rng(0), 5)
    full = explain_samples(attn, methods=resolve(["raw", "rollout", "flow"]), rows="max", per_head=True)
    heads = explain_samples(attn, methods=resolve(["raw", "rollout", "flow"]), rows="max", heads_only=True)
    assert sorted(heads) == ["flow_heads", "raw_heads", "rollout_heads"]
    for name, maps in heads.items():
        assert all(np.array_equal(a, b) for a, b in zip(maps, full[name], strict=True))


def test_heads_only_refuses_methods_without_a_per_head_variant():
    with pytest.raises(ValueError, match="per-head variant"):
        explain_samples(_attention(np.random.default_rng(0), 1), methods=resolve(["chefer"]), heads_only=True)


def test_seeded_subset_is_seeded_sorted_and_all_when_there_are_fewer_samples():
    a, b = seeded_subset(50, 10, seed=3), seeded_subset(50, 10, seed=3)
    assert a.tolist() == b.tolist() == sorted(set(a.tolist())) and len(a) == 10
    assert seeded_subset(50, 10, seed=4).tolist() != a.tolist()
    assert seeded_subset(4, 10, seed=0).tolist() == seeded_subset(4, None, seed=0).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="per_head_samples"):
        seeded_subset(4, 0, seed=0, what="explain.per_head_samples")


def test_per_head_cells_of_a_subset_equal_the_study_run_on_that_subset_alone():
    rng = np.random.default_rng(1)
    attn = _attention(rng, 8)
    importance = {"blank_out": [rng.random(a.shape[-1]) for a in attn]}
    maps = explain_samples(attn, methods=resolve(["raw", "flow"]), rows="max", per_head=True)
    chosen = seeded_subset(8, 3, seed=0)
    heads = {k: [maps[k][i] for i in chosen] for k in ("raw_heads", "flow_heads")}
    sub_importance = {k: [v[i] for i in chosen] for k, v in importance.items()}
    common = dict(methods=["raw", "flow"], task="t", settings=SETTINGS, n_boot=0)
    got = study_frame(maps, importance, heads=(heads, sub_importance), **common)
    alone = study_frame({k: [v[i] for i in chosen] for k, v in maps.items()}, sub_importance, **common)
    per_head = lambda f: f[f["head"].notna()].reset_index(drop=True)  # noqa: E731
    assert per_head(got)[["method", "layer", "head", "mean", "n"]].equals(
        per_head(alone)[["method", "layer", "head", "mean", "n"]]
    )
    assert (per_head(got)["n"] == 3).all()
    everything = study_frame(maps, importance, **common)  # the all-heads cells: every sample
    main = lambda f: f[f["head"].isna()].reset_index(drop=True)  # noqa: E731
    assert main(got).equals(main(everything))


def test_align_ids_subset_finds_each_id_and_names_a_missing_one():
    assert align_ids([10, 11, 12, 13], [13, 11], what="imp", against="heads", subset=True).tolist() == [3, 1]
    with pytest.raises(ArtifactError, match=r"imp: lacks samples of heads \(\[99\]\)"):
        align_ids([10, 11], [11, 99], what="imp", against="heads", subset=True)


def test_load_head_maps_joins_the_subset_to_the_importance_by_sample_id(tmp_path):
    from attnflow.explanation_file import load_head_maps, save_study_maps

    assert load_head_maps(tmp_path / "none.safetensors", [1, 2], {}, against="imp") is None
    heads = {"raw_heads": [np.full((1, 2, 3), 7.0), np.full((1, 2, 2), 5.0)]}
    save_study_maps(tmp_path / "heads.safetensors", heads, [30, 10])
    importance = {"blank_out": [np.zeros(2), np.ones(4), np.full(3, 2.0)]}  # samples 10, 20, 30
    maps, imp = load_head_maps(tmp_path / "heads.safetensors", [10, 20, 30], importance, against="imp")
    assert [a.shape for a in maps["raw_heads"]] == [(1, 2, 3), (1, 2, 2)]
    assert [v.tolist() for v in imp["blank_out"]] == [[2.0, 2.0, 2.0], [0.0, 0.0]]
    with pytest.raises(ArtifactError, match="lacks samples"):
        load_head_maps(tmp_path / "heads.safetensors", [10, 20], importance, against="imp")
