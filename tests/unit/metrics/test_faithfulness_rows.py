"""The CLS-row reading of the task-row methods, by hand, beside the authors' SST-2 rule (max over
query rows); and the rule each ranking of the faithfulness tables is labelled with."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.attribution.faithfulness_rows import cls_row_maps, second_row_methods
from attnflow.explain.samples import explain_samples
from attnflow.methods import METHODS, resolve
from attnflow.metrics.faithfulness import at_cls, base_method, row_rule

# 3 tokens, 2 layers, 1 head, residual 0 (A = W); binary-exact weights.
A1 = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
A2 = np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
ATTN = np.stack([A1, A2])[:, None]  # (L=2, H=1, 3, 3)

# raw: layer l's row 0, or the column-wise max over the rows.
RAW_CLS = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
RAW_MAX = [[1.0, 0.5, 0.5], [0.5, 1.0, 1.0]]
# rollout: R1 = A1, R2 = A2 A1 = [[.75, .25, 0], [.5, .5, 0], [0, .5, .5]].
ROLLOUT_CLS = [[1.0, 0.0, 0.0], [0.75, 0.25, 0.0]]
ROLLOUT_MAX = [[1.0, 0.5, 0.5], [0.75, 0.5, 0.5]]
# flow, layer 1: one edge per pair, the rows of A1. Layer 2 from (2, 0): to input 0 through (1, 0)
# (min(.5, 1)) and (1, 1) (min(.5, .5)): 1; to input 1 through (1, 1): .5; to input 2: 0 ->
# [1, .5, 0] / 1.5. From (2, 1) (all through (1, 1)): [.5, .5, 0]; from (2, 2) (through (1, 2)): [0, .5, .5].
FLOW_CLS = [[1.0, 0.0, 0.0], [2 / 3, 1 / 3, 0.0]]
FLOW_MAX = [[1.0, 0.5, 0.5], [2 / 3, 0.5, 0.5]]
TOL = 1e-9  # the max-flow solver's float64 arithmetic


def test_cls_row_maps_read_row_0_where_the_max_rule_reads_the_column_max():
    records = resolve(["raw", "rollout", "flow"])
    short = ATTN[:, :, :2, :2] / ATTN[:, :, :2, :2].sum(-1, keepdims=True)  # a 2-token sample beside it
    at_cls_ = cls_row_maps([ATTN, short], records, residual=0.0)
    by_max = explain_samples([ATTN, short], methods=records, residual=0.0, rows="max")  # the SST-2 rule
    expected = {
        "raw": (RAW_CLS, RAW_MAX),
        "rollout": (ROLLOUT_CLS, ROLLOUT_MAX),
        "flow": (FLOW_CLS, FLOW_MAX),
    }
    assert set(at_cls_) == {"raw_at_cls", "rollout_at_cls", "flow_at_cls"}
    for name, (cls_map, max_map) in expected.items():
        np.testing.assert_allclose(at_cls_[at_cls(name)][0], cls_map, rtol=0, atol=TOL)
        np.testing.assert_allclose(by_max[name][0], max_map, rtol=0, atol=TOL)
        assert at_cls_[at_cls(name)][1].shape == (2, 2)  # each sample cut to its own tokens
    # the short sample: A1' = [[1, 0], [.5, .5]], A2' = [[.5, .5], [0, 1]]: raw's row 0 per layer
    np.testing.assert_allclose(at_cls_["raw_at_cls"][1], [[1.0, 0.0], [0.5, 0.5]], rtol=0, atol=TOL)


def test_cls_row_maps_apply_the_explain_stages_residual():
    # residual .5: A = .5 W + .5 I. A1'[0] = [1, 0, 0], A1'[1] = [.25, .75, 0], A2'[0] = [.75, .25, 0];
    # rollout's CLS row at layer 2 = A2'[0] A1' = .75 [1, 0, 0] + .25 [.25, .75, 0] = [.8125, .1875, 0].
    got = cls_row_maps([ATTN], resolve(["rollout"]), residual=0.5)["rollout_at_cls"][0]
    np.testing.assert_allclose(got, [[1.0, 0.0, 0.0], [0.8125, 0.1875, 0.0]], rtol=0, atol=TOL)


def test_only_task_row_methods_are_read_again_and_only_when_the_task_does_not_read_cls():
    records = resolve(["raw", "flow", "chefer", "chefer_lrp"])
    again, skipped = second_row_methods(records, "max")
    assert [r.name for r in again] == ["raw", "flow"] and skipped == {}
    assert second_row_methods(records, "cls") == ([], {})
    assert [r.name for r in second_row_methods(records, "mean")[0]] == ["raw", "flow"]
    # a task-row method that needs more than the attentions is named, not silently dropped
    again, skipped = second_row_methods(resolve(["raw", "alti"]), "max")
    assert [r.name for r in again] == ["raw"] and "value_outputs" in skipped["alti"]
    assert cls_row_maps([ATTN], []) == {}


@pytest.mark.parametrize(
    ("label", "task_rows", "rule"),
    [
        ("flow", "max", "max"),  # SST-2: the task's rule
        ("flow", "cls", "cls"),  # agreement
        ("flow_at_cls", "max", "cls"),
        ("chefer", "max", "cls"),  # class-specific: the classifier's row whatever the task's rule
        ("grad_sam", "mean", "cls"),
        ("blank_out", "max", "output"),  # a score of the prediction: no attention row
        ("integrated_gradients", "max", "output"),
        ("random", "max", "none"),
        ("blank_out_at_cls", "max", "output"),  # only an attention method has a CLS-row reading
    ],
)
def test_row_rule_of_every_kind_of_ranking(label, task_rows, rule):
    map_rows = {name: r.rows for name, r in METHODS.items() if r.kind == "attention"}
    assert row_rule(label, task_rows=task_rows, map_rows=map_rows) == rule


def test_a_label_at_cls_names_its_method_and_is_a_valid_mlflow_metric_name():
    from attnflow.tracking.names import (
        metric_name,
    )  # what MLflow accepts; a sweep's rebuild logs labels as they are

    assert base_method(at_cls("rollout")) == "rollout" and base_method("rollout") == "rollout"
    assert metric_name(f"sst2/faithfulness/{at_cls('flow')}/comprehensiveness").endswith(
        at_cls("flow") + "/comprehensiveness"
    )
