"""
The held-out split of `knowledge adapt`: anchors the verdict judges on and training never sees.

A seeded sample of heading-path and first-sentence anchors (the nearest thing to a query a
knowledge base holds) is set aside before training; every pair whose anchor is one of them, of any
kind, leaves the training pairs, so the verdict's knowledge-base queries are texts the adapted
model was not trained on. The chunks stay in the index (they are what the queries must find) and
as positives of the other pairs: only the query side is held out.

Usage example:

```python
from pipelines.adapt.pairs import mine_pairs
from pipelines.adapt.split import split_held_out

split = split_held_out(mine_pairs("knowledge/"), seed=0)
split.training.pairs  # what the model is trained on
split.held_out  # [(anchor, source), ...]: the verdict's queries
```
"""

import random
from dataclasses import dataclass, replace

from pipelines.adapt.pairs import MinedPairs

HELD_OUT_ANCHORS = 100  # at most; a small knowledge base keeps at least half of its query-like anchors
QUERY_KINDS = ("heading", "sentence")


@dataclass
class HeldOutSplit:
    """The training pairs and the held-out (anchor, source document) queries."""

    training: MinedPairs
    held_out: list[tuple[str, str]]


def held_out_size(anchors: int, limit: int = HELD_OUT_ANCHORS) -> int:
    """`limit`, or half of the anchors when there are fewer than twice as many: training keeps the rest."""
    return min(limit, anchors // 2)


def split_held_out(mined: MinedPairs, seed: int, limit: int = HELD_OUT_ANCHORS) -> HeldOutSplit:
    """Set aside a seeded sample of query-like anchors; the same pairs and seed give the same split."""
    anchors = sorted({(p.anchor, p.source) for p in mined.pairs if p.kind in QUERY_KINDS})
    chosen = random.Random(seed).sample(anchors, held_out_size(len(anchors), limit))
    texts = {anchor for anchor, _ in chosen}
    training = [pair for pair in mined.pairs if pair.anchor not in texts]
    return HeldOutSplit(training=replace(mined, pairs=training), held_out=chosen)
