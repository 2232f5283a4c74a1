"""The `Explanation` of one input (maps [layer, token] per method) and its files (.json / .safetensors)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# Logits longer than this (a language model's vocabulary) are left out of `Explanation.to_dict`.
MAX_LOGITS_IN_DICT = 1024


@dataclass
class Explanation:
    """Per-method token attributions of one input, for every layer.

    maps[method][l, j]: how much displayed token j is attributed to the explained query row at
    layer l (0-based; l = 0 is the paper's L1). `layer` is the layer shown by default
    (non-negative), `row` the explained query position (a token index into the model's tokens)
    or the reduction over rows ("max" / "mean").
    """

    tokens: list[str]
    maps: dict[str, np.ndarray]  # method -> (layer, token) float64
    layer: int
    row: int | str
    logits: np.ndarray | None = None  # (C,), or next-token logits (V,) of a language model
    prediction: int | None = None
    label: str | None = None
    text: str | None = None
    groups: list[list[int]] | None = None  # model-token positions behind each displayed token
    kind: str = "text"  # "text" or "image"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return next(iter(self.maps.values())).shape[0] if self.maps else 0

    def scores(self, method: str | None = None, layer: int | None = None) -> np.ndarray:
        """(token,) attributions of `method` (default: the first) at `layer` (default: self.layer)."""
        if method is None:
            method = next(iter(self.maps))
        if method not in self.maps:
            raise ValueError(f"no method {method!r} in this explanation; it has {sorted(self.maps)}")
        return self.maps[method][self.layer if layer is None else layer]

    def to_pandas(self) -> Any:
        """A tidy DataFrame: one row per (method, layer, token); layer 1-based, as in the report."""
        from attnflow.display import explanation_frame

        return explanation_frame(self)

    def plot(self, methods: Sequence[str] | None = None, *, scale: str = "panel") -> Any:
        """A matplotlib Figure: one [layer x token] heatmap per method, as the CLI's PNG."""
        from attnflow.display import explanation_figure

        return explanation_figure(self, methods=methods, scale=scale)

    def show(self, methods: Sequence[str] | None = None, *, scale: str = "panel") -> Any:
        """Display `plot()` inline in a notebook (IPython), and return the figure."""
        fig = self.plot(methods, scale=scale)
        try:
            from IPython.display import Image, display
        except ImportError:  # not in IPython: the caller gets the figure to save
            return fig
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)  # a PNG: shown whatever matplotlib backend is active
        display(Image(data=buf.getvalue()))
        return fig

    def _repr_html_(self) -> str:
        """The CLI's interactive HTML view (method, layer, tokens shaded), in a notebook cell."""
        from attnflow.display import explanation_html

        return explanation_html(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (maps as nested lists; logits only up to MAX_LOGITS_IN_DICT entries)."""
        d: dict[str, Any] = {
            "kind": self.kind,
            "text": self.text,
            "tokens": list(self.tokens),
            "layer": self.layer,
            "row": self.row,
            "prediction": self.prediction,
            "label": self.label,
            "maps": {m: np.asarray(v, dtype=np.float64).tolist() for m, v in self.maps.items()},
        }
        if self.logits is not None and self.logits.size <= MAX_LOGITS_IN_DICT:
            d["logits"] = np.asarray(self.logits, dtype=np.float64).tolist()
        if self.groups is not None:
            d["groups"] = [list(g) for g in self.groups]
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Explanation:
        return cls(
            tokens=list(d["tokens"]),
            maps={m: np.asarray(v, dtype=np.float64) for m, v in d["maps"].items()},
            layer=int(d["layer"]),
            row=d["row"],
            logits=None if d.get("logits") is None else np.asarray(d["logits"]),
            prediction=d.get("prediction"),
            label=d.get("label"),
            text=d.get("text"),
            groups=d.get("groups"),
            kind=d.get("kind", "text"),
            meta=dict(d.get("meta") or {}),
        )

    def save(self, path: str | Path) -> Path:
        """Write this explanation as .json or .safetensors (by the suffix of `path`)."""
        return save_explanations([self], path)


def save_explanations(explanations: Sequence[Explanation], path: str | Path) -> Path:
    """Write explanations to `path`: ``.json`` (a list of `Explanation.to_dict`) or ``.safetensors``
    (tensor ``"{i}/{method}"`` = map [layer, token] of input i; the rest as JSON in the metadata
    under ``"explanations"``). Written atomically (temporary file, then rename)."""
    from attnflow.io import write_bytes

    path = Path(path)
    if path.suffix == ".json":
        text = json.dumps([e.to_dict() for e in explanations], ensure_ascii=False)
        return write_bytes(path, text.encode("utf-8"))
    if path.suffix == ".safetensors":
        from safetensors.numpy import save

        tensors = {
            f"{i}/{m}": np.ascontiguousarray(v, dtype=np.float32)
            for i, e in enumerate(explanations)
            for m, v in e.maps.items()
        }
        rest = []
        for e in explanations:
            d = e.to_dict()
            d.pop("maps")
            d["methods"] = list(e.maps)
            rest.append(d)
        return write_bytes(
            path, save(tensors, metadata={"explanations": json.dumps(rest, ensure_ascii=False)})
        )
    raise ValueError(f"unknown explanation file type {path.suffix!r}: use .json or .safetensors")


def load_explanations(path: str | Path) -> list[Explanation]:
    """Read what `save_explanations` wrote (.json or .safetensors).

    Raises FileNotFoundError for a missing file and ValueError (attnflow.io.ArtifactError) naming
    the file and what is wrong with it for anything else: not JSON / safetensors, or not a list of
    explanations (tokens, maps [layer, token] per method, layer, row).
    """
    from attnflow.io import ArtifactError

    path = Path(path)
    if path.suffix not in (".json", ".safetensors"):
        raise ValueError(f"unknown explanation file type {path.suffix!r}: use .json or .safetensors")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such explanations file")
    try:
        records = _read_explanation_json(path) if path.suffix == ".json" else _read_explanation_tensors(path)
        if not isinstance(records, list):
            raise ArtifactError(f"expected a list of explanations, found a {type(records).__name__}")
        return [_explanation_from_record(d, i) for i, d in enumerate(records)]
    except ArtifactError as exc:
        raise ArtifactError(f"{path}: not an explanations file: {exc}") from None
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ArtifactError(f"{path}: not an explanations file ({type(exc).__name__}: {first})") from exc


def _read_explanation_json(path: Path) -> Any:
    from attnflow.io import ArtifactError

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"not UTF-8 text (byte offset {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})") from None


def _read_explanation_tensors(path: Path) -> list[Any]:
    from safetensors import SafetensorError, safe_open

    from attnflow.io import ArtifactError

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            if "explanations" not in meta:
                raise ArtifactError(
                    "no 'explanations' entry in its metadata (not written by save_explanations)"
                )
            try:
                rest = json.loads(meta["explanations"])
            except json.JSONDecodeError as exc:
                raise ArtifactError(f"its 'explanations' metadata is not valid JSON ({exc.msg})") from None
            if not isinstance(rest, list):
                raise ArtifactError(f"its 'explanations' metadata is a {type(rest).__name__}, not a list")
            names = set(f.keys())
            for i, d in enumerate(rest):
                if not isinstance(d, dict) or not isinstance(d.get("methods"), list):
                    raise ArtifactError(f"explanation {i} has no list of methods in the metadata")
                missing = [f"{i}/{m}" for m in d["methods"] if f"{i}/{m}" not in names]
                if missing:
                    raise ArtifactError(f"tensor(s) {', '.join(missing)} missing")
                d["maps"] = {m: f.get_tensor(f"{i}/{m}").astype(np.float64) for m in d.pop("methods")}
            return rest
    except SafetensorError as exc:
        raise ArtifactError(f"not a readable safetensors file ({exc})") from None


def _explanation_from_record(d: Any, i: int) -> Explanation:
    """Explanation.from_dict with the layout checked; ArtifactError says what is wrong."""
    from attnflow.io import ArtifactError

    if not isinstance(d, dict):
        raise ArtifactError(f"explanation {i} is a {type(d).__name__}, not an object")
    missing = [k for k in ("tokens", "maps", "layer", "row") if k not in d]
    if missing:
        raise ArtifactError(f"explanation {i} lacks {', '.join(missing)}")
    tokens, maps = d["tokens"], d["maps"]
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ArtifactError(f"explanation {i}: tokens must be a list of strings")
    if not isinstance(maps, dict) or not maps:
        raise ArtifactError(f"explanation {i}: maps must be a non-empty object of method -> [layer, token]")
    for m, v in maps.items():
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            raise ArtifactError(f"explanation {i}: map {m!r} is not a numeric [layer, token] table") from None
        if arr.ndim != 2 or arr.shape[1] != len(tokens):
            raise ArtifactError(
                f"explanation {i}: map {m!r} has shape {arr.shape}, expected (layers, {len(tokens)})"
            )
    if isinstance(d["layer"], bool) or not isinstance(d["layer"], int):
        raise ArtifactError(f"explanation {i}: layer must be an integer, got {d['layer']!r}")
    return Explanation.from_dict(d)
