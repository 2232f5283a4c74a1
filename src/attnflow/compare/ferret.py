"""attnflow's methods as ferret explainers, so ferret's evaluators can judge them.

`AttnflowExplainer(model, tokenizer, method)` is a ``ferret.BaseExplainer``:
``compute_feature_importance(text, target)`` tokenizes with ferret's own tokenization and returns
a ``ferret.Explanation`` with one score per token ([CLS] and [SEP] included, as ferret's gradient
explainers), the scores of `attnflow.compare.token_attributions`. ferret's ``Benchmark`` then
computes AOPC comprehensiveness / sufficiency (DeYoung et al., ACL 2020) and τ-LOO on it, next to
ferret's own explainers.

ferret is optional (``pip install "attnflow[compare]"``; ferret-xai 0.4.1 to 0.4.x, whose
``ferret.explainers.BaseExplainer`` this class extends): this module imports without it, and the
explainer raises ImportError saying what is wrong when it cannot be used -- ferret missing, a
version without that class, or ferret failing to import (the error it raised). Usage::

    from ferret import Benchmark
    from attnflow.compare.ferret import AttnflowExplainer
    bench = Benchmark(model, tokenizer, explainers=[AttnflowExplainer(model, tokenizer, "rollout")])
    explanations = bench.explain("a good movie", target=1)
    evaluations = bench.evaluate_explanations(explanations, target=1)
    explanation_table(explanations)   # explainers x tokens (ferret's show_table crashes on pandas 3)
    evaluation_table(evaluations)     # explainers x measures (show_evaluation_table's replacement)

The two tables are plain pandas frames built from ferret's results (``Explanation.explainer``,
``.tokens``, ``.scores``; ``ExplanationEvaluation.evaluation_scores``): ferret's own ``show_table``
calls a pandas parser internal that pandas 3 removed, and ``show_evaluation_table(...,
apply_style=False)`` calls ``DataFrame.format``, which no pandas has. Colour them with
``table.style.background_gradient(cmap="RdBu_r", vmin=-1, vmax=1)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .scores import method_options, token_attributions

if TYPE_CHECKING:
    import pandas as pd

# The ferret-xai versions this adapter supports (also the bound of the [compare] extra): both
# 0.4.1 (what pip picks next to transformers 5) and 0.4.2 define ferret.explainers.BaseExplainer.
SUPPORTED = ">=0.4.1,<0.5"
INSTALL_HINT = f'pip install "attnflow[compare]" (ferret-xai{SUPPORTED})'

_IMPORT_ERROR: BaseException | None = None  # why ferret could not be used, said when it is needed
try:
    from ferret.explainers import BaseExplainer as _BaseExplainer
except Exception as exc:  # a broken dependency of ferret raises anything on import
    _BaseExplainer = object
    _IMPORT_ERROR = exc

__all__ = [
    "INSTALL_HINT",
    "SUPPORTED",
    "AttnflowExplainer",
    "evaluation_table",
    "explanation_table",
    "require_ferret",
]

# Options of token_attributions a call may override (ferret passes **explainer_args through).
_OPTIONS = ("layer", "rows", "residual", "heads")


def _installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ferret-xai")
    except PackageNotFoundError:
        return None


def require_ferret() -> None:
    """Raise ImportError saying what is wrong when ferret (ferret-xai) cannot be used.

    Not installed: the install command. Installed but ferret.explainers has no BaseExplainer: its
    version and the supported ones. Installed but its import fails: the error it raised (often a
    dependency of ferret's that is missing or too new).
    """
    if _BaseExplainer is not object:
        return
    installed = _installed_version()
    exc = _IMPORT_ERROR
    if installed is None or (isinstance(exc, ModuleNotFoundError) and exc.name == "ferret"):
        raise ImportError(f"attnflow.compare.ferret needs ferret-xai, which is not installed: {INSTALL_HINT}")
    if isinstance(exc, ImportError) and "BaseExplainer" in str(exc):
        raise ImportError(
            f"ferret-xai {installed} has no ferret.explainers.BaseExplainer; attnflow supports "
            f"ferret-xai{SUPPORTED}: {INSTALL_HINT}"
        )
    first = (str(exc).splitlines() or [""])[0]
    raise ImportError(
        f"ferret-xai {installed} is installed but importing it failed: {type(exc).__name__}: {first}"
    ) from exc


class AttnflowExplainer(_BaseExplainer):
    """An attnflow method ("rollout", "flow", "raw", "chefer", "chefer_lrp", "attnlrp") as a
    ferret explainer; NAME is "attnflow <method>" (with the layer when it is not the last)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        method: str = "rollout",
        **options: Any,
    ) -> None:
        """options: layer, rows, residual, heads of `attnflow.compare.method_options` (its defaults)."""
        require_ferret()
        self.options = method_options(method, **options)
        super().__init__(model, tokenizer)
        self.method = method

    @property
    def NAME(self) -> str:  # ferret's name for it
        return self._name(self.options["layer"])

    def _name(self, layer: int) -> str:
        at = "" if layer == -1 or self.method == "attnlrp" else f" (layer {layer})"
        return f"attnflow {self.method}{at}"

    def compute_feature_importance(self, text: str, target: int = 1, **explainer_args: Any) -> Any:
        """ferret's Explanation of `text` for class `target`: one score per token of ferret's
        tokenization. explainer_args may override layer, rows, residual or heads for this call."""
        from ferret.explainers.explanation import Explanation

        unknown = sorted(set(explainer_args) - set(_OPTIONS))
        if unknown:
            raise TypeError(f"unknown explainer arguments {unknown}; {self.NAME} takes {list(_OPTIONS)}")
        options = {**self.options, **explainer_args}
        item = self._tokenize(text)
        item = {k: v.to(self.device) for k, v in item.items()}
        scores = token_attributions(
            self.helper.model,
            item["input_ids"],
            item.get("attention_mask"),
            method=self.method,
            target=int(target),
            token_type_ids=item.get("token_type_ids"),
            **options,
        )[0]  # (T,)
        tokens = self.get_tokens(text)
        name = self._name(options["layer"])  # a per-call layer is named too
        return Explanation(text, tokens, scores[: len(tokens)].numpy(), name, int(target))


def _unique(names: Sequence[str]) -> list[str]:
    """Column names made unique by a suffix on repeats, as ferret's table meant to: a, b, a -> a, b, a.1.

    >>> _unique(["the", "film", "the", "the"])
    ['the', 'film', 'the.1', 'the.2']
    """
    seen: dict[str, int] = {}
    out = []
    for name in names:
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append(name if n == 0 else f"{name}.{n}")
    return out


def explanation_table(explanations: Sequence[Any], *, drop_special: bool = True) -> pd.DataFrame:
    """ferret's explanations of one text as one table: a row per explainer, a column per token.

    What ferret's ``Benchmark.show_table`` shows, without its styling helper (which needs a pandas
    internal gone in pandas 3): the scores of ``Explanation.scores`` under the tokens of the first
    explanation (every explainer of a ``Benchmark`` uses the same tokenization), repeated tokens
    made unique (``the``, ``the.1``), and, with ``drop_special``, the first and last tokens
    ([CLS], [SEP]) left out as ferret does. Raises ValueError when the explanations are empty or
    their tokens differ.
    """
    import pandas as pd

    if not explanations:
        raise ValueError("explanation_table: no explanations given")
    tokens = list(explanations[0].tokens)
    for e in explanations:
        if list(e.tokens) != tokens or len(e.scores) != len(tokens):
            raise ValueError(
                f"explanation_table: explainer {e.explainer!r} has {len(e.scores)} scores on tokens "
                f"{list(e.tokens)}, not the {len(tokens)} tokens {tokens} of the first explanation"
            )
    rows = {e.explainer: [float(x) for x in e.scores] for e in explanations}
    table = pd.DataFrame.from_dict(rows, orient="index", columns=_unique(tokens))
    table.index.name = "explainer"
    return table.iloc[:, 1:-1] if drop_special else table


def evaluation_table(evaluations: Sequence[Any]) -> pd.DataFrame:
    """ferret's evaluations as one table: a row per explainer, a column per measure (AOPC
    comprehensiveness, sufficiency, tau-LOO, ...), what ``show_evaluation_table`` shows.

    Raises ValueError when no evaluations are given.
    """
    import pandas as pd

    if not evaluations:
        raise ValueError("evaluation_table: no evaluations given")
    rows = {
        ev.explanation.explainer: {score.name: float(score.score) for score in ev.evaluation_scores}
        for ev in evaluations
    }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "explainer"
    return table
