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
    limitations,
    machines,
    maps,
    overview,
    paper_tables,
    pronouns,
    provenance,
    recipes,
    samples,
    seeds,
    sensitivity,
)

SECTIONS = (
    overview.section,
    accuracy.section,
    learning.section,
    paper_tables.section,
    samples.section,
    claims.ledger_section,
    claims.section,
    limitations.section,
    machines.section,
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
