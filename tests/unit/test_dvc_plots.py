"""`dvc plots show` draws the committed study's per-layer and faithfulness curves (dvc.yaml plots)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_dvc_plots_show_has_the_per_layer_and_the_faithfulness_curves_of_each_task():
    pytest.importorskip("dvc", reason="the study's [study] extra (requirements.txt) brings dvc")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    out = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "--json"], cwd=ROOT, capture_output=True, text=True, env=env,
                         timeout=120, check=True)  # fmt: skip
    shown = json.loads(out.stdout)["data"]
    for task in ("agreement", "sst2"):
        layers = shown[f"reports/{task}/curves/blank_out.csv"][0]["content"]["data"]["values"]
        assert {int(v["layer"]) for v in layers} == set(range(1, 7))  # one point per layer, L1..L6
        morf = shown[f"reports/{task}/faithfulness_curves/positive.csv"][0]["content"]["data"]["values"]
        assert {float(v["fraction"]) for v in morf} >= {0.0, 1.0}
