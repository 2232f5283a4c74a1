"""Which explanation methods exist, and what each needs beside the attention probabilities: views
of the method records (:mod:`attnflow.methods`, where they are kept in step with `register`).

Kept for the code that asks one question of the records (config validation, the capture stage);
light: importing it loads neither torch nor the flow solver.
"""

from __future__ import annotations

from attnflow.methods import EXPLAINER_INPUTS, needed_inputs
from attnflow.methods import MODEL_METHODS as _MODEL

__all__ = ["EXPLAINER_INPUTS", "MODEL_METHODS", "needed_inputs"]

# Methods computed from the model itself (their own forward and backward pass), not from its
# attentions: the library and the CLI offer them beside EXPLAINERS (attnflow.hf.MODEL_METHODS).
# (their names when this module is first imported: the package's and the ATTNFLOW_PLUGINS ones;
# attnflow.methods.MODEL_METHODS is the live view, with methods registered later).
MODEL_METHODS: tuple[str, ...] = tuple(_MODEL)
