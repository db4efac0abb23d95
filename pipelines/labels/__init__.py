"""Reviewers' labels of lookups: where they are stored, how they split, what they become (eval sets, training pairs)."""
