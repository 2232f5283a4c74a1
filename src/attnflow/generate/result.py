"""What `explain_generation` returns (`GenerationExplanation`: M per method, the tokens, the sinks
and the options) and its files: `save_generations` / `load_generations` (.json / .safetensors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

KIND = "generation"  # attnflow.explanation_file's kind of these files


@dataclass
class GenerationExplanation:
    """What `explain_generation` returns: M per method plus everything needed to read and re-check it.

    maps[method]: (n_generated, n_columns, layers) float64 -- row t explains generated token t
    (model row rows[t] = P + t - 1); columns are the prompt tokens (over="prompt") or every token
    of the teacher-forced sequence (over="all").
    """

    prompt: str
    completion: str
    prompt_tokens: list[str]  # display labels, one per prompt token
    generated_tokens: list[str]  # display labels, one per generated token
    columns: list[str]  # labels of M's second axis
    maps: dict[str, np.ndarray]  # method -> (n_generated, n_columns, layers)
    first_token_share: dict[str, np.ndarray]  # method -> (n_generated,) share of column 0, last layer
    coverage: dict[str, np.ndarray]  # method -> (n_generated, layers) mass of the shown columns in the row
    logprobs: np.ndarray  # (n_generated,) teacher-forced log p(g_t | prompt, g_<t)
    rows: list[int]  # model row that predicted each generated token: P + t - 1
    prompt_ids: list[int]
    generated_ids: list[int]
    sinks: np.ndarray  # (layers, heads, T) bool: the sink keys of each head, found or given (see options)
    head_sinks: np.ndarray  # (layers, heads, T) bool: find_sinks(scope="head"), for the record
    options: dict[str, Any] = field(default_factory=dict)
    special_columns: list[int] = field(default_factory=list)  # columns holding special tokens

    @property
    def methods(self) -> list[str]:
        return list(self.maps)

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def n_generated(self) -> int:
        return len(self.generated_ids)

    @property
    def num_layers(self) -> int:
        return next(iter(self.maps.values())).shape[2] if self.maps else 0

    def sink_positions(self, *, per_head: bool = False) -> dict[int, float]:
        """{position: share of the (layer, head) pairs in which it is a sink}, positions in order:
        of the sinks handled (`sinks`), or with per_head=True of the per-head detection."""
        mask = self.head_sinks if per_head else self.sinks
        share = mask.reshape(-1, mask.shape[-1]).mean(axis=0)
        return {int(j): round(float(share[j]), 4) for j in np.flatnonzero(share)}

    def matrix(self, method: str | None = None, layer: int | str = "mean") -> np.ndarray:
        """(n_generated, n_columns): M at one layer (negative counts from the top) or its mean over layers."""
        m = self.maps[self._method(method)]
        if layer == "mean":
            return m.mean(axis=2)
        if (
            isinstance(layer, bool)
            or not isinstance(layer, int | np.integer)
            or not -m.shape[2] <= layer < m.shape[2]
        ):
            raise ValueError(
                f"layer must be 'mean' or an index in [-{m.shape[2]}, {m.shape[2] - 1}], got {layer!r}"
            )
        return m[:, :, int(layer)]

    def scores(self, method: str | None = None, token: int = 0, layer: int | str = "mean") -> np.ndarray:
        """(n_columns,) attributions of generated token `token` (negative counts from the end)."""
        mat = self.matrix(method, layer)
        if (
            isinstance(token, bool)
            or not isinstance(token, int | np.integer)
            or not -mat.shape[0] <= token < mat.shape[0]
        ):
            raise ValueError(
                f"token must be an index in [-{mat.shape[0]}, {mat.shape[0] - 1}] (generated tokens), got {token!r}"
            )
        return mat[int(token)]

    def _method(self, method: str | None) -> str:
        if method is None:
            return next(iter(self.maps))
        if method not in self.maps:
            raise ValueError(f"no method {method!r} in this explanation; it has {sorted(self.maps)}")
        return method

    # ---- files ----
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (maps as nested lists)."""
        d = self._meta()
        d["maps"] = {m: v.tolist() for m, v in self.maps.items()}
        d["coverage"] = {m: v.tolist() for m, v in self.coverage.items()}
        d["sinks"] = self.sinks.astype(int).tolist()
        d["head_sinks"] = self.head_sinks.astype(int).tolist()
        return d

    def _meta(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "completion": self.completion,
            "prompt_tokens": list(self.prompt_tokens),
            "generated_tokens": list(self.generated_tokens),
            "columns": list(self.columns),
            "first_token_share": {m: v.tolist() for m, v in self.first_token_share.items()},
            "logprobs": self.logprobs.tolist(),
            "rows": list(self.rows),
            "prompt_ids": list(self.prompt_ids),
            "generated_ids": list(self.generated_ids),
            "sink_positions": {str(k): v for k, v in self.sink_positions().items()},
            "head_sink_positions": {str(k): v for k, v in self.sink_positions(per_head=True).items()},
            "options": dict(self.options),
            "special_columns": list(self.special_columns),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GenerationExplanation:
        return cls(
            prompt=d["prompt"],
            completion=d["completion"],
            prompt_tokens=list(d["prompt_tokens"]),
            generated_tokens=list(d["generated_tokens"]),
            columns=list(d["columns"]),
            maps={m: np.asarray(v, dtype=np.float64) for m, v in d["maps"].items()},
            first_token_share={m: np.asarray(v, dtype=np.float64) for m, v in d["first_token_share"].items()},
            coverage={m: np.asarray(v, dtype=np.float64) for m, v in d["coverage"].items()},
            logprobs=np.asarray(d["logprobs"], dtype=np.float64),
            rows=list(d["rows"]),
            prompt_ids=list(d["prompt_ids"]),
            generated_ids=list(d["generated_ids"]),
            sinks=np.asarray(d["sinks"], dtype=bool),
            head_sinks=np.asarray(d["head_sinks"], dtype=bool),
            options=dict(d.get("options") or {}),
            special_columns=list(d.get("special_columns") or []),
        )

    def save(self, path: str | Path) -> Path:
        """Write as ``.json`` or ``.safetensors`` (by the suffix; atomically). See `save_generations`."""
        return save_generations([self], path)


def save_generations(explanations: Sequence[GenerationExplanation], path: str | Path) -> Path:
    """Write explanations in attnflow's explanations format (`attnflow.explanation_file`, kind
    "generation"): ``.json`` (the header with each `to_dict`) or ``.safetensors`` (tensors
    ``"{i}/maps/{method}"`` (n, columns, layers), ``"{i}/coverage/{method}"``, ``"{i}/sinks"``,
    ``"{i}/head_sinks"``; the rest in the header's records), atomically."""
    from attnflow.explanation_file import write_json_records, write_tensor_records

    path = Path(path)
    if path.suffix == ".json":
        return write_json_records(path, KIND, [e.to_dict() for e in explanations])
    if path.suffix == ".safetensors":
        tensors: dict[str, np.ndarray] = {}
        for i, e in enumerate(explanations):
            for m, v in e.maps.items():
                tensors[f"{i}/maps/{m}"] = np.asarray(v, dtype=np.float32)
                tensors[f"{i}/coverage/{m}"] = np.asarray(e.coverage[m], dtype=np.float32)
            tensors[f"{i}/sinks"] = np.asarray(e.sinks, dtype=np.uint8)
            tensors[f"{i}/head_sinks"] = np.asarray(e.head_sinks, dtype=np.uint8)
        records = [dict(e._meta(), methods=e.methods) for e in explanations]
        return write_tensor_records(path, KIND, records, tensors)
    raise ValueError(f"unknown file type {path.suffix!r}: use .json or .safetensors")


def _finite(e: GenerationExplanation, i: int, path: Path) -> GenerationExplanation:
    """`e` when its maps hold only finite numbers; else an error naming the file, record and method."""
    from attnflow.io import ArtifactError

    for m, v in e.maps.items():
        if not np.isfinite(v).all():
            raise ArtifactError(
                f"{path}: not a generation explanations file: explanation {i}: map {m!r} holds "
                f"{int((~np.isfinite(v)).sum())} value(s) that are not finite (NaN or inf)"
            )
    return e


def load_generations(path: str | Path) -> list[GenerationExplanation]:
    """Read what `save_generations` wrote (this version or an older one); a newer version or
    another kind of file is refused naming the file (attnflow.io.ArtifactError)."""
    from attnflow.explanation_file import read_json_records, read_tensor_records
    from attnflow.io import ArtifactError

    path = Path(path)
    if path.suffix not in (".json", ".safetensors"):
        raise ValueError(f"unknown file type {path.suffix!r}: use .json or .safetensors")
    try:
        if path.suffix == ".json":
            loaded = [GenerationExplanation.from_dict(d) for d in read_json_records(path, KIND)["records"]]
            return [_finite(e, i, path) for i, e in enumerate(loaded)]
        head, get, _ = read_tensor_records(path, KIND)
        out = []
        for i, d in enumerate(head["records"]):
            methods = d.pop("methods")
            d["maps"] = {m: get(f"{i}/maps/{m}") for m in methods}
            d["coverage"] = {m: get(f"{i}/coverage/{m}") for m in methods}
            d["sinks"] = get(f"{i}/sinks").astype(bool)
            d["head_sinks"] = get(f"{i}/head_sinks").astype(bool)
            d.pop("sink_positions", None)
            d.pop("head_sink_positions", None)
            out.append(_finite(GenerationExplanation.from_dict(d), i, path))
        return out
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ArtifactError):  # already names the file
            raise
        first = (str(exc).splitlines() or [""])[0]
        raise ArtifactError(
            f"{path}: not a generation explanations file ({type(exc).__name__}: {first})"
        ) from exc
