"""Correlations and summaries: arrays in, floats and tables out (numpy / scipy only)."""

from .aopc import aopc
from .correlate_samples import AUTHORS_EXCLUDE, UNDEFINED, correlate_samples
from .correlation_table import correlation_table
from .spearman import SPEARMAN_METHODS, spearman
from .summarize import summarize

__all__ = [
    "AUTHORS_EXCLUDE",
    "SPEARMAN_METHODS",
    "UNDEFINED",
    "aopc",
    "correlate_samples",
    "correlation_table",
    "spearman",
    "summarize",
]
