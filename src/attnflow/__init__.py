"""attnflow: attention rollout and attention flow, and the Abnar & Zuidema (2020) study."""

__version__ = "0.1.0"
