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


# File suffixes `GenerationExplanation.save` takes (any case): pictures and data.
SAVE_FORMATS = ("html", "png", "json", "safetensors")
TITLE_CHARS = 60  # characters of the prompt / completion in a title


@dataclass(repr=False)
class GenerationExplanation:
    """What `explain_generation` returns: M per method plus everything needed to read and re-check it.

    maps[method]: (n_generated, n_columns, layers) float64 -- row t explains generated token t
    (model row rows[t] = P + t - 1); columns are the prompt tokens (over="prompt") or every token
    of the teacher-forced sequence (over="all"). It shows and saves as an `attnflow.hf.Explanation`
    does: `show()`, `plot()`, `save(".html" / ".png" / ".json" / ".safetensors")`, a one-line
    repr, and the interactive page in a notebook; a removed attention sink is drawn as removed
    (grey, hatched, its label marked "⊘"), not as a low score.
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

    @property
    def removed_columns(self) -> list[int]:
        """Columns of an attention sink whose attention was moved away or dropped (sinks handled)."""
        if self.options.get("sink_mode", "none") == "none":
            return []
        return [int(j) for j in self.options.get("sink_keys", []) if 0 <= int(j) < len(self.columns)]

    def column_labels(self) -> list[str]:
        """The columns' labels as pictures show them: a removed sink marked "⊘"."""
        from attnflow.display import REMOVED_MARK

        removed = set(self.removed_columns)
        return [REMOVED_MARK + c if k in removed else c for k, c in enumerate(self.columns)]

    def _sink_text(self) -> str:
        keys = [int(j) for j in self.options.get("sink_keys", [])]
        mode = self.options.get("sink_mode", "none")
        found = ", ".join(
            f"{self.columns[j]!r} (token {j})" if j < len(self.columns) else f"token {j}" for j in keys
        )
        if mode == "none":
            return f"sinks kept: {found}" if found else "sinks: none"
        return f"sink {found} removed ({mode})" if found else f"sinks {mode}: none found"

    def __repr__(self) -> str:
        """One line: prompt, completion, sizes, methods and what was done about sinks (no arrays)."""
        from attnflow.viz import shorten

        parts = [
            f"prompt={shorten(self.prompt, 40)!r}", f"completion={shorten(self.completion, 30)!r}",
            f"generated={self.n_generated}", f"columns={len(self.columns)}", f"layers={self.num_layers}",
            f"methods={self.methods}", self._sink_text(),
        ]  # fmt: skip
        return f"GenerationExplanation({', '.join(parts)})"

    def html_item(
        self, methods: Sequence[str] | None = None, *, layer: int | str = "mean", token: int = 0
    ) -> dict[str, Any]:
        """This generation as one item of `attnflow.viz.html_page` ([generated token x column] per method)."""
        from attnflow.viz import shorten

        chosen = self._methods(methods)
        return {
            "title": f"{shorten(self.prompt, TITLE_CHARS)} → {shorten(self.completion, TITLE_CHARS)}",
            "subtitle": f"{self._layer_text(layer)} · {self._sink_text()} · receptive field "
            f"{self.options.get('receptive_field', 'none')}",
            "columns": self.column_labels(),
            "rows": [f"{k}: {tok}" for k, tok in enumerate(self.generated_tokens)],
            "maps": {m: self.matrix(m, layer) for m in chosen},
            "row": int(token) % max(self.n_generated, 1),
            "method": chosen[-1],
            "muted": sorted({*self.special_columns, *self.removed_columns}),
        }

    def plot(
        self, methods: Sequence[str] | None = None, *, layer: int | str = "mean", scale: str = "uniform"
    ) -> Any:
        """A matplotlib Figure: per method, [generated token x column] at `layer` (default the mean
        over layers, as Deb 2021), drawn as `attnflow explain`'s heatmaps; special tokens grey and
        removed sinks grey and hatched."""
        from attnflow.viz import heatmap_figure, shorten

        chosen = self._methods(methods)
        columns = "prompt token" if self.options.get("over", "prompt") == "prompt" else "token"
        fig = heatmap_figure(
            {m: self.matrix(m, layer) for m in chosen}, columns=self.column_labels(),
            rows=[f"{k}: {tok}" for k, tok in enumerate(self.generated_tokens)], row_name="generated token",
            column_name=columns, scale=scale, muted_columns=sorted({*self.special_columns, *self.removed_columns}),
            title=f"“{shorten(self.prompt, TITLE_CHARS)}” → “{shorten(self.completion, TITLE_CHARS)}”\n"
            f"{self._layer_text(layer)} · {self._sink_text()}",
        )  # fmt: skip
        hatch_columns(fig, self.removed_columns)
        return fig

    def show(
        self, methods: Sequence[str] | None = None, *, layer: int | str = "mean", scale: str = "uniform"
    ) -> Any:
        """Show the explanation and return `plot()`'s figure: inline in a notebook, else the
        interactive page in the web browser (`attnflow.display.open_items`), as `Explanation.show`."""
        from attnflow.display import in_notebook, open_items, show_inline

        fig = self.plot(methods, layer=layer, scale=scale)
        if in_notebook():
            show_inline(fig)
        else:
            open_items(
                [self.html_item(methods, layer=layer)], title="attnflow generate", row_name="generated token"
            )
        return fig

    def _repr_html_(self) -> str:
        """The interactive page (method, generated token, columns shaded), in a notebook cell."""
        from attnflow.display import items_frame

        return items_frame([self.html_item()], lines=len(self.columns), rows=self.n_generated,
                           row_name="generated token")  # fmt: skip

    def _layer_text(self, layer: int | str) -> str:
        n = self.num_layers
        return f"mean over {n} layers" if layer == "mean" else f"layer {int(layer) % max(n, 1) + 1}/{n}"

    def _methods(self, methods: Sequence[str] | None) -> list[str]:
        chosen = self.methods if methods is None else [methods] if isinstance(methods, str) else list(methods)
        if unknown := [m for m in chosen if m not in self.maps]:
            raise ValueError(f"no method {unknown} in this explanation; it has {sorted(self.maps)}")
        return chosen

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
        """Write this explanation to `path` in the format its suffix names (any case), atomically:
        ``.html`` the interactive page, ``.png`` `plot()`'s picture, ``.json`` / ``.safetensors``
        the data (`save_generations`, read back by `load_generations`)."""
        from attnflow.explanation_file import file_format

        fmt = file_format(path, SAVE_FORMATS)
        if fmt == "html":
            from attnflow.viz import write_html

            return write_html(
                Path(path), [self.html_item()], title="attnflow generate", row_name="generated token"
            )
        if fmt == "png":
            from attnflow.viz import save_png

            return save_png(Path(path), self.plot())
        return save_generations([self], path)


def hatch_columns(fig: Any, columns: Sequence[int]) -> None:
    """Hatch `columns` in every heatmap panel of `fig`: a removed sink is drawn as removed."""
    if not columns:
        return
    from matplotlib.patches import Rectangle

    panels = [ax for ax in fig.axes if ax.images]  # not the colour bars
    for ax in panels:
        rows = ax.images[0].get_array().shape[0]
        for c in columns:
            ax.add_patch(Rectangle((c - 0.5, -0.5), 1, rows, fill=False, hatch="////", edgecolor="#999",
                                   linewidth=0))  # fmt: skip
    if panels:  # the legend under the last panel says what the hatching means
        ax = panels[-1]
        ax.set_xlabel(f"{ax.get_xlabel()}\nhatched (⊘): attention sink removed, its attention moved away",
                      fontsize=8, parse_math=False)  # fmt: skip


def save_generations(explanations: Sequence[GenerationExplanation], path: str | Path) -> Path:
    """Write explanations in attnflow's explanations format (`attnflow.explanation_file`, kind
    "generation"): ``.json`` (the header with each `to_dict`) or ``.safetensors`` (tensors
    ``"{i}/maps/{method}"`` (n, columns, layers), ``"{i}/coverage/{method}"``, ``"{i}/sinks"``,
    ``"{i}/head_sinks"``; the rest in the header's records), atomically."""
    from attnflow.explanation_file import file_format, write_json_records, write_tensor_records
    from attnflow.io import ArtifactError

    path = Path(path)
    fmt = file_format(path)  # the suffix in any case: x.JSON is JSON
    try:  # what loading would refuse is refused before a byte is written
        for i, e in enumerate(explanations):
            _finite(e, i, path, as_float32=fmt == "safetensors")
    except ArtifactError as exc:
        raise ValueError(f"cannot save {exc}") from None
    if fmt == "json":
        return write_json_records(path, KIND, [e.to_dict() for e in explanations])
    if fmt == "safetensors":
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


def _finite(
    e: GenerationExplanation, i: int, path: Path, *, as_float32: bool = False
) -> GenerationExplanation:
    """`e` when its maps hold only finite numbers (also once stored as float32, `as_float32`); else
    an error naming the file, record, method and the first bad entry (the same check when saving)."""
    from attnflow.explanation_file import check_finite

    maps = e.maps
    if as_float32:
        with np.errstate(over="ignore"):  # an overflow to inf is what is refused
            maps = {m: np.asarray(v, dtype=np.float32) for m, v in maps.items()}
    check_finite(maps, f"{path}: explanation {i}", axes=("generated token", "column", "layer"))
    return e


def load_generations(path: str | Path) -> list[GenerationExplanation]:
    """Read what `save_generations` wrote (this version or an older one); a newer version or
    another kind of file is refused naming the file (attnflow.io.ArtifactError)."""
    from attnflow.explanation_file import file_format, read_json_records, read_tensor_records
    from attnflow.io import ArtifactError

    path = Path(path)
    fmt = file_format(path)  # the suffix in any case, as when saving
    try:
        if fmt == "json":
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
