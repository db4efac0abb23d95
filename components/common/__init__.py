"""Shared helpers: text normalisation, markdown sections, embedding models, score semantics."""
