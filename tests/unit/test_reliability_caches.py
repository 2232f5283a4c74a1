"""Reliability round 5 (issue 57), caches: restore only what was checked.

The training stage cache restored a truncated model and an entry filed under another key;
``scripts/adopt_trainings.py`` (archived since) stored a 200-byte model as a valid training; a damaged packaged
weight (the MiniLM delta, the converted SmolLM2) loaded with a traceback that did not name the file,
or, altered, without a word; two first uses of the SmolLM2 conversion at once crashed one of them
(``Directory not empty``). Now every entry and packaged weight carries its key and sha256, a restore
checks both and refuses in one line naming the file, and one process converts while the others wait.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from attnflow import stage_cache
from attnflow.stage_cache import ENTRY_FILE, CacheEntryError, restore, store

ROOT = Path(__file__).resolve().parents[2]


def _outputs(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "run" / "models" / "agreement"
    (model / "model").mkdir(parents=True)
    (model / "model" / "model.safetensors").write_bytes(b"\x08" * 4096)
    (model / "metrics.json").write_text('{"accuracy": 0.9}')
    timing = tmp_path / "run" / "timing.json"
    timing.write_text('{"train_wall_s": 3.0}')
    return {"model": model, "timing": timing}


def _targets(tmp_path: Path) -> dict[str, Path]:
    """A job's targets, holding an earlier run's files that a refused restore must leave alone."""
    job = tmp_path / "job"
    (job / "models" / "agreement").mkdir(parents=True, exist_ok=True)
    (job / "models" / "agreement" / "last.ckpt").write_text("earlier")
    (job / "timing.json").write_text("earlier timing")
    return {"model": job / "models" / "agreement", "timing": job / "timing.json"}


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_an_entry_records_its_key_and_the_sha256_of_every_file(tmp_path):
    entry = store(tmp_path / "cache", "k1", _outputs(tmp_path), {"commit": "abc"})
    record = json.loads((entry / ENTRY_FILE).read_text())
    assert record["key"] == "k1"
    assert sorted(record["files"]) == ["model/metrics.json", "model/model/model.safetensors", "timing"]
    assert record["files"]["timing"] == stage_cache.digests(entry / "timing")[""]


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (
            lambda e: (e / "model" / "model" / "model.safetensors").write_bytes(b"\x08" * 200),
            "model.safetensors",
        ),
        (lambda e: (e / "timing").write_text('{"train_wall_s": 9.0}'), "timing"),
        (lambda e: (e / "model" / "model" / "model.safetensors").unlink(), "model.safetensors: is missing"),
        (lambda e: (e / "model" / "extra.bin").write_bytes(b"x"), "extra.bin: is not in its record"),
    ],
    ids=["truncated", "altered", "removed", "added"],
)
def test_a_damaged_entry_is_refused_naming_the_file_and_nothing_is_restored(tmp_path, damage, named):
    cache = tmp_path / "cache"
    entry = store(cache, "k1", _outputs(tmp_path), {})
    damage(entry)
    targets = _targets(tmp_path)
    before = _tree(tmp_path / "job")
    with pytest.raises(CacheEntryError) as refused:
        restore(cache, "k1", targets)
    assert named in str(refused.value) and str(entry) in str(refused.value) and "\n" not in str(refused.value)
    assert _tree(tmp_path / "job") == before
    assert not [p for p in (tmp_path / "job").rglob(".*")]  # no staged copy left


def test_an_entry_filed_under_another_key_is_refused(tmp_path):
    import shutil

    cache = tmp_path / "cache"
    entry = store(cache, "k1", _outputs(tmp_path), {})
    shutil.copytree(entry, cache / "k2")
    with pytest.raises(
        CacheEntryError, match=r"k2/entry\.json: the entry is filed under k2 but records key k1"
    ):
        restore(cache, "k2", _targets(tmp_path))


def test_an_entry_without_checksums_or_with_a_damaged_record_is_refused(tmp_path):
    cache = tmp_path / "cache"
    entry = store(cache, "k1", _outputs(tmp_path), {})
    record = json.loads((entry / ENTRY_FILE).read_text())
    del record["files"]  # as older code stored it
    (entry / ENTRY_FILE).write_text(json.dumps(record))
    with pytest.raises(CacheEntryError, match="no checksums"):
        restore(cache, "k1", _targets(tmp_path))
    (entry / ENTRY_FILE).write_text('{"key": "k1", "fi')
    with pytest.raises(CacheEntryError, match=r"entry\.json: unreadable stage-cache record"):
        restore(cache, "k1", _targets(tmp_path))


def test_a_whole_entry_still_restores_and_replace_renews_a_refused_one(tmp_path):
    cache = tmp_path / "cache"
    entry = store(cache, "k1", _outputs(tmp_path), {"commit": "first"})
    targets = _targets(tmp_path)
    assert restore(cache, "k1", targets)["commit"] == "first"
    assert (targets["model"] / "model" / "model.safetensors").read_bytes() == b"\x08" * 4096
    (entry / "timing").write_text("damaged")
    store(cache, "k1", _outputs(tmp_path / "again"), {"commit": "second"}, replace=True)
    assert restore(cache, "k1", targets)["commit"] == "second"
    assert [p.name for p in cache.iterdir()] == ["k1"]  # the refused entry is gone, nothing aside


def test_a_sweep_job_trains_instead_of_taking_a_damaged_entry(tmp_path, monkeypatch, capsys):
    from attnflow.paths import StudyPaths
    from pipelines import _config, study

    runs = []

    def fake_train(cfg, task):
        model = StudyPaths.from_config(cfg.paths).model_dir(task)
        (model / "model").mkdir(parents=True, exist_ok=True)
        (model / "model" / "model.safetensors").write_bytes(b"\x01" * 64)
        for name, target in study.train.REPORTED.items():
            (model / name).write_text(name)
            StudyPaths.from_config(cfg.paths).task_reports(task).mkdir(parents=True, exist_ok=True)
            (StudyPaths.from_config(cfg.paths).task_reports(task) / target).write_text(name)
        StudyPaths.from_config(cfg.paths).train_timing(task).write_text('{"train_wall_s": 1.0}')
        runs.append(task)

    monkeypatch.setattr(study.train, "run", fake_train)
    monkeypatch.chdir(tmp_path)
    cfg = _config.compose(["tracking.enabled=false"])
    prepared = StudyPaths.from_config(cfg.paths).prepared_data("agreement")
    prepared.mkdir(parents=True)
    (prepared / "train.parquet").write_bytes(b"rows")
    cache = tmp_path / "cache"
    assert study.train_or_reuse(cfg, "agreement", cache, commit="a")["reused"] is False
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    (entry / "model" / "model" / "model.safetensors").write_bytes(b"\x01" * 10)  # truncated
    taken = study.train_or_reuse(cfg, "agreement", cache, commit="b")
    assert taken["reused"] is False and runs == ["agreement", "agreement"]
    assert "stage cache entry refused" in capsys.readouterr().err
    assert study.train_or_reuse(cfg, "agreement", cache, commit="c") == {**taken, "reused": True}


# --- the packaged MiniLM delta ---------------------------------------------------------------------


def test_the_packaged_delta_matches_its_shipped_checksum():
    from attnflow.io import read_json, sha256_file
    from attnflow.models.minilm_sst2 import CHECKSUM, WEIGHTS, verify_weights

    record = read_json(CHECKSUM)
    assert record["file"] == WEIGHTS.name and record["name"] == "minilm-sst2"
    assert record["sha256"] == sha256_file(WEIGHTS) and record["bytes"] == WEIGHTS.stat().st_size
    verify_weights()


def _packaged_copy(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the packaged delta and its record, put in place of the packaged one."""
    import shutil

    from attnflow.models import minilm_sst2

    weights = tmp_path / "weights" / minilm_sst2.WEIGHTS.name
    weights.parent.mkdir()
    shutil.copyfile(minilm_sst2.WEIGHTS, weights)
    shutil.copyfile(minilm_sst2.CHECKSUM, minilm_sst2.checksum_file(weights))
    monkeypatch.setattr(minilm_sst2, "WEIGHTS", weights)
    return weights


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda b: b[: len(b) // 2], "truncated or altered"),
        (lambda b: b[:-9] + bytes([b[-9] ^ 1]) + b[-8:], "sha256 differs"),  # one bit, same size
    ],
    ids=["truncated", "one-bit"],
)
def test_a_damaged_delta_is_refused_in_one_line_naming_it_before_any_load(
    tmp_path, monkeypatch, damage, said
):
    from attnflow.models import minilm_sst2

    weights = _packaged_copy(tmp_path, monkeypatch)
    weights.write_bytes(damage(weights.read_bytes()))
    monkeypatch.setattr(
        "attnflow.models.hf.resolve_pretrained", lambda *a, **k: pytest.fail("the base was loaded first")
    )
    with pytest.raises(minilm_sst2.WeightsError) as refused:
        minilm_sst2.load_minilm_sst2(weights=weights)
    assert str(refused.value).startswith(f"{weights}: ") and said in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(minilm_sst2.WeightsError):
        minilm_sst2.read_delta()  # the path every loader takes (attnflow.models.hf too)


def test_a_delta_without_its_record_or_with_another_key_is_refused(tmp_path, monkeypatch):
    from attnflow.models import minilm_sst2

    weights = _packaged_copy(tmp_path, monkeypatch)
    record = minilm_sst2.checksum_file(weights)
    record.write_text(record.read_text().replace('"minilm-sst2"', '"other-model"'))
    with pytest.raises(minilm_sst2.WeightsError, match=r"records .*other-model"):
        minilm_sst2.read_delta()
    record.unlink()
    with pytest.raises(minilm_sst2.WeightsError, match="no checksum record"):
        minilm_sst2.read_delta()


def test_an_unreadable_delta_of_its_own_is_named(tmp_path):
    """A delta given by path (a training script's) with a matching record, whose bytes are no safetensors."""
    from attnflow.io import ArtifactError
    from attnflow.models import minilm_sst2

    weights = tmp_path / "mine.safetensors"
    weights.write_bytes(b"not a safetensors file")
    minilm_sst2.write_checksum(weights)
    with pytest.raises(ArtifactError, match=rf"^{weights}: unreadable SST-2 weights"):
        minilm_sst2.read_delta(weights)
    with pytest.raises(ArtifactError, match=rf"^{weights}: unreadable"):
        minilm_sst2.read_metadata(weights)


# --- the converted SmolLM2 -----------------------------------------------------------------------


class _Saver:
    """A stand-in for the model or tokenizer `_dequantise` returns: writes a small file."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data

    def save_pretrained(self, folder) -> None:
        (Path(folder) / self.name).write_bytes(self.data)


@pytest.fixture()
def tiny_conversion(tmp_path, monkeypatch):
    """The SmolLM2 conversion with a tiny GGUF stand-in and a slow stand-in de-quantiser (0.5 s)
    that counts its calls; the real 135M model is for the ``lm`` tier."""
    from attnflow.models import smollm2

    gguf = tmp_path / "pkg" / smollm2.SMOLLM2_GGUF
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF tiny stand-in")
    calls = []

    def dequantise(path):
        calls.append(path)
        time.sleep(0.5)  # long enough for a second caller to arrive mid-way
        return _Saver("model.safetensors", b"\x00" * 256), _Saver("tokenizer.json", b"{}")

    monkeypatch.setattr(smollm2, "packaged_gguf", lambda: gguf)
    monkeypatch.setattr(smollm2, "_dequantise", dequantise)
    return smollm2, tmp_path / "cache", calls


def test_two_first_uses_at_once_convert_once_and_both_get_the_folder(tiny_conversion):
    smollm2, cache, calls = tiny_conversion
    got, errors = [], []

    def use():
        try:
            got.append(smollm2.smollm2_dir(cache))
        except Exception as exc:  # the old code: OSError "Directory not empty" in one of them
            errors.append(exc)

    threads = [threading.Thread(target=use) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == [] and len(got) == 3 and len(set(got)) == 1
    assert len(calls) == 1  # one converted; the others waited, then used its folder
    folder = got[0]
    assert sorted(p.name for p in folder.iterdir()) == [
        "attnflow_source.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert not [p for p in cache.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")]


def test_two_processes_at_once_convert_once(tiny_conversion):
    import multiprocessing

    smollm2, cache, calls = tiny_conversion
    context = multiprocessing.get_context("fork")  # the children keep the stand-ins
    done = context.Queue()

    def use():
        smollm2.smollm2_dir(cache)
        done.put(len(calls))

    children = [context.Process(target=use) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=30)
    assert [c.exitcode for c in children] == [0, 0]
    assert sorted(done.get(timeout=5) for _ in children) == [0, 1]  # one child converted, one waited


def test_a_converted_file_altered_later_is_refused_naming_it(tiny_conversion):
    smollm2, cache, calls = tiny_conversion
    folder = smollm2.smollm2_dir(cache)
    assert smollm2.smollm2_dir(cache) == folder and len(calls) == 1  # checked, not converted again
    time.sleep(0.05)  # file times tick in milliseconds: the alteration is seen as a rewrite
    (folder / "model.safetensors").write_bytes(b"\x01" * 256)  # same size, other bytes
    with pytest.raises(smollm2.ConvertedModelError) as refused:
        smollm2.smollm2_dir(cache)
    assert str(refused.value).startswith(f"{folder / 'model.safetensors'}: differs from its sha256")
    (folder / "model.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(smollm2.ConvertedModelError, match=r"model\.safetensors: differs"):
        smollm2.smollm2_dir(cache)


def test_a_folder_converted_by_older_code_is_converted_again(tiny_conversion):
    smollm2, cache, calls = tiny_conversion
    folder = smollm2.smollm2_dir(cache)
    record = json.loads((folder / smollm2.SOURCE_FILE).read_text())
    del record["files"]  # what the earlier code recorded
    (folder / smollm2.SOURCE_FILE).write_text(json.dumps(record))
    assert smollm2.smollm2_dir(cache) == folder and len(calls) == 2
    assert "files" in json.loads((folder / smollm2.SOURCE_FILE).read_text())


def test_a_failed_reconversion_keeps_the_earlier_folder(tiny_conversion, monkeypatch):
    smollm2, cache, _ = tiny_conversion
    folder = smollm2.smollm2_dir(cache)
    before = _tree(folder)

    def fails(path):
        raise RuntimeError("de-quantising failed")

    monkeypatch.setattr(smollm2, "_dequantise", fails)
    with pytest.raises(RuntimeError):
        smollm2.convert_gguf(smollm2.packaged_gguf(), folder, overwrite=True)
    assert _tree(folder) == before


def test_an_exported_hf_model_with_truncated_weights_is_named_in_one_line(tmp_path):
    from attnflow.models import HFClassifier, HFEncoder, load_classifier, save_classifier
    from attnflow.models.hf import load_pretrained_tokenizer
    from tests._tiny import make_tiny_bert

    bert = make_tiny_bert(tmp_path / "bert", words=["good", "bad"])
    model = tmp_path / "model"
    save_classifier(
        HFClassifier.from_pretrained(str(bert)), HFEncoder(load_pretrained_tokenizer(str(bert))), model
    )
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises((ValueError, FileNotFoundError)) as refused:
        load_classifier(model)
    assert str(refused.value).startswith(f"{model}: cannot load") and "\n" not in str(refused.value)
