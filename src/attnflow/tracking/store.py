"""Whether a tracking store can be used: an MLflow server that answers its probe, an SQLite store that
MLflow can open, and the error a lost server becomes (see the package docstring of
:mod:`attnflow.tracking`)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import mlflow

__all__ = [
    "PROBE_TIMEOUT_S",
    "SQLITE_MAGIC",
    "TrackingUnavailable",
    "check_sqlite_store",
    "probe",
    "tracking_uri",
]

PROBE_TIMEOUT_S = 3.0  # a tracking server that does not answer in this time is called unreachable


class TrackingUnavailable(RuntimeError):
    """The configured tracking server does not answer."""


def probe(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`TrackingUnavailable` when ``uri`` is an HTTP(S) server that does not answer
    ``/health`` within ``timeout_s``, or an SQLite store that MLflow cannot use
    (`check_sqlite_store`, a lock waited for at most ``timeout_s``)."""
    import urllib.error
    import urllib.request
    from urllib.parse import urlparse

    if urlparse(uri).scheme == "sqlite":
        check_sqlite_store(uri, lock_wait_s=timeout_s)
        return
    if urlparse(uri).scheme not in ("http", "https"):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answered (a proxy or an older server without /health)
    except (urllib.error.URLError, OSError) as exc:
        raise TrackingUnavailable(
            f"MLflow tracking server {uri} did not answer within {timeout_s:g} s "
            f"({getattr(exc, 'reason', exc)}). Start it, or use the embedded store: unset "
            "MLFLOW_TRACKING_URI and set tracking.uri=sqlite:///mlflow.db (or tracking.enabled=false)."
        ) from None


SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
_SQLITE_HEADER_BYTES = 100  # a database file is at least its header


def _sqlite_path(uri: str) -> Path | None:
    """The file of an ``sqlite:///`` URI (None: in memory)."""
    path = uri.split("://", 1)[1].removeprefix("/").split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


_REVISION = re.compile(r"^(down_)?revision\s*=\s*['\"]([0-9a-f]+)['\"]", re.MULTILINE)


@functools.cache
def _store_revisions() -> tuple[frozenset[str], str | None]:
    """(every schema revision this MLflow knows, its newest): read from the text of its alembic
    migration scripts (``revision = "..."``, ``down_revision = "..."``): importing them costs ~4 s."""
    revisions, parents = set(), set()
    for script in (Path(mlflow.__file__).parent / "store" / "db_migrations" / "versions").glob("*.py"):
        for down, revision in _REVISION.findall(script.read_text(encoding="utf-8")):
            (parents if down else revisions).add(revision)
    heads = revisions - parents
    return frozenset(revisions), next(iter(heads)) if len(heads) == 1 else None


def check_sqlite_store(uri: str, *, lock_wait_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`TrackingUnavailable`, one line naming the file, when the SQLite store at `uri`
    cannot be MLflow's: a folder, not a database (damaged, or another kind of file), locked by
    another process for more than `lock_wait_s`, or of a schema newer (or older) than this MLflow's.
    Said before MLflow opens it (MLflow retries for up to ~110 s, then raises a SQLAlchemy error
    that names no file). A file that does not exist yet, or is empty, is a new store."""
    import sqlite3

    path = _sqlite_path(uri)
    if path is None:
        return
    fix = f"point tracking.uri (or MLFLOW_TRACKING_URI) elsewhere, or move {path} away to start a new store"
    where = f"MLflow store {path} (tracking uri {uri})"
    if path.parent != Path("") and path.parent.exists() and not path.parent.is_dir():
        raise TrackingUnavailable(f"{where}: its folder {path.parent} is a file; {fix}")
    if not path.exists():
        return
    if path.is_dir():
        raise TrackingUnavailable(f"{where}: a folder, not an SQLite database file; {fix}")
    try:
        with open(path, "rb") as f:
            head = f.read(_SQLITE_HEADER_BYTES)
    except OSError as exc:
        raise TrackingUnavailable(f"{where}: cannot be read ({exc.strerror or exc}); {fix}") from None
    if not head:
        return  # an empty file: SQLite makes it a new database
    if not head.startswith(SQLITE_MAGIC):
        raise TrackingUnavailable(
            f"{where}: not an SQLite database (damaged, or another kind of file: it starts with "
            f"{head[:16]!r}); {fix}"
        )
    if len(head) < _SQLITE_HEADER_BYTES:
        raise TrackingUnavailable(f"{where}: a truncated SQLite database ({len(head)} bytes); {fix}")
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=lock_wait_s)
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            rows = (
                db.execute("SELECT version_num FROM alembic_version").fetchall()
                if "alembic_version" in tables
                else []
            )
        finally:
            db.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise TrackingUnavailable(
                f"{where}: locked by another process for over {lock_wait_s:g} s (a stage, a sweep job or "
                "`mlflow ui` holding a write); wait for it to end, or stop it"
            ) from None
        raise TrackingUnavailable(f"{where}: cannot be opened ({exc}); {fix}") from None
    except sqlite3.DatabaseError as exc:
        raise TrackingUnavailable(f"{where}: a damaged SQLite database ({exc}); {fix}") from None
    if not rows:
        return  # no MLflow tables yet: MLflow creates them
    found = str(rows[0][0])
    known, newest = _store_revisions()
    if found not in known:
        raise TrackingUnavailable(
            f"{where}: schema version {found} is unknown to MLflow {mlflow.__version__} (newest it knows: "
            f"{newest}): a newer MLflow wrote it; upgrade MLflow (pip install -U mlflow), or {fix}"
        )
    if newest is not None and found != newest:
        raise TrackingUnavailable(
            f"{where}: schema version {found} is older than MLflow {mlflow.__version__}'s {newest}: back the "
            f"file up, then run `mlflow db upgrade {uri}`"
        )


def _tracking_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) came from MLflow or its HTTP client."""
    seen: BaseException | None = exc
    while seen is not None:
        module = type(seen).__module__
        if module.startswith(("mlflow", "requests", "urllib3")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _lost(uri: str, stage: str, exc: BaseException) -> TrackingUnavailable | None:
    """A :class:`TrackingUnavailable` naming the stage when ``exc`` came from a tracking server
    that no longer answers; None when the error is something else."""
    if isinstance(exc, TrackingUnavailable) or not _tracking_error(exc):
        return None
    try:
        probe(uri)
    except TrackingUnavailable as unusable:
        if uri.startswith("sqlite:"):  # a local store made unusable (locked, replaced): its own reason
            return TrackingUnavailable(f"{unusable} (found during stage {stage!r})")
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return TrackingUnavailable(
            f"MLflow tracking server {uri} stopped answering during stage {stage!r} ({reason}); the "
            "stage stopped, and its run stays RUNNING until the next run of the stage closes it as "
            "KILLED. Restart the server and run the stage again, or use the embedded store: unset "
            "MLFLOW_TRACKING_URI and set tracking.uri=sqlite:///mlflow.db (or tracking.enabled=false)."
        )
    return None


def tracking_uri(configured: str | None) -> str:
    """``MLFLOW_TRACKING_URI`` when set (a real server), else the configured URI."""
    return os.environ.get("MLFLOW_TRACKING_URI") or configured or "sqlite:///mlflow.db"
