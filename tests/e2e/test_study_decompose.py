"""The decompose stage on the tiny study: the norm- and decomposition-based methods' rows at every
layer for the study's samples, correlated per layer with blank-out and input gradients as the
correlate stage does, the methods not defined for a task's model named with why, and the report's
section beside raw attention, rollout and flow."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from attnflow.attribution.comparators import DECOMPOSITION
from attnflow.compare.layers import SKIPPED, TABLE, decomposition_maps
from attnflow.io import load_aligned
from attnflow.metrics.tables import configured
from attnflow.models import load_classifier
from attnflow.paths import StudyPaths


def test_the_decomposition_methods_are_correlated_per_layer_and_reported(tiny_study):
    from pipelines import (
        attribute,
        capture,
        correlate,
        decompose,
        download,
        explain,
        faithfulness,
        prepare,
        report,
        train,
    )

    root, cfg = tiny_study
    paths = StudyPaths.from_config(cfg.paths, root=root)
    for task in ("agreement", "sst2"):
        for stage in (
            download,
            prepare,
            train,
            capture,
            explain,
            attribute,
            correlate,
            faithfulness,
            decompose,
        ):
            stage.run(cfg, task)

    table = pd.read_parquet(paths.task_reports("sst2") / TABLE)
    cells = configured(table)
    assert set(cells["method"]) == set(DECOMPOSITION)  # a BERT-type encoder: every method is defined
    assert set(cells["layer"]) == {1, 2} and set(cells["importance"]) == {"blank_out", "input_gradients"}
    assert (cells["n"] == 12).all() and cells["mean"].between(-1, 1).all()
    skipped = json.loads((paths.task_reports("agreement") / SKIPPED).read_text())["skipped"]
    assert set(skipped) == set(DECOMPOSITION)  # the agreement model is no Hugging Face model
    assert all("Hugging Face" in why for why in skipped.values())

    # the maps of a batch are those of each sample alone (padding changes nothing)
    samples = pd.read_parquet(paths.samples("sst2"))
    model, encoder = load_classifier(paths.model("sst2"))
    ids = samples["input_ids"].tolist()
    batched, _ = decomposition_maps(
        model, ids, rows="max", pad_id=encoder.pad_id, methods=["alti", "decompx"]
    )
    alone, _ = decomposition_maps(
        model, ids, rows="max", pad_id=encoder.pad_id, methods=["alti", "decompx"], batch_size=1
    )
    for method in ("alti", "decompx"):
        for a, b, n in zip(batched[method], alone[method], samples["length"], strict=True):
            assert a.shape == (2, n)
            np.testing.assert_allclose(a, b, atol=1e-6)
    # a layer's mean is the mean of the per-sample Spearman correlations (the config's formula: the
    # authors' dense ranks; CLS ranked or not as the config says; a constant vector scores 0)
    from scipy.stats import rankdata

    def dense_noties(a, b):
        d = rankdata(a, method="dense") - rankdata(b, method="dense")
        return 1 - 6 * (d**2).sum() / (len(a) * (len(a) ** 2 - 1))

    assert cfg.correlate.spearman == "dense_noties" and cfg.correlate.undefined == "zero"
    start = 0 if cfg.correlate.include_cls.input_gradients else 1
    importance = load_aligned(paths.importance("sst2"), samples["sample_id"], against="samples")
    rho = [
        0.0
        if np.ptp(m[-1][start:]) == 0 or np.ptp(g[start:]) == 0
        else dense_noties(m[-1][start:], g[start:])
        for m, g in zip(batched["alti"], importance["input_gradients"], strict=True)
    ]
    got = cells[
        (cells["method"] == "alti") & (cells["layer"] == 2) & (cells["importance"] == "input_gradients")
    ]
    np.testing.assert_allclose(got["mean"].iloc[0], np.mean(np.nan_to_num(rho)), atol=1e-9)

    report.run(cfg)
    text = (paths.reports / "report.md").read_text()
    assert "## Tables 1-3 with the norm- and decomposition-based methods" in text
    assert "sst2: Spearman with blank-out, per layer" in text and "agreement: alti not run:" in text
