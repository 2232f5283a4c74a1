"""prepare_agreement / prepare_sst2: parsing errors, split rules, determinism, real-mirror counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from attnflow.data.download import download
from attnflow.data.lines import DataFormatError
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
    lines = lambda lab, k, n: "".join(f"{lab}\tword{k} the {lab} thing {i}\n" for i in range(n))  # noqa: E731
    return _linzen(
        raw,
        {
            "numpred.val": lines("VBZ", 0, 20) + lines("VBP", 0, 10),
            "numpred.test.1": lines("VBZ", 1, 10) + lines("VBP", 1, 20),
            "numpred.test.2": lines("VBP", 2, 10) + "VBP\tword2 the VBP thing 0\n",  # one duplicate
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
        prepare_agreement(raw, out, source="pooled")
    assert not out.exists()


def test_pooled_split_is_stratified_deduplicated_and_keeps_columns(tmp_path):
    summary = prepare_agreement(_pooled_fixture(tmp_path / "raw"), tmp_path / "out", source="pooled", seed=1)
    assert summary["split_mode"] == "pooled"
    assert summary["duplicates_removed"] == 1 and summary["leaks_dropped"] == 0
    frames = {s: pd.read_parquet(tmp_path / "out" / f"{s}.parquet") for s in ("train", "val", "test")}
    assert sum(len(f) for f in frames.values()) == 30 + 30 + 11 - 1
    assert list(frames["train"].columns) == [
        "text",
        "label",
        "n_attractors",
        "subject_index",
        "distance",
        "source",
    ]
    attractors = pd.read_parquet(tmp_path / "out" / "attractors.parquet")  # the test items with a known count
    assert (
        len(attractors) == (frames["test"].n_attractors >= 1).sum() and (attractors.n_attractors >= 1).all()
    )
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
        prepare_agreement(raw, tmp_path / run, source="pooled", seed=7)
    prepare_agreement(raw, tmp_path / "c", source="pooled", seed=8)
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
    summary = prepare_agreement(raw, tmp_path / "out", source="pooled")
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
    a = prepare_agreement(
        tmp_path / "raw" / "agreement", tmp_path / "agreement", source="pooled", dedupe=False
    )
    total = sum(a[s]["n"] for s in ("train", "val", "test")) + a["leaks_dropped"]
    assert total == 15_772 + 52_599 + 9_380 + 2_051 + 561 + 159
    # the natural sample: 50k / 1k / 4k (MANIFEST), training items sharing a prefix with an
    # evaluation set dropped (at least the 2,027 whose prefix is in numpred.test.1-5)
    n = prepare_agreement(tmp_path / "raw" / "agreement", tmp_path / "natural")
    assert (n["val"]["n"], n["test"]["n"], n["train"]["n"] + n["leaks_dropped"]) == (1_000, 4_000, 50_000)
    assert n["leaks_dropped"] >= 2_027 and n["split_mode"] == "wiki_sample"
    assert (n["test"]["singular"], n["test"]["plural"]) == (2_700, 1_300)
    assert n["attractors"]["attractors"] == {"1": 52_599, "2": 9_380, "3": 2_051, "4": 561, "5": 159}
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
        prepare_agreement(raw, tmp_path / "out", source="pooled")


def test_bad_vocabulary_file_error_names_the_file(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps({"itos": ["the", "dog"]}))
    with pytest.raises(ValueError, match=rf"{path}: vocabulary must start with the specials"):
        Vocab.load(path)


# --- the natural-distribution formats, the authors' split and the leak rule (issue: replication) ---

WIKI_HEAD = "sentence\tsubj_idx\tverb_idx\tverb_pos\tverb\tinflected_verb\n"


def _natural_fixture(
    raw: Path, train: str, dev: str, test: str, attractors: str = "VBP\tthe keys to the cabinet\n"
) -> Path:
    folder = raw / "edinburgh_nlu_wiki"
    folder.mkdir(parents=True)
    for name, body in (("train", train), ("dev", dev), ("test", test)):
        (folder / f"wiki-{name}.txt").write_text(WIKI_HEAD + body)
    return _linzen(raw, {"numpred.test.1": attractors, "numpred.val": "VBZ\tthe dog\n"})


def test_wiki_line_is_cut_at_the_verb_index_with_subject_and_distance():
    # "the dogs near the house bark ." verb_idx 5 (0-based) -> prefix = the first five words
    from attnflow.data.linzen import read_wiki

    path = Path(__import__("tempfile").mkdtemp()) / "wiki-dev.txt"
    path.write_text(
        WIKI_HEAD + "the dogs near the house bark .\t1\t5\tVBP\tbark\tbarks\nit is\t0\t1\tVBZ\tis\tare\n"
    )
    df = read_wiki(path)
    assert df["text"].tolist() == ["the dogs near the house", "it"]
    assert df["label"].tolist() == [1, 0]
    assert df["subject_index"].tolist() == [1, 0] and df["distance"].tolist() == [4, 1]
    assert df["n_attractors"].tolist() == [-1, -1]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("the dog barks\t1\t2\tVBD\tbarks\tbark\n", "wiki-train.txt:2: unknown verb_pos 'VBD'"),
        (
            "the dog barks\t1\t7\tVBZ\tbarks\tbark\n",
            "wiki-train.txt:2: verb_idx 7 and subj_idx 1 do not fit a sentence of 3 words",
        ),
        ("the dog barks\t2\t1\tVBZ\tbarks\tbark\n", "wiki-train.txt:2: verb_idx 1 and subj_idx 2"),
        (
            "the dog barks\tone\t2\tVBZ\tbarks\tbark\n",
            "wiki-train.txt:2: subj_idx / verb_idx must be integers",
        ),
        ("the dog barks\t1\t2\tVBZ\n", "wiki-train.txt:2: expected 6 tab-separated fields"),
    ],
)
def test_malformed_wiki_line_names_file_and_line(tmp_path, line, message):
    raw = _natural_fixture(
        tmp_path / "raw",
        train=line,
        dev="a dog runs\t1\t2\tVBZ\truns\trun\n",
        test="a b c\t0\t1\tVBZ\tb\tc\n",
    )
    with pytest.raises(DataFormatError, match=message):
        prepare_agreement(raw, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_leak_rule_drops_and_counts_a_planted_duplicate_prefix(tmp_path):
    train = (
        "the dog barks\t1\t2\tVBZ\tbarks\tbark\n"  # prefix "the dog": also in test -> dropped
        "the cats sleep\t1\t2\tVBP\tsleep\tsleeps\n"  # kept
        "the keys to the cabinet are\t1\t5\tVBP\tare\tis\n"  # prefix in numpred.test.1 -> dropped
    )
    raw = _natural_fixture(
        tmp_path / "raw",
        train=train,
        dev="a dog runs\t1\t2\tVBZ\truns\trun\n",
        test="the dog is\t1\t2\tVBZ\tis\tare\n",
    )
    summary = prepare_agreement(raw, tmp_path / "out")
    assert summary["leaks_dropped"] == 2 and summary["split_mode"] == "wiki_sample"
    frames = {
        s: pd.read_parquet(tmp_path / "out" / f"{s}.parquet") for s in ("train", "val", "test", "attractors")
    }
    assert frames["train"]["text"].tolist() == ["the cats"]
    evaluation = set().union(*(set(frames[s]["text"]) for s in ("val", "test", "attractors")))
    assert not set(frames["train"]["text"]) & evaluation
    assert frames["attractors"]["n_attractors"].tolist() == [1]


def test_extra_training_files_join_natural_training_under_the_leak_rule(tmp_path):
    raw = _natural_fixture(
        tmp_path / "raw", train="the cats sleep\t1\t2\tVBP\tsleep\tsleeps\n",
        dev="a dog runs\t1\t2\tVBZ\truns\trun\n", test="the dog is\t1\t2\tVBZ\tis\tare\n",
    )  # fmt: skip
    summary = prepare_agreement(raw, tmp_path / "out", extra_train=["numpred.val"])  # "the dog": in test
    assert summary["train"]["n"] == 1 and summary["leaks_dropped"] == 1
    with pytest.raises(
        FileNotFoundError, match=r"numpred\.train: listed in task\.agreement\.data\.extra_train"
    ):
        prepare_agreement(raw, tmp_path / "out2", extra_train=["numpred.train"])


def test_authors_split_of_the_full_tsv_on_a_synthetic_file(tmp_path):
    import numpy as np

    from attnflow.data.linzen import read_linzen_tsv

    header = "sentence\torig_sentence\tverb_pos\tsubj_index\tverb_index\tn_diff_intervening\n"
    rows = [f"w{i} the dog{i} x barks .\t-\t{'VBZ' if i % 3 else 'VBP'}\t3\t5\t{i % 2}\n" for i in range(200)]
    raw = _linzen(tmp_path / "raw", {"numpred.test.1": "VBP\tzz top\n"})
    (raw / "agr_50_mostcommon_10K.tsv").write_text(header + "".join(rows))
    full = read_linzen_tsv(raw / "agr_50_mostcommon_10K.tsv")
    assert full["text"][7] == "w7 the dog7 x" and full["distance"][7] == 2 and full["n_attractors"][7] == 1
    summary = prepare_agreement(raw, tmp_path / "out")
    assert summary["split_mode"] == "authors_full_tsv"
    # the authors' builder: np.random.seed(42); np.random.shuffle(data); 10% / 1% / rest
    order = list(range(200))
    np.random.seed(42)  # noqa: NPY002 - the authors' legacy global-state call, reproduced
    np.random.shuffle(order)  # noqa: NPY002
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert train["text"].tolist() == [f"w{i} the dog{i} x" for i in order[:20]]
    assert (summary["val"]["n"], summary["test"]["n"]) == (2, 178)
    bad = raw / "agr_50_mostcommon_10K.tsv"
    bad.write_text(header + "w the dog x barks .\t-\tVBZ\t3\t9\t0\n")
    with pytest.raises(
        DataFormatError, match=r"agr_50_mostcommon_10K.tsv:2: verb_index 9 does not fit 6 words"
    ):
        read_linzen_tsv(bad)
