"""attnflow.stage_cache: the key moves with every input byte, label, param and machine fact; entries
are whole or absent; a restore copies them in place of what was there."""

from __future__ import annotations

import json

import pytest

from attnflow import stage_cache
from attnflow.stage_cache import ENTRY_FILE, input_files, restore, stage_key, store

MACHINE = {"cpu": "X", "cpu_capability": "AVX2"}


def _inputs(tmp_path):
    code = tmp_path / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "pkg" / "a.py").write_text("A = 1\n")
    (code / "pkg" / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\0junk")
    data = tmp_path / "data.txt"
    data.write_text("one\ntwo\n")
    return {"src/pkg": code / "pkg", "prepared": data}


def test_folder_inputs_are_listed_by_label_without_interpreter_caches(tmp_path):
    files = input_files(_inputs(tmp_path))
    assert list(files) == ["prepared", "src/pkg/a.py"]


def test_a_missing_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"stage input prepared: .*nowhere"):
        input_files({"prepared": tmp_path / "nowhere"})


def test_the_key_is_equal_for_equal_runs_and_moves_with_each_part(tmp_path):
    inputs = _inputs(tmp_path)
    key = stage_key(inputs, {"seed": 0}, MACHINE)
    assert key == stage_key(dict(reversed(inputs.items())), {"seed": 0}, dict(reversed(MACHINE.items())))
    pyc = tmp_path / "code" / "pkg" / "__pycache__" / "a.cpython-312.pyc"
    pyc.write_bytes(b"other junk")  # not an input
    assert stage_key(inputs, {"seed": 0}, MACHINE) == key
    others = {
        stage_key(inputs, {"seed": 1}, MACHINE),
        stage_key(inputs, {"seed": 0}, {**MACHINE, "cpu_capability": "AVX512"}),
        stage_key({"src/other": inputs["src/pkg"], "prepared": inputs["prepared"]}, {"seed": 0}, MACHINE),
    }
    (tmp_path / "code" / "pkg" / "a.py").write_text("A = 2\n")
    others.add(stage_key(inputs, {"seed": 0}, MACHINE))
    (tmp_path / "code" / "pkg" / "b.py").write_text("")
    others.add(stage_key(inputs, {"seed": 0}, MACHINE))
    assert len(others) == 5 and key not in others


def _outputs(tmp_path):
    model = tmp_path / "run" / "models" / "agreement"
    (model / "model").mkdir(parents=True)
    (model / "model" / "weights.bin").write_bytes(b"\x01\x02")
    (model / "metrics.json").write_text('{"accuracy": 0.9}')
    timing = tmp_path / "run" / "timing.json"
    timing.write_text('{"train_wall_s": 3.0}')
    return {"model": model, "timing": timing}


def test_a_stored_run_is_restored_in_place_of_what_was_there(tmp_path):
    cache = tmp_path / "cache"
    entry = store(cache, "k1", _outputs(tmp_path), {"commit": "abc", "seed": 0})
    assert json.loads((entry / ENTRY_FILE).read_text())["commit"] == "abc"
    job = tmp_path / "job"
    stale = job / "models" / "agreement"
    stale.mkdir(parents=True)
    (stale / "last.ckpt").write_text("an interrupted run's file")
    targets = {"model": stale, "timing": job / "reports" / "timing.json"}
    record = restore(cache, "k1", targets)
    assert record["commit"] == "abc" and record["key"] == "k1"
    assert sorted(p.relative_to(stale).as_posix() for p in stale.rglob("*")) == [
        "metrics.json", "model", "model/weights.bin"
    ]  # fmt: skip
    assert (stale / "model" / "weights.bin").read_bytes() == b"\x01\x02"
    assert (job / "reports" / "timing.json").read_text() == '{"train_wall_s": 3.0}'
    assert [p.name for p in job.rglob(".*")] == []  # no temporary left


def test_no_entry_no_whole_entry_or_a_missing_name_restores_nothing(tmp_path):
    cache = tmp_path / "cache"
    target = tmp_path / "job" / "model"
    assert restore(cache, "absent", {"model": target}) is None
    (cache / "half" / "model").mkdir(parents=True)  # a writer killed before entry.json: not an entry
    assert restore(cache, "half", {"model": target}) is None
    store(cache, "k", {"model": _outputs(tmp_path)["model"]}, {})
    assert restore(cache, "k", {"model": target, "timing": tmp_path / "t.json"}) is None
    assert not target.exists() and not (tmp_path / "t.json").exists()


def test_the_first_store_of_a_key_is_kept(tmp_path):
    cache, outputs = tmp_path / "cache", _outputs(tmp_path)
    store(cache, "k", outputs, {"commit": "first"})
    (outputs["timing"]).write_text("changed")
    store(cache, "k", outputs, {"commit": "second"})
    assert json.loads((cache / "k" / ENTRY_FILE).read_text())["commit"] == "first"
    assert (cache / "k" / "timing").read_text() == '{"train_wall_s": 3.0}'


@pytest.mark.parametrize("name", ["../escape", "a/b", ENTRY_FILE, ".."])
def test_an_output_name_that_is_not_a_plain_name_is_refused_and_nothing_is_left(tmp_path, name):
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="not a plain file name"):
        store(cache, "k", {name: _outputs(tmp_path)["timing"]}, {})
    assert list(cache.iterdir()) == []


def test_a_missing_output_stores_nothing(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(FileNotFoundError, match=r"output model: .*nowhere"):
        store(cache, "k", {"timing": _outputs(tmp_path)["timing"], "model": tmp_path / "nowhere"}, {})
    assert list(cache.iterdir()) == []


def test_the_machine_names_what_a_training_depends_on():
    facts = stage_cache.machine()
    assert set(facts) == {"python", "packages", "cpu", "arch", "cpu_capability", "gpu"}
    assert facts["packages"]["torch"] and isinstance(facts["cpu_capability"], str)
