"""
The stable train / check split of labelled queries.

A query's side is decided by a hash of its normalised text alone, so the same query lands on the
same side in every export, in every `knowledge adapt --labels` run and on every machine, and a
query labelled twice (or by two reviewers) can never sit on both sides. Training reads only the
`train` side; verdicts judge on the `check` side.

Usage example:

```python
from pipelines.labels.split import label_split, normalised_query

label_split("Disk almost full on node-7")  # 'train' or 'check', the same every time
normalised_query("  Disk  almost FULL ") == normalised_query("disk almost full")  # True
```
"""

import hashlib
import re

CHECK_SHARE = 0.3  # about 3 labels in 10 are held out for the verdict
SPLITS = ("train", "check")
_BUCKETS = 10_000


def normalised_query(query: str) -> str:
    """Case folded, whitespace runs collapsed: two spellings of one query are one query."""
    return re.sub(r"\s+", " ", query).strip().casefold()


def label_split(query: str, check_share: float = CHECK_SHARE) -> str:
    """`check` for about `check_share` of all queries, else `train`, by a hash of the normalised query."""
    if not 0.0 < check_share < 1.0:
        raise ValueError(f"check_share must lie strictly between 0 and 1, got {check_share!r}")
    digest = hashlib.sha256(normalised_query(query).encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % _BUCKETS
    return "check" if bucket < check_share * _BUCKETS else "train"
