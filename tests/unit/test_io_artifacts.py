"""Artifact loads name their file; outputs get umask modes (issue: hardening, cases 7 and 10)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from attnflow.io import (
    ArtifactError,
    align_ids,
    load_ragged,
    read_json,
    read_parquet,
    save_ragged,
    write_text,
)


def test_truncated_safetensors_error_names_the_file(tmp_path):
    path = tmp_path / "attentions.safetensors"
    save_ragged(path, {"attn": [np.ones((1, 1, 2, 2))]}, ids=[7])
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ArtifactError, match=rf"^{path}: unreadable safetensors file"):
        load_ragged(path)


@pytest.mark.parametrize(("reader", "name"), [(read_json, "m.json"), (read_parquet, "s.parquet")])
def test_corrupt_or_missing_artifacts_name_the_file(tmp_path, reader, name):
    path = tmp_path / name
    with pytest.raises(FileNotFoundError, match=rf"^{path}: .*not found; run the stage that writes it"):
        reader(path)
    path.write_text("{not json")
    with pytest.raises(ArtifactError, match=rf"^{path}: unreadable"):
        reader(path)


def test_ids_travel_with_the_arrays_and_joins_use_them(tmp_path):
    path = tmp_path / "maps.safetensors"
    save_ragged(path, {"flow": [np.zeros(2), np.ones(3)]}, ids=[11, 4])
    arrays, ids = load_ragged(path, with_ids=True)
    assert ids.tolist() == [11, 4] and [a.size for a in arrays["flow"]] == [2, 3]
    assert align_ids(ids, [4, 11], what="a", against="b").tolist() == [1, 0]
    with pytest.raises(
        ArtifactError, match=r"a: its samples differ from b \(only here: \[11\]; only there: \[5\]\)"
    ):
        align_ids(ids, [4, 5], what="a", against="b")


def test_written_files_get_umask_modes(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "r.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.txt").stat().st_mode) == 0o644
