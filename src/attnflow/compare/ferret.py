"""attnflow's methods as ferret explainers, so ferret's evaluators can judge them.

`AttnflowExplainer(model, tokenizer, method)` is a ``ferret.BaseExplainer``:
``compute_feature_importance(text, target)`` tokenizes with ferret's own tokenization and returns
a ``ferret.Explanation`` with one score per token ([CLS] and [SEP] included, as ferret's gradient
explainers), the scores of `attnflow.compare.token_attributions`. ferret's ``Benchmark`` then
computes AOPC comprehensiveness / sufficiency (DeYoung et al., ACL 2020) and τ-LOO on it, next to
ferret's own explainers.

ferret is optional (``pip install --no-deps -r requirements-compare.txt``): this module imports
without it, and the explainer raises ImportError naming that file when it is missing. Usage::

    from ferret import Benchmark
    from attnflow.compare.ferret import AttnflowExplainer
    bench = Benchmark(model, tokenizer, explainers=[AttnflowExplainer(model, tokenizer, "rollout")])
    explanations = bench.explain("a good movie", target=1)
    evaluations = bench.evaluate_explanations(explanations, target=1)
"""

from __future__ import annotations

from typing import Any

from .scores import method_options, token_attributions

try:
    from ferret import BaseExplainer as _BaseExplainer
except ImportError:  # the explainer says what to install when it is used
    _BaseExplainer = object

__all__ = ["AttnflowExplainer", "require_ferret"]

INSTALL_HINT = "pip install --no-deps -r requirements-compare.txt"
# Options of token_attributions a call may override (ferret passes **explainer_args through).
_OPTIONS = ("layer", "rows", "residual", "heads")


def require_ferret() -> None:
    """Raise ImportError with the install command when ferret (ferret-xai) is missing."""
    if _BaseExplainer is object:
        raise ImportError(f"attnflow.compare.ferret needs ferret-xai: {INSTALL_HINT}")


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
