"""Experiments: single runs, replicated A/B comparisons with confidence intervals, verdicts."""
