"""prepare_agreement / prepare_sst2: parsing errors, split rules, determinism, real-mirror counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from attnflow.data._lines import DataFormatError
from attnflow.data.download import download
from attnflow.data.linzen import SplitFractions, prepare_agreement
from attnflow.data.sst2 import prepare_sst2
from attnflow.data.vocab import Vocab
from attnflow.tasks import TASKS

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def _linzen(raw: Path, files: dict[str, str]) -> Path:
    folder = raw / "rnn_agr_simple"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return raw


def _pooled_fixture(raw: Path) -> Path:
    lines = lambda lab, k, n: "".join(f"{lab}\tword{k} the thing {i}\n" for i in range(n))  # noqa: E731
    return _linzen(
        raw,
        {
            "numpred.val": lines("VBZ", 0, 20) + lines("VBP", 0, 10),
            "numpred.test.1": lines("VBZ", 1, 10) + lines("VBP", 1, 20),
            "numpred.test.2": lines("VBP", 2, 10) + "VBP\tword2 the thing 0\n",  # one duplicate
        },
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("VBZ\tthe dog\nVBZ the cat\n", "numpred.val:2: expected 2 tab-separated fields"),
        ("VBZ\tthe dog\nVBD\tthe cat\n", "numpred.val:2: unknown label 'VBD'"),
        ("VBZ\tthe dog\nVBP\t   \n", "numpred.val:2: empty prefix"),
        (b"VBZ\tthe dog\nVBP\tthe caf\xe9\n", "numpred.val:2: not valid UTF-8"),
    ],
)
def test_malformed_line_names_file_and_line_and_writes_nothing(tmp_path, content, message):
    raw = _linzen(tmp_path / "raw", {"numpred.val": content})
    out = tmp_path / "out"
    with pytest.raises(DataFormatError, match=message):
        prepare_agreement(raw, out)
    assert not out.exists()


def test_pooled_split_is_stratified_deduplicated_and_keeps_columns(tmp_path):
    summary = prepare_agreement(_pooled_fixture(tmp_path / "raw"), tmp_path / "out", seed=1)
    assert summary["split_mode"] == "pooled"
    assert summary["duplicates_removed"] == 1
    frames = {s: pd.read_parquet(tmp_path / "out" / f"{s}.parquet") for s in ("train", "val", "test")}
    assert sum(len(f) for f in frames.values()) == 30 + 30 + 11 - 1
    assert list(frames["train"].columns) == ["text", "label", "n_attractors", "source"]
    # 80/10/10 of each (label, attractors) group: e.g. (VBZ, unknown) has 20 -> 16/2/2.
    train = frames["train"]
    assert ((train.label == 0) & (train.n_attractors == -1)).sum() == 16
    assert set(frames["test"].n_attractors) <= {-1, 1, 2}
    pairs = {s: set(zip(f.label, f.text, strict=True)) for s, f in frames.items()}
    assert not pairs["train"] & pairs["test"]
    vocab = Vocab.load(tmp_path / "out" / "vocab.json")
    assert vocab.itos[:4] == ("<pad>", "<unk>", "<cls>", "<mask>")


def test_same_seed_gives_identical_files_and_other_seed_differs(tmp_path):
    raw = _pooled_fixture(tmp_path / "raw")
    for run in ("a", "b"):
        prepare_agreement(raw, tmp_path / run, seed=7)
    prepare_agreement(raw, tmp_path / "c", seed=8)
    for split in ("train", "val", "test"):
        assert (tmp_path / "a" / f"{split}.parquet").read_bytes() == (
            tmp_path / "b" / f"{split}.parquet"
        ).read_bytes()
    assert not pd.read_parquet(tmp_path / "a" / "test.parquet").equals(
        pd.read_parquet(tmp_path / "c" / "test.parquet")
    )


def test_official_split_is_kept_and_attractors_carried_from_test_files(tmp_path):
    raw = _linzen(
        tmp_path / "raw",
        {
            "numpred.train": "VBZ\ta b\nVBP\tc d\n",
            "numpred.val": "VBZ\te f\n",
            "numpred.test": "VBZ\tg h\nVBP\ti j\n",
            "numpred.test.2": "VBP\ti j\n",
        },
    )
    summary = prepare_agreement(raw, tmp_path / "out")
    assert summary["split_mode"] == "official"
    test = pd.read_parquet(tmp_path / "out" / "test.parquet")
    assert test.set_index("text").n_attractors.to_dict() == {"g h": -1, "i j": 2}


def test_split_fractions_must_sum_to_one():
    with pytest.raises(ValueError, match="sum to 1"):
        SplitFractions(0.8, 0.1, 0.2)


def test_sst2_test_split_is_unlabelled_and_bad_label_named(tmp_path):
    glue = tmp_path / "raw" / "glue_SST-2"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_text("sentence\tlabel\ngood \t1\nbad \t0\n")
    (glue / "dev.tsv").write_text("sentence\tlabel\nfine \t1\n")
    (glue / "test.tsv").write_text("index\tsentence\n0\tokay\n")
    summary = prepare_sst2(tmp_path / "raw", tmp_path / "out")
    assert summary["test"] == {"n": 1, "length_words": summary["test"]["length_words"], "labelled": False}
    assert pd.read_parquet(tmp_path / "out" / "test.parquet").label.tolist() == [-1]
    assert pd.read_parquet(tmp_path / "out" / "train.parquet").text.tolist() == ["good", "bad"]
    (glue / "dev.tsv").write_text("sentence\tlabel\nfine \t2\n")
    with pytest.raises(DataFormatError, match=r"dev.tsv:2: unknown label '2'"):
        prepare_sst2(tmp_path / "raw", tmp_path / "out2")


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data (the offline mirror) is absent")
def test_real_mirror_counts_match_manifest(tmp_path):
    """MANIFEST.md: numpred.val 15,772 (10,763 VBZ); test.1-5 52,599/9,380/2,051/561/159; SST-2 67,349/872/1,821."""
    download(TASKS["agreement"].dataset, tmp_path / "raw" / "agreement", urls=[], mirrors=[SHARED])
    download(TASKS["sst2"].dataset, tmp_path / "raw" / "sst2", urls=[], mirrors=[SHARED])
    a = prepare_agreement(tmp_path / "raw" / "agreement", tmp_path / "agreement", dedupe=False)
    total = sum(a[s]["n"] for s in ("train", "val", "test"))
    assert total == 15_772 + 52_599 + 9_380 + 2_051 + 561 + 159
    assert sum(a[s]["singular"] for s in ("train", "val", "test")) == 10_763 + 21_983 + 2_195 + 305 + 38 + 13
    attractors = {k: sum(a[s]["attractors"].get(k, 0) for s in ("train", "val", "test")) for k in "12345"}
    assert attractors == {"1": 52_599, "2": 9_380, "3": 2_051, "4": 561, "5": 159}
    s = prepare_sst2(tmp_path / "raw" / "sst2", tmp_path / "sst2")
    assert (s["train"]["n"], s["train"]["positive"], s["dev"]["n"], s["dev"]["negative"], s["test"]["n"]) == (
        67_349,
        37_569,
        872,
        428,
        1_821,
    )
    summary = json.loads((tmp_path / "agreement" / "data_summary.json").read_text())
    assert summary["split_mode"] == "pooled"


def _glue(raw: Path, dev: str) -> Path:
    folder = raw / "glue_SST-2"
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_text("sentence\tlabel\na fine film \t1\n")
    (folder / "dev.tsv").write_text(dev)
    (folder / "test.tsv").write_text("index\tsentence\n0\ta film\n")
    return raw


@pytest.mark.parametrize("dev", ["", "sentence\tlabel\n"], ids=["zero bytes", "header only"])
def test_empty_sst2_split_is_an_error_at_prepare_naming_the_file(tmp_path, dev):
    with pytest.raises(DataFormatError, match=r"dev\.tsv: no data rows"):
        prepare_sst2(_glue(tmp_path / "raw", dev), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_empty_linzen_files_are_an_error_naming_the_file(tmp_path):
    raw = _linzen(tmp_path / "raw", {"numpred.val": "", **{f"numpred.test.{k}": "" for k in range(1, 6)}})
    with pytest.raises(DataFormatError, match=r"numpred\.test\.1: no data rows"):
        prepare_agreement(raw, tmp_path / "out")


def test_bad_vocabulary_file_error_names_the_file(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps({"itos": ["the", "dog"]}))
    with pytest.raises(ValueError, match=rf"{path}: vocabulary must start with the specials"):
        Vocab.load(path)
