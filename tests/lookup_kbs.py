"""
Small purpose-made knowledge bases for the query-side scenarios, written into a tmp folder.

`write_two_topic_kb`: two categories with clearly different topics (gardening and databases),
so a query that names one category but asks about the other makes the filtered attempt weak,
plus a category whose name holds a double quote and a backslash (filter escaping).
"""

from pathlib import Path

GARDENING_WATERING = """\
---
title: Watering Tomato Plants
category: gardening
keywords: [tomato watering, mulch, blossom end rot]
entities:
  - name: Tomato
    aliases: [solanum lycopersicum]
---

# Watering Tomato Plants

Tomato plants in the vegetable garden need deep, regular watering at the base of the stem. Water the
soil, not the leaves, early in the morning so the foliage dries before evening.

## Symptoms of uneven watering

Blossom end rot shows as a dark, sunken patch at the bottom of the fruit. It follows cycles of dry
soil and heavy watering, which stop the plant from moving calcium into the growing tomatoes.
Split fruit after a heavy rain is another sign of uneven soil moisture.

## Mulching the beds

Spread five centimetres of straw mulch around each tomato plant once the soil has warmed in late
spring. Mulch keeps the soil moisture even, suppresses weeds and stops soil splashing onto the leaves.
"""

GARDENING_ROSES = """\
---
title: Pruning Garden Roses
category: gardening
keywords: [rose pruning, secateurs, dormant season]
---

# Pruning Garden Roses

Prune garden roses at the end of winter, while the bushes are still dormant and before the new
shoots appear. Use clean, sharp secateurs and cut just above an outward-facing bud.

## Removing dead wood

Cut out dead, damaged and crossing canes down to healthy green wood, so that air moves freely
through the middle of the rose bush and fungal diseases such as black spot have less chance.
"""

DATABASE_LAG = """\
---
title: Replica Lag on the Primary Database
category: databases
keywords: [replication lag, standby replica, write-ahead log]
entities:
  - name: PostgreSQL
    aliases: [pg, postgres]
---

# Replica Lag on the Primary Database

A streaming replica falls behind the primary when it cannot receive, flush or replay the
write-ahead log as fast as the primary produces it. Reads from a lagging replica return stale rows.

## Diagnosing replication lag

Compare the replay position of each standby with the current WAL position of the primary in
pg_stat_replication. A high write lag points at the network, a high replay lag at long queries on the
standby that block WAL replay.

## Fixing replication lag

Cancel long-running queries on the standby, raise its disk throughput, and make sure no abandoned
replication slot keeps WAL on the primary. Rebuild a replica that stays too far behind.
"""

DATABASE_POOL = """\
---
title: Database Connection Pool Exhausted
category: databases
keywords: [connection pool, too many connections, max connections]
entities:
  - name: PostgreSQL
    aliases: [pg, postgres]
---

# Database Connection Pool Exhausted

The application waits for a free database connection and requests time out. Every connection in the
pool is busy or leaked, or the database refuses new connections because max_connections is reached.

## Finding leaked connections

Look for sessions that stay idle in transaction for minutes; they hold a pooled connection without
doing any work. Fix the code path that opens a transaction and never commits or rolls back.
"""

QUOTED_CATEGORY = 'it"s \\ ops'

QUOTED_PAGER = """\
---
title: Rotating the On-Call Pager
category: 'it"s \\ ops'
keywords: [pager rotation, on-call handover]
---

# Rotating the On-Call Pager

Hand the on-call pager to the next engineer every Monday at ten. Check that the paging tool shows the
new engineer as primary and send a test page before the previous engineer goes off call.
"""

SUPPORT_PAGER = """\
---
title: Pager Escalation for Support
category: support
keywords: [pager escalation]
---

# Pager Escalation for Support

When nobody acknowledges a page within fifteen minutes, the paging tool escalates it to the
secondary on-call engineer and then to the team lead. Keep the on-call schedule current so that
escalations reach someone who is awake.
"""

FILES = {
    "gardening/watering-tomatoes.md": GARDENING_WATERING,
    "gardening/pruning-roses.md": GARDENING_ROSES,
    "databases/replica-lag.md": DATABASE_LAG,
    "databases/connection-pool.md": DATABASE_POOL,
    "itops/pager-rotation.md": QUOTED_PAGER,
    "support/pager-escalation.md": SUPPORT_PAGER,
}


def write_two_topic_kb(root: Path) -> Path:
    for source, text in FILES.items():
        path = root / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
