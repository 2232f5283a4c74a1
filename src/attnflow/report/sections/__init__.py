"""The report's sections, in order: each ``section(ctx)`` adds its blocks to the context."""

from . import (
    accuracy,
    claims,
    curves,
    faithfulness,
    findings,
    generation,
    heads,
    learning,
    maps,
    overview,
    paper_tables,
    pronouns,
    provenance,
    recipes,
    seeds,
    sensitivity,
)

SECTIONS = (
    overview.section,
    accuracy.section,
    learning.section,
    paper_tables.section,
    claims.ledger_section,
    claims.section,
    sensitivity.section,
    curves.section,
    heads.section,
    faithfulness.section,
    generation.section,
    pronouns.section,
    maps.section,
    seeds.section,
    recipes.section,
    provenance.section,
    findings.section,
)

__all__ = ["SECTIONS"]
