"""Evaluation: eval sets, running the lookup pipeline over them, metrics, reliability and system comparison."""
