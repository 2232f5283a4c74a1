"""dvc.lock's record of a stage read without DVC: the md5 of a file and DVC 3's tree hash of a folder
(checked by hand and against dvc_data's own Tree), a stage execution's name and recorded deps."""

from __future__ import annotations

import hashlib
import json

import pytest

from attnflow.lockfile import lock_deps, lock_key, lock_md5, read_lock, unrecorded


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _folder(root):
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "b.py").write_bytes(b"b = 2\n")
    (root / "pkg" / "a.py").write_bytes(b"a = 1\n")
    (root / "pkg" / "sub" / "c.py").write_bytes(b"")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00compiled")  # .dvcignore'd
    return root / "pkg"


def test_a_file_is_the_md5_of_its_bytes_and_a_missing_path_is_none(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    assert lock_md5(tmp_path / "f") == "9dd4e461268c8034f5c8564e155c67a6" == _md5(b"x")
    assert lock_md5(tmp_path / "absent") is None


def test_a_folder_is_the_md5_of_its_sorted_file_list_by_hand(tmp_path):
    folder = _folder(tmp_path)
    listing = [
        {"md5": _md5(b"a = 1\n"), "relpath": "a.py"},
        {"md5": _md5(b"b = 2\n"), "relpath": "b.py"},
        {"md5": _md5(b""), "relpath": "sub/c.py"},
    ]
    text = "[" + ", ".join(f'{{"md5": "{e["md5"]}", "relpath": "{e["relpath"]}"}}' for e in listing) + "]"
    assert json.dumps(listing, sort_keys=True) == text
    assert lock_md5(folder) == _md5(text.encode()) + ".dir"
    (folder / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"other")  # ignored: no change
    assert lock_md5(folder) == _md5(text.encode()) + ".dir"
    (folder / "sub" / "c.py").write_bytes(b"c = 3\n")
    assert lock_md5(folder) != _md5(text.encode()) + ".dir"


def test_a_folder_is_what_dvc_data_hashes_it_to(tmp_path):
    tree_mod = pytest.importorskip("dvc_data.hashfile.tree")
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta

    folder = _folder(tmp_path)
    tree = tree_mod.Tree()
    for f in sorted(folder.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            tree.add(
                f.relative_to(folder).parts,
                Meta(size=f.stat().st_size),
                HashInfo("md5", _md5(f.read_bytes())),
            )
    tree.digest()
    assert lock_md5(folder) == tree.hash_info.value


def test_a_stage_executions_name_and_recorded_deps():
    lock = {"stages": {"train@a": {"deps": [{"path": "x.py", "md5": "1"}, {"path": "params.yaml"}]},
                       "report": {"deps": [{"path": "src", "md5": "2.dir"}]}}}  # fmt: skip
    assert lock_key("train", "a") == "train@a" and lock_key("report", None) == "report"
    assert lock_deps(lock, "train", "a") == {"x.py": "1"}  # a params entry has no md5
    assert lock_deps(lock, "report", None) == {"src": "2.dir"}
    assert lock_deps(lock, "train", "b") == {} and lock_deps({}, "report", None) == {}


def test_the_executions_not_among_a_set_of_names_in_the_locks_order():
    lock = {"stages": {"train@a": {}, "train@b": {}, "report": {}}}
    assert unrecorded(lock, {"train@b"}) == [("train", "a"), ("report", None)]
    assert unrecorded(lock, {"train@a", "train@b", "report"}) == [] and unrecorded({}, set()) == []


def test_the_lock_is_read_or_refused_naming_the_file(tmp_path):
    assert read_lock(tmp_path / "dvc.lock") == {}  # none yet: a checkout before its first repro
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  report:\n    deps: []\n")
    assert read_lock(tmp_path / "dvc.lock") == {"schema": "2.0", "stages": {"report": {"deps": []}}}
    (tmp_path / "dvc.lock").write_text("stages: [unclosed\n")
    with pytest.raises(ValueError, match=r"dvc\.lock: not YAML at line 2: did not find expected") as info:
        read_lock(tmp_path / "dvc.lock")
    assert "\n" not in str(info.value)
    (tmp_path / "dvc.lock").write_text("- a list\n")
    with pytest.raises(ValueError, match=r"dvc\.lock: expected a mapping with 'stages', got list"):
        read_lock(tmp_path / "dvc.lock")
