"""Fetch the raw data sets: official URLs first, then mirror folders; verify; write atomically.

Every file lands at ``<dest>/<path below the data set's root>``; its ``relpath`` is its path in the
mirror layout (``linzen2016/rnn_agr_simple/numpred.val`` lands at ``<dest>/rnn_agr_simple/numpred.val``). A file is verified against ``checksums.tsv`` (sha256,
or the git blob id where only that is known); a file with no known digest is accepted and its
sha256 recorded in ``<dest>/download.json``. A source that fails (unreachable, corrupt,
truncated, wrong checksum) is skipped with its reason kept; if a required file is still missing
after the last source, :class:`DownloadError` names every source tried and why it failed. Files
are written to a temporary name in the target folder and renamed only once verified, so a failure
never leaves a partial file behind.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from tqdm.auto import tqdm

from attnflow.io import ArtifactError, umask_modes, write_json

__all__ = [
    "MIRROR_ENV",
    "DatasetSpec",
    "DownloadError",
    "FileSpec",
    "MirrorError",
    "check_mirrors",
    "download",
    "known_digests",
    "mirror_dirs",
]

MIRROR_ENV = "ATTNFLOW_DATA_MIRROR"
_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """No source could provide every required file."""


class MirrorError(DownloadError, ArtifactError):
    """A configured mirror that cannot be one (a file, not a folder): a mistake in the settings, said
    in one line starting with its path before any source is tried (a stage prints it plainly)."""


class _SourceFailed(Exception):
    pass


@dataclass(frozen=True)
class FileSpec:
    relpath: str  # mirror layout, e.g. "sst2/glue_SST-2/dev.tsv"
    archive: str  # basename of the official URL that holds it
    required: bool = True
    aliases: tuple[str, ...] = ()  # other basenames it may carry inside the archive

    @property
    def names(self) -> tuple[str, ...]:
        return (PurePosixPath(self.relpath).name, *self.aliases)

    @property
    def local(self) -> str:
        """Path below the data set's root folder."""
        return PurePosixPath(self.relpath).relative_to(PurePosixPath(self.relpath).parts[0]).as_posix()


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    root: str  # top folder of the mirror layout
    files: tuple[FileSpec, ...] = field(default_factory=tuple)


def known_digests() -> dict[str, dict[str, str]]:
    """``relpath -> {"sha256", "bytes", "git_blob"}`` from the checksum table kept in the package."""
    table: dict[str, dict[str, str]] = {}
    text = resources.files("attnflow.data").joinpath("checksums.tsv").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        path, sha, size, blob = line.split("\t")
        table[path] = {"sha256": sha, "bytes": size, "git_blob": blob}
    return table


def mirror_dirs(configured: Iterable[str]) -> list[Path]:
    """Configured mirror folders, then those in ``$ATTNFLOW_DATA_MIRROR`` (os.pathsep-separated)."""
    extra = [p for p in os.environ.get(MIRROR_ENV, "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in [*configured, *extra]]


def check_mirrors(configured: Iterable[str]) -> None:
    """Refuse a mirror that exists but is no folder (``$ATTNFLOW_DATA_MIRROR`` pointing at a file):
    one line naming it and where it was set. A missing mirror is only skipped when tried."""
    env = mirror_dirs(())
    for mirror in mirror_dirs(configured):
        if mirror.exists() and not mirror.is_dir():
            where = f"${MIRROR_ENV}" if mirror in env else "data.mirrors"
            raise MirrorError(
                f"{mirror}: a file, not a folder (a data mirror, set in {where}); "
                "expected a folder holding the files in the mirror layout, e.g. sst2/glue_SST-2/dev.tsv"
            )


def _digests(path: Path) -> tuple[str, str]:
    """(sha256, git blob id) of a file in one pass."""
    size = path.stat().st_size
    sha = hashlib.sha256()
    blob = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
            blob.update(chunk)
    return sha.hexdigest(), blob.hexdigest()


def _verify(path: Path, relpath: str, table: dict[str, dict[str, str]]) -> tuple[str, str]:
    """Return (sha256, how verified); raise _SourceFailed on a mismatch."""
    sha, blob = _digests(path)
    known = table.get(relpath)
    if known is None:
        return sha, "new"
    if known["sha256"] != "-":
        if sha != known["sha256"]:
            raise _SourceFailed(f"{relpath}: sha256 mismatch (expected {known['sha256']}, got {sha})")
        return sha, "sha256"
    if blob != known["git_blob"]:
        raise _SourceFailed(f"{relpath}: git blob id mismatch (expected {known['git_blob']}, got {blob})")
    return sha, "git_blob"


def _copy(src_stream, dst: Path, total: int | None, desc: str) -> None:
    with open(dst, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False) as bar:
        while chunk := src_stream.read(_CHUNK):
            out.write(chunk)
            bar.update(len(chunk))


def _install(tmp: Path, relpath: str, raw: Path, table, record: dict, source: str) -> None:
    """Verify a fetched temp file and rename it into place (or delete it and raise)."""
    try:
        sha, how = _verify(tmp, relpath, table)
    except _SourceFailed:
        tmp.unlink(missing_ok=True)
        raise
    target = raw / PurePosixPath(relpath).relative_to(PurePosixPath(relpath).parts[0])
    target.parent.mkdir(parents=True, exist_ok=True)
    umask_modes(tmp)  # the temporary file is 0600
    os.replace(tmp, target)
    record[relpath] = {"sha256": sha, "bytes": target.stat().st_size, "verified": how, "source": source}


def _tmp_in(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=".part-", suffix=".tmp")
    os.close(fd)
    return Path(name)


def _members(names: Sequence[str], wanted: Sequence[FileSpec]) -> dict[str, str]:
    """Map archive member names to the relpaths they provide (shortest path wins on a tie)."""
    found: dict[str, str] = {}
    for spec in wanted:
        hits = sorted((n for n in names if PurePosixPath(n).name in spec.names), key=len)
        if hits:
            found[hits[0]] = spec.relpath
    return found


def _from_url(url: str, wanted: Sequence[FileSpec], raw: Path, table, record, timeout: float) -> None:
    archive = _tmp_in(raw)
    try:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                length = resp.headers.get("Content-Length")
                _copy(resp, archive, int(length) if length else None, PurePosixPath(url).name)
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            raise _SourceFailed(f"unreachable ({getattr(exc, 'reason', exc)})") from None
        name = PurePosixPath(url).name
        try:
            if name.endswith((".tar.gz", ".tgz", ".tar")):
                with tarfile.open(archive) as tar:
                    files = {m.name: m for m in tar.getmembers() if m.isfile()}
                    for member, relpath in _members(list(files), wanted).items():
                        tmp = _tmp_in(raw)
                        with tar.extractfile(files[member]) as src:  # type: ignore[union-attr]
                            _copy(src, tmp, files[member].size, relpath)
                        _install(tmp, relpath, raw, table, record, url)
            elif name.endswith(".zip"):
                with zipfile.ZipFile(archive) as zf:
                    infos = {i.filename: i for i in zf.infolist() if not i.is_dir()}
                    for member, relpath in _members(list(infos), wanted).items():
                        tmp = _tmp_in(raw)
                        with zf.open(infos[member]) as src:
                            _copy(src, tmp, infos[member].file_size, relpath)
                        _install(tmp, relpath, raw, table, record, url)
            elif name.endswith(".gz"):
                for spec in wanted:
                    if PurePosixPath(spec.relpath).name == name.removesuffix(".gz"):
                        tmp = _tmp_in(raw)
                        with gzip.open(archive) as src:
                            _copy(src, tmp, None, spec.relpath)
                        _install(tmp, spec.relpath, raw, table, record, url)
            else:
                raise _SourceFailed(f"unknown archive type: {name}")
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, gzip.BadGzipFile, OSError) as exc:
            raise _SourceFailed(f"corrupt or truncated archive ({exc.__class__.__name__}: {exc})") from None
    finally:
        archive.unlink(missing_ok=True)
        for leftover in raw.glob(".part-*.tmp"):
            leftover.unlink(missing_ok=True)


def _from_mirror(mirror: Path, wanted: Sequence[FileSpec], raw: Path, table, record) -> None:
    if not mirror.is_dir():
        raise _SourceFailed("a file, not a folder" if mirror.exists() else "no such folder")
    refused = []
    for spec in wanted:
        src = mirror / spec.relpath
        if not src.is_file():
            continue
        tmp = _tmp_in(raw)
        try:
            with open(src, "rb") as f:
                _copy(f, tmp, src.stat().st_size, spec.relpath)
            _install(tmp, spec.relpath, raw, table, record, str(mirror))
        except _SourceFailed as exc:  # one bad file does not spoil the others
            refused.append(str(exc))
        finally:
            tmp.unlink(missing_ok=True)
    if refused:
        raise _SourceFailed("; ".join(refused))


def download(
    spec: DatasetSpec,
    dest: str | Path,
    *,
    urls: Sequence[str],
    mirrors: Sequence[str | Path] = (),
    timeout_s: float = 5.0,
    optional: Callable[[FileSpec], bool] = lambda file: True,
) -> dict:
    """Fetch the files of ``spec`` into ``dest``; return the manifest written to ``<dest>/download.json``.

    ``urls`` are tried in order, then ``mirrors`` (folders in the mirror layout). ``optional``
    decides which optional files are wanted at all.
    """
    check_mirrors(map(str, mirrors))  # a settings mistake is said before any (slow) source is tried
    raw = Path(dest)
    table = known_digests()
    wanted = [f for f in spec.files if f.required or optional(f)]
    record: dict[str, dict] = {}
    attempts: list[str] = []

    # Files already in place and verified need no source.
    for f in wanted:
        target = raw / f.local
        if target.is_file():
            try:
                sha, how = _verify(target, f.relpath, table)
                record[f.relpath] = {
                    "sha256": sha,
                    "bytes": target.stat().st_size,
                    "verified": how,
                    "source": "already present",
                }
            except _SourceFailed:
                target.unlink()

    sources: list[tuple[str, Callable[[list[FileSpec]], None]]] = []
    for url in urls:
        base = PurePosixPath(url).name
        sources.append(
            (
                url,
                lambda missing, url=url, base=base: _from_url(
                    url, [m for m in missing if m.archive == base], raw, table, record, timeout_s
                ),
            )
        )
    for mirror in mirror_dirs(map(str, mirrors)):
        sources.append(
            (str(mirror), lambda missing, mirror=mirror: _from_mirror(mirror, missing, raw, table, record))
        )

    for name, fetch in sources:
        missing = [f for f in wanted if f.relpath not in record]
        if not missing:
            break
        if name in urls and not any(m.archive == PurePosixPath(name).name for m in missing):
            continue  # this URL holds none of the missing files
        try:
            fetch(missing)
        except _SourceFailed as exc:
            attempts.append(f"{name}: {exc}")
            continue
        still = [f.relpath for f in missing if f.relpath not in record]
        attempts.append(f"{name}: ok" + (f" (lacks {', '.join(still)})" if still else ""))

    lacking = [f.relpath for f in wanted if f.required and f.relpath not in record]
    if lacking:
        tried = "\n  ".join(attempts) or "(no source configured)"
        raise DownloadError(f"{spec.name}: could not obtain {', '.join(lacking)}. Sources tried:\n  {tried}")
    manifest = {
        "dataset": spec.name,
        "files": dict(sorted(record.items())),
        "attempts": attempts,
        "missing_optional": sorted(f.relpath for f in wanted if f.relpath not in record),
    }
    write_json(raw / "download.json", manifest)
    return manifest
