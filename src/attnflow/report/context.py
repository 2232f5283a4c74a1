"""What every report section reads and writes: the loaded inputs, the config, the blocks and figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from attnflow.paths import StudyPaths

from . import figures
from .document import Block, Image
from .inputs import TaskInputs

__all__ = ["FIGURES", "Context", "get"]

FIGURES = "figures"  # below the reports folder


def get(tree: Mapping[str, Any], dotted: str) -> Any:
    """``tree["a"]["b"]`` for ``"a.b"``; None when any part is missing."""
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


@dataclass
class Context:
    paths: StudyPaths
    inputs: dict[str, TaskInputs]
    config: Mapping[str, Any]
    comparison: pd.DataFrame  # frames.comparison_frame: every published cell, ours beside it
    sweep: pd.DataFrame | None = None  # stacked job tables of a seed sweep, column "seed"
    recipes: pd.DataFrame | None = None  # stacked job tables of a recipe sweep, column "overrides"
    sweep_faithfulness: pd.DataFrame | None = None  # a seed sweep's faithfulness tables, columns seed, task
    recipe_jobs: list[dict[str, Any]] = field(default_factory=list)  # its jobs.json "jobs"
    sweep_jobs: list[dict[str, Any]] = field(default_factory=list)  # the seed sweep's jobs.json "jobs"
    code: Mapping[str, Any] | None = None  # the code of this run (attnflow.sweep.code_state); None: unknown
    stages: pd.DataFrame | None = None  # stage runs with their commit and code (stage_times.with_code)
    left_out: dict[int, list[str]] = field(default_factory=dict)  # seed -> why: sweep jobs of other code
    blocks: list[Block] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)  # where each figure goes: reports/figures/<name>
    staging: Path | None = None  # drawn here first, moved to `figures` once the whole report is made

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)

    def figure(self, fig: Any, name: str, alt: str, caption: str = "") -> None:
        final = self.paths.reports / FIGURES / name
        figures.save_figure(fig, self.staging / name if self.staging is not None else final)
        self.figures.append(final)
        self.add(Image(f"{FIGURES}/{name}", alt, caption))

    def labels(self, task: str) -> tuple[str, ...]:
        from attnflow.tasks import TASKS

        return TASKS[task].labels if task in TASKS else ()
