"""The `Explanation` of one input (maps [layer, token] per method) and its files (.json / .safetensors)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

KIND = "text"  # attnflow.explanation_file's kind of these files
# Logits longer than this (a language model's vocabulary) are left out of `Explanation.to_dict`.
MAX_LOGITS_IN_DICT = 1024


@dataclass(repr=False)
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

    @property
    def probability(self) -> float | None:
        """softmax(logits)[prediction]: the model's probability of its prediction (None without logits).

        >>> Explanation(["a"], {"raw": np.ones((1, 1))}, 0, 0, logits=np.log([1.0, 3.0]), prediction=1).probability
        0.75
        """
        if self.logits is None or self.prediction is None:
            return None
        z = np.asarray(self.logits, dtype=np.float64).ravel()
        if not 0 <= int(self.prediction) < z.size:
            return None
        z = np.exp(z - z.max())  # shifted: no overflow
        return float(z[int(self.prediction)] / z.sum())

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

    def plot(self, methods: Sequence[str] | None = None, *, scale: str = "uniform") -> Any:
        """A matplotlib Figure: one [layer x token] heatmap per method, as the CLI's PNG.

        scale: the shading rule (`attnflow.viz.heatmap_figure`); "uniform", the default of every
        attnflow picture, shades each token's share of the method's strongest layer against the
        uniform share 1/n, one scale for every layer (`attnflow.viz.scale`); the title gives the
        prediction and its probability.
        """
        from attnflow.display import explanation_figure

        return explanation_figure(self, methods=methods, scale=scale)

    def show(self, methods: Sequence[str] | None = None, *, scale: str = "uniform") -> Any:
        """Show the explanation and return `plot()`'s figure.

        In a notebook (an IPython kernel): the figure inline. Elsewhere (a script, a terminal):
        the interactive HTML page is written to a temporary file and opened in the web browser
        when there is a display to open it on; a line on stderr says which file, and whether a
        browser was asked to open it.
        """
        fig = self.plot(methods, scale=scale)
        if _in_notebook():
            import io

            from IPython.display import Image, display

            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=100)  # a PNG: shown whatever matplotlib backend is active
            display(Image(data=buf.getvalue()))
            return fig
        from attnflow.display import open_page

        open_page(self, methods=methods)
        return fig

    def __repr__(self) -> str:
        """One line: the text, its size, the methods and the prediction (the maps left out)."""
        text = self.text if self.text is None or len(self.text) <= 40 else self.text[:37] + "..."
        parts = [f"text={text!r}"] if self.text is not None else []
        parts += [f"tokens={len(self.tokens)}", f"layers={self.num_layers}", f"methods={list(self.maps)}"]
        parts.append(f"layer={self.layer}")
        if self.label is not None or self.prediction is not None:
            parts.append(f"prediction={self.label if self.label is not None else self.prediction!r}")
        if isinstance(self.meta, dict) and self.meta.get("sinks"):  # what was done about attention sinks
            from attnflow.display import sink_text

            parts.append(str(sink_text(self)))
        return f"Explanation({', '.join(parts)})"

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
        """Write this explanation to `path`, in the format its suffix names, and return the path.

        ``.json`` / ``.safetensors``: the data (`save_explanations`, read back by
        `load_explanations`); ``.html``: the CLI's interactive page; ``.png``: `plot()`'s picture.
        """
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".html":
            from attnflow.display import explanation_item
            from attnflow.viz import write_html

            return write_html(path, [explanation_item(self)], title="attnflow")
        if suffix == ".png":
            from attnflow.viz import save_png

            return save_png(path, self.plot())
        if suffix not in (".json", ".safetensors"):
            raise ValueError(
                f"cannot save an explanation as {path.name!r}: use .html, .png, .json or .safetensors"
            )
        return save_explanations([self], path)


class Explanations(list):
    """A list of `Explanation`s (what `explain_texts` and `load_explanations` return) that is also
    one table: `to_pandas()` stacks every explanation's tidy frame, and `save(path)` writes them all.

    A plain list works everywhere an `Explanations` does; `explanations_frame(list)` gives its table.
    """

    def to_pandas(self) -> Any:
        """One tidy DataFrame of every explanation (`explanations_frame`)."""
        return explanations_frame(self)

    def save(self, path: str | Path) -> Path:
        """Write every explanation to `path` (.json / .safetensors, `save_explanations`)."""
        return save_explanations(self, path)


# The columns `explanations_frame` puts before each explanation's own (method, layer, position, token, score).
INPUT_COLUMNS = ("input", "text", "label", "probability")


def explanations_frame(explanations: Sequence[Explanation]) -> Any:
    """One tidy pandas DataFrame of many explanations (ferret's `get_dataframe`, long form): one row per
    (input, method, layer, token) with columns input (0-based, the position in `explanations`), text,
    label, probability (of the prediction; NaN without logits), then `Explanation.to_pandas()`'s
    method, layer (1-based), position, token, score.

    Filter or pivot it as usual, e.g. the last layer's flow per input and token:
    ``df[(df.method == "flow") & (df.layer == df.layer.max())].pivot(index="input", columns="position",
    values="score")``.
    """
    from attnflow.display import explanation_frame

    frames = []
    for i, e in enumerate(explanations):
        if not isinstance(e, Explanation):
            raise TypeError(f"explanations[{i}] is a {type(e).__name__}, not an Explanation")
        f = explanation_frame(e)
        p = e.probability
        head = {"input": i, "text": e.text, "label": e.label, "probability": float("nan") if p is None else p}
        for k, (name, value) in enumerate(head.items()):
            f.insert(k, name, value)
        frames.append(f)
    if not frames:
        raise ValueError("no explanations to put in a table")
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def save(explanations: Explanation | Sequence[Explanation], path: str | Path) -> Path:
    """`attnflow.save`: write one explanation or a list to `path` (.json / .safetensors; also
    .html / .png for one, as `Explanation.save`). Read it back with `attnflow.load`."""
    if isinstance(explanations, Explanation):
        return explanations.save(path)
    return save_explanations(explanations, path)


def load(path: str | Path) -> Explanations:
    """`attnflow.load`: the explanations `attnflow.save` (or the CLI's --format json / safetensors)
    wrote, as an `Explanations` list (`load_explanations`)."""
    return load_explanations(path)


def _in_notebook() -> bool:
    """Whether this runs in an IPython kernel (a notebook), where display() draws inline."""
    from attnflow.display import in_notebook

    return in_notebook()


def save_explanations(explanations: Sequence[Explanation], path: str | Path) -> Path:
    """Write explanations to `path` in attnflow's explanations format (`attnflow.explanation_file`,
    kind "text"): ``.json`` (the header with each `Explanation.to_dict`) or ``.safetensors``
    (tensor ``"{i}/{method}"`` = map [layer, token] of input i; the rest in the header's records).
    Written atomically (temporary file, then rename)."""
    from attnflow.explanation_file import check_finite, file_format, write_json_records, write_tensor_records
    from attnflow.io import ArtifactError

    path = Path(path)
    fmt = file_format(path)  # the suffix in any case: x.JSON is JSON
    dicts = [e.to_dict() for e in explanations]
    try:  # what loading would refuse (a NaN, a map of the wrong shape) is refused before a byte is written
        for i, d in enumerate(dicts):
            _explanation_from_record(d, i)
    except ArtifactError as exc:
        raise ValueError(f"cannot save {path}: {exc}") from None
    if fmt == "json":
        return write_json_records(path, KIND, dicts)
    with np.errstate(over="ignore"):  # an overflow is refused just below, naming the map
        tensors = {
            f"{i}/{m}": np.asarray(v, dtype=np.float32)
            for i, e in enumerate(explanations)
            for m, v in e.maps.items()
        }
    for i, e in enumerate(explanations):  # a score beyond float32's range would load as inf
        try:
            check_finite({m: tensors[f"{i}/{m}"] for m in e.maps}, f"explanation {i} (as float32)")
        except ArtifactError as exc:
            raise ValueError(f"cannot save {path}: {exc}") from None
    records = []
    for e, d in zip(explanations, dicts, strict=True):
        d.pop("maps")
        d["methods"] = list(e.maps)
        records.append(d)
    return write_tensor_records(path, KIND, records, tensors)


def load_explanations(path: str | Path) -> Explanations:
    """Read what `save_explanations` wrote (.json or .safetensors; this version or an older one).

    Raises FileNotFoundError for a missing file and ValueError (attnflow.io.ArtifactError) naming
    the file and what is wrong with it for anything else: not JSON / safetensors, a newer version
    or another kind of explanations, or not a list of explanations (tokens, maps [layer, token]
    per method, layer, row).
    """
    from attnflow.explanation_file import file_format, read_json_records, read_tensor_records
    from attnflow.io import ArtifactError

    path = Path(path)
    fmt = file_format(path)  # the suffix in any case, as when saving
    if fmt == "json":
        records = read_json_records(path, KIND)["records"]
    else:
        head, get, _ = read_tensor_records(path, KIND)
        records = head["records"]
    try:
        if fmt == "safetensors":
            for i, d in enumerate(records):
                if not isinstance(d, dict) or not isinstance(d.get("methods"), list):
                    raise ArtifactError(f"explanation {i} has no list of methods")
                for m in d["methods"]:  # by the declared shape, before a byte of the tensor is read
                    _check_declared_shape(get.shape(f"{i}/{m}"), f"{i}/{m}", d.get("tokens"))
                d["maps"] = {m: get(f"{i}/{m}").astype(np.float64) for m in d.pop("methods")}
        return Explanations(_explanation_from_record(d, i) for i, d in enumerate(records))
    except ArtifactError as exc:
        raise ArtifactError(f"{path}: not an explanations file: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field the checks do not cover
        first = (str(exc).splitlines() or [""])[0]
        raise ArtifactError(f"{path}: not an explanations file ({type(exc).__name__}: {first})") from exc


# More layers than any model has (the largest have ~130): a map declaring more is out of proportion.
MAX_LAYERS = 4096


def _check_declared_shape(shape: tuple[int, ...], name: str, tokens: Any) -> None:
    """A tensor's declared shape fits its record: [layer, token], len(tokens) columns, <= MAX_LAYERS rows."""
    from attnflow.io import ArtifactError

    n = len(tokens) if isinstance(tokens, list) else None
    if len(shape) != 2 or (n is not None and shape[1] != n) or shape[0] > MAX_LAYERS:
        raise ArtifactError(
            f"tensor {name} declares shape {shape}, out of proportion to its record: expected "
            f"(layers <= {MAX_LAYERS}, {n if n is not None else 'tokens'})"
        )


def _explanation_from_record(d: Any, i: int) -> Explanation:
    """Explanation.from_dict with the layout checked; ArtifactError says what is wrong."""
    from attnflow.explanation_file import check_finite
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
        check_finite({m: arr}, f"explanation {i}")  # the same check when saving
    layers = {m: np.shape(v)[0] for m, v in maps.items()}
    if len(set(layers.values())) > 1:
        raise ArtifactError(f"explanation {i}: its maps disagree on the number of layers ({layers})")
    if isinstance(d["layer"], bool) or not isinstance(d["layer"], int):
        raise ArtifactError(f"explanation {i}: layer must be an integer, got {d['layer']!r}")
    n_layers = next(iter(layers.values()))
    if not 0 <= d["layer"] < n_layers:
        raise ArtifactError(
            f"explanation {i}: layer {d['layer']} is outside its maps' {n_layers} layers (0..{n_layers - 1}, 0-based)"
        )
    if d.get("logits") is not None:
        try:
            np.asarray(d["logits"], dtype=np.float64)
        except (TypeError, ValueError):
            raise ArtifactError(f"explanation {i}: logits must be numbers, got {d['logits']!r:.60}") from None
    if not isinstance(d.get("meta") or {}, dict):
        raise ArtifactError(f"explanation {i}: meta must be an object, got {type(d['meta']).__name__}")
    return Explanation.from_dict(d)
