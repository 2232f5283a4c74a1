"""The report's sections, in order: each ``section(ctx)`` adds its blocks to the context."""

from . import (
    accuracy,
    curves,
    faithfulness,
    findings,
    generation,
    heads,
    maps,
    overview,
    paper_tables,
    recipes,
    seeds,
    sensitivity,
)

SECTIONS = (
    overview.section,
    accuracy.section,
    paper_tables.section,
    sensitivity.section,
    curves.section,
    heads.section,
    faithfulness.section,
    generation.section,
    maps.section,
    seeds.section,
    recipes.section,
    findings.section,
)

__all__ = ["SECTIONS"]
