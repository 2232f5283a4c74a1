"""Correlations, faithfulness and agreement scores, summaries: arrays in, floats and tables out.

numpy / scipy only, except the long tables of ``agreement_table`` (pandas, imported on call).
"""

from .agreement import AGREEMENTS, agreement_samples, agreement_table, kendall_tau, top_k_overlap
from .correlate_samples import AUTHORS_EXCLUDE, UNDEFINED, correlate_samples
from .correlation_table import correlation_table
from .faithfulness import aopc_comprehensiveness, aopc_sufficiency, perturbation_auc
from .spearman import SPEARMAN_METHODS, spearman
from .summarize import summarize

__all__ = [
    "AGREEMENTS",
    "AUTHORS_EXCLUDE",
    "SPEARMAN_METHODS",
    "UNDEFINED",
    "agreement_samples",
    "agreement_table",
    "aopc_comprehensiveness",
    "aopc_sufficiency",
    "correlate_samples",
    "correlation_table",
    "kendall_tau",
    "perturbation_auc",
    "spearman",
    "summarize",
    "top_k_overlap",
]
