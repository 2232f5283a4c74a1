"""scripts/determinism.py: the digests, differences and verdicts it records, the small prepared
folder it trains on, and what it says when the prepared data is absent."""

from __future__ import annotations

import doctest
import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("determinism", ROOT / "scripts" / "determinism.py")
det = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("determinism", det)
_spec.loader.exec_module(det)


def test_the_docstring_examples_hold():
    result = doctest.testmod(det)
    assert result.attempted >= 6 and result.failed == 0


def test_the_digest_sees_one_ulp_a_dtype_and_a_shape():
    w = torch.tensor([0.75, 0.25])
    base = det.state_digest({"w": w})
    ulp = w.clone()
    ulp[0] = torch.nextafter(torch.tensor(0.75), torch.tensor(1.0))
    assert det.state_digest({"w": ulp}) != base
    assert det.state_digest({"w": w.double()}) != base
    assert det.state_digest({"w": w.reshape(2, 1)}) != base
    assert det.state_digest({"v": w}) != base  # the name is hashed too


def test_rounding_to_float32_absorbs_a_float64_difference_below_its_resolution():
    a = torch.tensor([0.75, 0.25], dtype=torch.float64)
    b = a + 2.0**-40  # far below float32's spacing at 0.25 (2^-25)
    assert det.state_digest({"w": a}) != det.state_digest({"w": b})
    assert det.state_digest({"w": a}, as_float32=True) == det.state_digest({"w": b}, as_float32=True)
    c = a + 2.0**-20  # above it
    assert det.state_digest({"w": a}, as_float32=True) != det.state_digest({"w": c}, as_float32=True)


def test_max_abs_diff_takes_the_largest_over_tensors_and_needs_the_same_names():
    a = {"x": torch.tensor([1.0, 2.0]), "y": torch.tensor([[0.5]])}
    b = {"x": torch.tensor([1.0, 2.25]), "y": torch.tensor([[0.0]])}
    assert det.max_abs_diff(a, b) == 0.5  # |0.5 - 0| beats |2 - 2.25|
    with pytest.raises(ValueError, match="different tensors"):
        det.max_abs_diff(a, {"x": a["x"]})


def test_first_difference_is_the_first_unequal_step():
    assert det.first_difference([0.5, 0.25, 0.125], [0.5, 0.25, 0.125]) is None
    assert det.first_difference([0.5, 0.25, 0.125], [0.5, 0.3, 0.125]) == 1
    assert det.first_difference([0.5, 0.25], [0.5, 0.25, 0.1]) == 2  # a step missing


def test_each_setting_clears_every_isa_variable_and_sets_its_pin_on_one_thread():
    ambient = {"PATH": "/bin", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    native = det.setting_env("native", ambient)
    assert not set(det.ISA_VARIABLES) & set(native) and native["OMP_NUM_THREADS"] == "1"
    base = det.setting_env("baseline", ambient)
    assert (base["ATEN_CPU_CAPABILITY"], base["MKL_CBWR"], base["ONEDNN_MAX_CPU_ISA"]) == (
        "default", "COMPATIBLE", "SSE41")  # fmt: skip
    assert "MKL_ENABLE_INSTRUCTIONS" not in base


def _setting(dtype, pin, digest, losses, wall=1.0):
    return {"dtype": dtype, "pin": pin, "digest": digest, "digest_float32": digest[:1], "losses": losses,
            "wall_s": wall}  # fmt: skip


def test_compare_measures_every_setting_against_the_native_one_of_its_dtype():
    settings = [
        _setting("float32", "native", "aa", [0.5, 0.25]),
        _setting("float32", "avx2", "ab", [0.5, 0.3]),
        _setting("float64", "native", "cc", [0.5, 0.25]),
        _setting("float64", "avx2", "cc", [0.5, 0.25]),
    ]
    one = {"w": torch.tensor([1.0])}
    weights = {("float32", "native"): one, ("float32", "avx2"): {"w": torch.tensor([1.5])},
               ("float64", "native"): one, ("float64", "avx2"): one}  # fmt: skip
    det.compare(settings, weights)
    f32_avx2, f64_avx2 = settings[1], settings[3]
    assert (f32_avx2["max_abs_diff"], f32_avx2["first_loss_difference"], f32_avx2["same_digest"]) == (
        0.5,
        1,
        False,
    )
    assert f32_avx2["same_digest_float32"]  # "a" == "a": the first hex digit stands in for a rounded digest
    assert (f64_avx2["max_abs_diff"], f64_avx2["first_loss_difference"], f64_avx2["same_digest"]) == (
        0.0,
        None,
        True,
    )
    verdict = det.answer(settings)
    assert not verdict["float32"]["identical_across_pins"] and verdict["float64"]["identical_across_pins"]
    assert verdict["float32"]["max_abs_diff"] == 0.5 and verdict["float64_cost_ratio"] == 1.0


def test_the_default_file_names_the_capability():
    assert det.default_out("AVX512") == ROOT / "reports" / "machines" / "determinism-avx512.json"


def test_the_small_folder_keeps_the_vocabulary_and_a_seeded_subset_of_each_split(tmp_path):
    source = tmp_path / "prepared"
    source.mkdir()
    (source / "vocab.json").write_text(json.dumps({"words": ["<pad>"]}))
    for split, n in {"train": 50, "val": 8, "test": 8, "attractors": 30}.items():
        pd.DataFrame({"text": [f"w{i}" for i in range(n)], "label": [i % 2 for i in range(n)]}).to_parquet(
            source / f"{split}.parquet"
        )
    out = det.small_prepared(source, tmp_path / "small", train_items=10, eval_items=5, seed=0)
    assert (out / "vocab.json").read_text() == (source / "vocab.json").read_text()
    sizes = {s: len(pd.read_parquet(out / f"{s}.parquet")) for s in det.SPLITS}
    assert sizes == {"train": 10, "val": 5, "test": 5, "attractors": 5}
    again = det.small_prepared(source, tmp_path / "again", train_items=10, eval_items=5, seed=0)
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "train.parquet"), pd.read_parquet(again / "train.parquet")
    )


def test_without_prepared_data_it_names_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(det, "prepared_folder", lambda: (tmp_path / "nowhere", {}))
    with pytest.raises(SystemExit, match=r"dvc repro prepare@agreement"):
        det.main(["--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def _prepared_from_a_tiny_mirror(root: Path, monkeypatch) -> Path:
    """The agreement task's own download + prepare, run on the e2e test's tiny mirror: the prepared
    folder a clean checkout (CI) lacks, in the layout `dvc repro prepare@agreement` writes."""
    from omegaconf import OmegaConf

    from attnflow.data import download as dl
    from attnflow.tasks import get_task
    from tests.e2e.test_study_e2e import _write_mirror

    monkeypatch.setattr(dl, "known_digests", dict)  # fixture files: digests recorded, not checked
    _, cfg = det.prepared_folder()
    spec, data = get_task(det.TASK), cfg["task"][det.TASK]["data"]
    dl.download(spec.dataset, root / "raw", urls=[], mirrors=[_write_mirror(root / "mirror")])
    spec.prepare(root / "raw", root / "prepared", OmegaConf.create(data), cfg["seed"])
    return root / "prepared"


@pytest.mark.slow
def test_one_setting_runs_end_to_end(tmp_path, monkeypatch):
    """One real setting (the study's model, 1 step): a digest per setting and a loss per step."""
    prepared = _prepared_from_a_tiny_mirror(tmp_path, monkeypatch)
    _, cfg = det.prepared_folder()
    monkeypatch.setattr(det, "prepared_folder", lambda: (prepared, cfg))
    out = tmp_path / "d.json"
    det.main(
        [
            "--out",
            str(out),
            "--dtypes",
            "float32",
            "--pins",
            "native",
            "--train-items",
            "128",
            "--epochs",
            "1",
        ]
    )
    got = json.loads(out.read_text())
    (setting,) = got["settings"]
    assert setting["steps"] == 1 and len(setting["losses"]) == 1 and len(setting["digest"]) == 64
    assert setting["same_digest"] and got["answer"]["float32"]["identical_across_pins"]
