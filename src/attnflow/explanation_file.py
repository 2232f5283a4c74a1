"""One file format for every saved explanation: the API's and the CLI's, generation's, the study's maps.

A ``.safetensors`` file whose metadata holds one JSON header under ``"attnflow"``:

    {"format": "attnflow.explanations", "version": 2, "kind": KIND, "records": [...]}

KIND says what the file holds and how its tensors are named:

    text         `attnflow.hf.Explanation`s (API, CLI): tensor "{i}/{method}" = map [layer, token]
    generation   `attnflow.generate.GenerationExplanation`s: "{i}/maps/{method}", "{i}/coverage/{method}",
                 "{i}/sinks", "{i}/head_sinks"
    study        the study's maps: "{method}.data" / "{method}.shapes" (`attnflow.io.save_ragged`, one
                 [layer, token] map per sample) and "sample_id"; records = [] and "methods" in the header

``records`` are the JSON-ready fields of each explanation without its tensors. A ``.json`` file
(text and generation) is the same header with the maps inline in the records.

Version 1 is what attnflow wrote before this header (text: metadata "explanations" or a bare JSON
list; generation: metadata "generations" or a bare JSON list; study: ragged maps without a
header): such files still load. A file of a newer version, or of another kind, is refused with a
message naming the file, its kind and version, and what this attnflow reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FORMAT",
    "KINDS",
    "VERSION",
    "TensorReader",
    "check_finite",
    "file_format",
    "header",
    "load_study_maps",
    "read_header",
    "read_json_records",
    "read_tensor_records",
    "save_study_maps",
    "study_maps_header",
    "write_json_records",
    "write_tensor_records",
]

FORMAT = "attnflow.explanations"
VERSION = 2
KINDS = ("text", "generation", "study")
META_KEY = "attnflow"  # the safetensors metadata entry that holds the header
# what each kind was called in version 1 files (the metadata key of its records)
_V1_KEYS = {"text": "explanations", "generation": "generations"}


def _error(message: str) -> Exception:
    from attnflow.io import ArtifactError

    return ArtifactError(message)


def file_format(path: str | Path, formats: Sequence[str] = ("json", "safetensors")) -> str:
    """The format `path`'s suffix names, one of `formats`, in any case (``x.JSON`` is JSON, as
    ``x.HTML`` is a page); a ValueError naming the file and the choices otherwise.

    >>> file_format("maps.SafeTensors")
    'safetensors'
    """
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        choices = ", ".join(f".{f}" for f in formats)
        raise ValueError(
            f"{path}: unknown explanation file type {Path(path).suffix or '(no suffix)'!r}: use {choices}"
        )
    return suffix


def check_finite(maps: Mapping[str, Any], where: str, axes: Sequence[str] = ("layer", "token")) -> None:
    """Every map holds only finite numbers; else an ArtifactError ``<where>: map 'm' holds N value(s)
    that are not finite (NaN or inf), the first at layer 2, token 0`` (layers counted from 1, as in
    every table; other axes from 0). One check for saving and loading, so that a file written is a
    file that loads."""
    for method, values in maps.items():
        bad = ~np.isfinite(np.asarray(values, dtype=np.float64))
        if bad.any():
            first = np.argwhere(bad)[0]
            at = ", ".join(
                f"{name} {int(i) + 1 if name == 'layer' else int(i)}"
                for name, i in zip(axes, first, strict=False)
            )
            raise _error(
                f"{where}: map {method!r} holds {int(bad.sum())} value(s) that are not finite (NaN or inf), "
                f"the first at {at}; scores must be finite numbers"
            )


def header(kind: str, records: Sequence[Mapping[str, Any]] = (), **extra: Any) -> dict[str, Any]:
    """The JSON header of a file of `kind` (records: each explanation's fields without tensors)."""
    if kind not in KINDS:
        raise ValueError(f"unknown explanation kind {kind!r}; known: {', '.join(KINDS)}")
    return {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        **extra,
        "records": [dict(r) for r in records],
    }


def check_header(path: Path, head: Any, kind: str) -> dict[str, Any]:
    """`head` if it is a header of `kind` this attnflow can read; else an error naming the file."""
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise _error(f"{path}: not an explanations file: no {FORMAT!r} header")
    version, found = head.get("version"), head.get("kind")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _error(f"{path}: not an explanations file: version {version!r} is not a version number")
    if version > VERSION:
        raise _error(
            f"{path}: explanation file version {version} ({found}) is newer than this attnflow reads "
            f"(versions 1-{VERSION}): upgrade attnflow"
        )
    if found != kind:
        raise _error(f"{path}: holds {found!r} explanations (version {version}), not {kind!r}")
    if not isinstance(head.get("records"), list):
        raise _error(
            f"{path}: not an explanations file: expected a list of explanations, found a {type(head.get('records')).__name__}"
        )
    return head


def read_header(path: str | Path, kind: str, metadata: Mapping[str, str] | None) -> dict[str, Any]:
    """The header of a safetensors file from its `metadata`; a version-1 file (no header) gets a
    version-1 header with its records (text / generation) or none (study)."""
    path = Path(path)
    metadata = metadata or {}
    if META_KEY not in metadata:  # version 1
        old = _V1_KEYS.get(kind)
        if old is None:
            return {"format": FORMAT, "version": 1, "kind": kind, "records": []}
        if old not in metadata:
            raise _error(
                f"{path}: not an explanations file: no {META_KEY!r} header nor {old!r} entry in its metadata"
            )
        records = _parse(path, metadata[old], f"its {old!r} metadata")
        if not isinstance(records, list):
            raise _error(
                f"{path}: not an explanations file: its {old!r} metadata is a {type(records).__name__}, not a list"
            )
        return {"format": FORMAT, "version": 1, "kind": kind, "records": records}
    return check_header(path, _parse(path, metadata[META_KEY], "its header"), kind)


def _parse(path: Path, text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _error(f"{path}: not an explanations file: {what} is not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise _too_deep(path, what) from None


def _too_deep(path: Path, what: str) -> Exception:
    """A JSON document nested deeper than the parser goes (Python's recursion limit)."""
    import sys

    return _error(
        f"{path}: not an explanations file: {what} is JSON nested too deeply (over ~{sys.getrecursionlimit()} "
        "levels; an explanations file has fewer than 10)"
    )


class TensorReader:
    """The tensors of an open safetensors file, read one at a time when asked (`attnflow.io` reads
    a whole file; an explanations file may carry tensors no record references, which are never read).

    ``reader(name)`` is the array; ``reader.shape(name)`` its declared shape, read from the header
    alone, so a tensor out of proportion to its record is refused before any byte of it is read.
    """

    def __init__(self, path: Path, handle: Any) -> None:
        self.path, self._handle, self.names = path, handle, set(handle.keys())

    def _check(self, name: str) -> None:
        if name not in self.names:
            raise _error(f"{self.path}: not an explanations file: tensor(s) {name} missing")

    def shape(self, name: str) -> tuple[int, ...]:
        self._check(name)
        return tuple(self._handle.get_slice(name).get_shape())

    def __call__(self, name: str) -> np.ndarray:
        from safetensors import SafetensorError

        self._check(name)
        try:
            return self._handle.get_tensor(name)
        except SafetensorError as exc:
            raise _error(
                f"{self.path}: not an explanations file: tensor {name} is unreadable ({exc})"
            ) from None


def write_tensor_records(
    path: str | Path,
    kind: str,
    records: Sequence[Mapping[str, Any]],
    tensors: Mapping[str, np.ndarray],
    **extra: Any,
) -> Path:
    """Write `tensors` and the header (records, `extra` fields) as one safetensors file, atomically."""
    from safetensors.numpy import save

    from attnflow.io import write_bytes

    head = json.dumps(header(kind, records, **extra), ensure_ascii=False)
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    return write_bytes(Path(path), save(arrays, metadata={META_KEY: head}))


def read_tensor_records(path: str | Path, kind: str) -> tuple[dict[str, Any], TensorReader, set[str]]:
    """(header, get_tensor(name), tensor names) of a safetensors explanations file of `kind`.

    Only the header is read here; `get_tensor` (a `TensorReader`) reads one tensor when asked, so
    tensors no record references cost nothing. Raises FileNotFoundError for a missing file,
    attnflow.io.ArtifactError naming the file for anything else (not safetensors, no header, a
    newer version, another kind)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such explanations file")
    try:
        handle = safe_open(str(path), framework="numpy")  # memory-mapped; closed when dropped
        head = read_header(path, kind, handle.metadata())
    except SafetensorError as exc:
        raise _error(f"{path}: not an explanations file: not a readable safetensors file ({exc})") from None
    reader = TensorReader(path, handle)
    return head, reader, reader.names


def write_json_records(path: str | Path, kind: str, records: Sequence[Mapping[str, Any]]) -> Path:
    """Write the header with the records (maps inline) as UTF-8 JSON, atomically."""
    from attnflow.io import write_bytes

    return write_bytes(Path(path), json.dumps(header(kind, records), ensure_ascii=False).encode("utf-8"))


def read_json_records(path: str | Path, kind: str) -> dict[str, Any]:
    """The header (with records) of a JSON explanations file; a version-1 file is a bare list."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such explanations file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise _error(f"{path}: not an explanations file: not UTF-8 text (byte offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise _error(
            f"{path}: not an explanations file: invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None
    except RecursionError:
        raise _too_deep(path, "it") from None
    if isinstance(data, list):  # version 1
        return {"format": FORMAT, "version": 1, "kind": kind, "records": data}
    return check_header(path, data, kind)


def save_study_maps(path: str | Path, maps: Mapping[str, list[np.ndarray]], ids: Any) -> None:
    """The study's maps ({method: one [layer, token] map per sample}, joined on `ids`), kind "study"."""
    from attnflow.io import save_ragged

    head = json.dumps(header("study", methods=list(maps)), ensure_ascii=False)
    save_ragged(path, dict(maps), ids=ids, metadata={META_KEY: head})


def study_maps_header(path: str | Path) -> dict[str, Any]:
    """The header of a study maps file (checked: kind "study", a version this attnflow reads)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such maps file; run the explain stage")
    try:
        with safe_open(str(path), framework="numpy") as f:
            return read_header(path, "study", f.metadata())
    except SafetensorError as exc:
        raise _error(f"{path}: not an explanations file: not a readable safetensors file ({exc})") from None


def load_study_maps(path: str | Path, ids: Any, *, against: str) -> dict[str, list[np.ndarray]]:
    """The maps of `save_study_maps`, in the order of `ids` (`attnflow.io.load_aligned`)."""
    from attnflow.io import load_aligned

    study_maps_header(path)
    return load_aligned(path, ids, against=against)


def load_head_maps(
    path: str | Path, ids: Any, importance: Mapping[str, list[np.ndarray]], *, against: str
) -> tuple[dict[str, list[np.ndarray]], dict[str, list[np.ndarray]]] | None:
    """The per-head maps of the explain stage (`save_study_maps` of a subset of the samples ``ids``)
    and the entries of ``importance`` (in the order of ``ids``, from ``against``) for their samples,
    in the maps' order; None when there is no such file (``explain.per_head=false``)."""
    from attnflow.io import align_ids, load_ragged

    if not Path(path).is_file():
        return None
    study_maps_header(path)
    maps, own = load_ragged(path, with_ids=True)
    where = align_ids(ids, own, what=against, against=str(path), subset=True)
    return maps, {k: [v[i] for i in where] for k, v in importance.items()}
