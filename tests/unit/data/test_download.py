"""download(): source order, checksum verification, atomicity, clear failures."""

from __future__ import annotations

import functools
import http.server
import io
import socket
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from attnflow.data import download as dl
from attnflow.tasks import TASKS

LINZEN_FILES = ["numpred.val", *(f"numpred.test.{k}" for k in range(1, 6))]


def _lines(label: str, n: int) -> bytes:
    return "".join(f"{label}\tthe dog number {i}\n" for i in range(n)).encode()


def _make_mirror(root: Path) -> Path:
    """A mirror in the shared/data layout with tiny Linzen and SST-2 files."""
    folder = root / "linzen2016" / "rnn_agr_simple"
    folder.mkdir(parents=True)
    for name in LINZEN_FILES:
        (folder / name).write_bytes(_lines("VBZ", 3) + _lines("VBP", 3))
    glue = root / "sst2" / "glue_SST-2"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_text("sentence\tlabel\ngood film \t1\nbad film \t0\n")
    (glue / "dev.tsv").write_text("sentence\tlabel\nfine \t1\n")
    (glue / "test.tsv").write_text("index\tsentence\n0\tokay\n")
    return root


@pytest.fixture()
def no_known_digests(monkeypatch):
    """Fixture files are not the real ones: treat every file as new (digest recorded, not checked)."""
    monkeypatch.setattr(dl, "known_digests", lambda: {})


@pytest.fixture()
def http_dir(tmp_path):
    """Serve a folder over HTTP on 127.0.0.1; yields (folder, base URL)."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/rnn_agr_simple.tar.gz"


def _no_partials(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(".") and p.is_file()]


def test_mirror_copy_verifies_sha256_of_real_file(tmp_path):
    """A file whose digest is in checksums.tsv is accepted only with that digest."""
    mirror = tmp_path / "mirror" / "sst2" / "glue_SST-2"
    mirror.mkdir(parents=True)
    real = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "sst2" / "glue_SST-2"
    if not real.is_dir():
        pytest.skip("../shared/data is absent: the real SST-2 files are needed for their known digests")
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        (mirror / name).write_bytes((real / name).read_bytes())
    manifest = dl.download(TASKS["sst2"].dataset, tmp_path / "raw", urls=[], mirrors=[tmp_path / "mirror"])
    assert {f["verified"] for f in manifest["files"].values()} == {"sha256"}
    assert (tmp_path / "raw" / "glue_SST-2" / "dev.tsv").read_bytes() == (real / "dev.tsv").read_bytes()


def test_corrupted_mirror_file_is_rejected_and_leaves_nothing(tmp_path):
    """A mirror file whose sha256 differs from the table is refused; no partial or bad file remains."""
    mirror = _make_mirror(tmp_path / "mirror")
    with pytest.raises(dl.DownloadError) as err:
        dl.download(TASKS["sst2"].dataset, tmp_path / "raw", urls=[], mirrors=[mirror])
    assert "sha256 mismatch" in str(err.value)
    assert str(mirror) in str(err.value)
    raw = tmp_path / "raw"
    assert not list(raw.rglob("*.tsv")) and not _no_partials(raw)


def test_unreachable_url_falls_back_to_mirror_and_names_attempts(tmp_path, no_known_digests):
    mirror = _make_mirror(tmp_path / "mirror")
    url = _closed_port_url()
    manifest = dl.download(
        TASKS["agreement"].dataset, tmp_path / "raw", urls=[url], mirrors=[mirror], timeout_s=2
    )
    assert manifest["attempts"][0].startswith(f"{url}: unreachable")
    assert "ok" in manifest["attempts"][1]
    assert sorted(p.name for p in (tmp_path / "raw" / "rnn_agr_simple").iterdir()) == sorted(LINZEN_FILES)
    assert (tmp_path / "raw" / "download.json").is_file()


def test_every_source_failing_names_each_source_and_reason(tmp_path, no_known_digests, monkeypatch):
    monkeypatch.delenv(dl.MIRROR_ENV, raising=False)
    url = _closed_port_url()
    with pytest.raises(dl.DownloadError) as err:
        dl.download(
            TASKS["agreement"].dataset,
            tmp_path / "raw",
            urls=[url],
            mirrors=[tmp_path / "nowhere"],
            timeout_s=2,
        )
    text = str(err.value)
    assert f"{url}: unreachable" in text
    assert f"{tmp_path / 'nowhere'}: no such folder" in text
    assert "numpred.val" in text


def test_official_tarball_over_http_is_used_first(tmp_path, http_dir, no_known_digests):
    """The official archive layout (rnn_agr_simple/numpred.*, incl. the train split) is unpacked."""
    served, base = http_dir
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ["numpred.train", "numpred.test", "numpred.test.0", *LINZEN_FILES]:
            data = _lines("VBP", 2)
            info = tarfile.TarInfo(f"rnn_agr_simple/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (served / "rnn_agr_simple.tar.gz").write_bytes(buf.getvalue())
    mirror = _make_mirror(tmp_path / "mirror")
    manifest = dl.download(
        TASKS["agreement"].dataset, tmp_path / "raw", urls=[f"{base}/rnn_agr_simple.tar.gz"], mirrors=[mirror]
    )
    sources = {f["source"] for f in manifest["files"].values()}
    assert sources == {f"{base}/rnn_agr_simple.tar.gz"}
    assert (tmp_path / "raw" / "rnn_agr_simple" / "numpred.train").read_bytes() == _lines("VBP", 2)
    # Optional files no source had are listed, not fatal (the full TSV's URL was not configured).
    assert manifest["missing_optional"] == [
        "linzen2016/agr_50_mostcommon_10K.tsv",
        "linzen2016/edinburgh_nlu_wiki/wiki-dev.txt",
        "linzen2016/edinburgh_nlu_wiki/wiki-test.txt",
        "linzen2016/edinburgh_nlu_wiki/wiki-train.txt",
        "linzen2016/rnn_agr_simple/README.txt",
    ]


def test_truncated_archive_is_reported_and_mirror_used(tmp_path, http_dir, no_known_digests):
    served, base = http_dir
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in ("train", "dev", "test"):
            zf.writestr(f"SST-2/{name}.tsv", "sentence\tlabel\nx\t1\n" * 200)
    (served / "SST-2.zip").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    mirror = _make_mirror(tmp_path / "mirror")
    manifest = dl.download(
        TASKS["sst2"].dataset, tmp_path / "raw", urls=[f"{base}/SST-2.zip"], mirrors=[mirror]
    )
    assert "corrupt or truncated archive" in manifest["attempts"][0]
    assert {f["source"] for f in manifest["files"].values()} == {str(mirror)}
    assert not _no_partials(tmp_path / "raw")


def test_git_blob_id_verifies_files_with_no_known_sha256(tmp_path, monkeypatch):
    """numpred.train has only a git blob id in the table: a wrong file is refused by it."""
    mirror = _make_mirror(tmp_path / "mirror")
    (mirror / "linzen2016" / "rnn_agr_simple" / "numpred.train").write_bytes(b"VBZ\tnot the real file\n")
    table = {"linzen2016/rnn_agr_simple/numpred.train": {"sha256": "-", "bytes": "-", "git_blob": "0" * 40}}
    monkeypatch.setattr(dl, "known_digests", lambda: table)
    manifest = dl.download(TASKS["agreement"].dataset, tmp_path / "raw", urls=[], mirrors=[mirror])
    # The optional train file was refused (blob mismatch), the required ones were accepted as new.
    assert "numpred.train" not in " ".join(manifest["files"])
    assert not (tmp_path / "raw" / "rnn_agr_simple" / "numpred.train").exists()


def test_env_mirror_is_tried_after_configured_ones(tmp_path, monkeypatch, no_known_digests):
    mirror = _make_mirror(tmp_path / "envmirror")
    monkeypatch.setenv(dl.MIRROR_ENV, str(mirror))
    manifest = dl.download(TASKS["sst2"].dataset, tmp_path / "raw", urls=[], mirrors=[tmp_path / "absent"])
    assert manifest["attempts"] == [f"{tmp_path / 'absent'}: no such folder", f"{mirror}: ok"]


def test_checksum_table_covers_the_manifest():
    table = dl.known_digests()
    assert table["sst2/glue_SST-2/dev.tsv"]["sha256"].startswith("54a9c12c")
    assert table["linzen2016/rnn_agr_simple/numpred.train"]["git_blob"].startswith("50cfcc8c")


def test_downloaded_files_get_umask_modes(tmp_path, no_known_digests):
    import os
    import stat

    mirror = _make_mirror(tmp_path / "mirror")
    old = os.umask(0o022)
    try:
        dl.download(TASKS["agreement"].dataset, tmp_path / "raw", urls=[], mirrors=[mirror])
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "raw").rglob("*") if p.is_file()]
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}  # not mkstemp's 0600


def test_a_mirror_that_is_a_file_is_one_line_saying_so_before_any_source_is_tried(tmp_path, monkeypatch):
    """Round 5 (issue 57): $ATTNFLOW_DATA_MIRROR naming a file was "no such folder" in a traceback.
    Now one line naming the file and where it was set, before the (slow) URLs are tried, as an
    ArtifactError, which a stage prints plainly (pipelines/_stage.py)."""
    from attnflow.io import ArtifactError

    not_a_folder = tmp_path / "mirror.tar"
    not_a_folder.write_bytes(b"x")
    monkeypatch.setenv(dl.MIRROR_ENV, str(not_a_folder))
    monkeypatch.setattr(dl, "_from_url", lambda *a, **k: pytest.fail("a URL was tried"))
    with pytest.raises(dl.MirrorError) as err:
        dl.download(TASKS["sst2"].dataset, tmp_path / "raw", urls=["http://x/SST-2.zip"], mirrors=[])
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{not_a_folder}: a file, not a folder")
    assert "$ATTNFLOW_DATA_MIRROR" in message
    assert isinstance(err.value, ArtifactError) and isinstance(err.value, dl.DownloadError)
    assert not (tmp_path / "raw").exists()


def test_a_configured_mirror_that_is_a_file_names_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv(dl.MIRROR_ENV, raising=False)
    (tmp_path / "m").write_text("")
    with pytest.raises(dl.MirrorError, match=r"a file, not a folder \(a data mirror, set in data\.mirrors\)"):
        dl.download(TASKS["sst2"].dataset, tmp_path / "raw", urls=[], mirrors=[tmp_path / "m"])
