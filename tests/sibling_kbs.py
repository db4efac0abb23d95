"""
A small purpose-made runbook collection with two siblings whose titles differ in one word (space
vs inodes), for the competing-documents scenarios, plus two runbooks of other topics.
"""

from pathlib import Path

SPACE = """\
---
title: Node Disk Space Filling Up
category: node
---

# NodeDiskSpaceFillingUp

## Meaning

The root disk of a worker node is filling up: at the current write rate its free bytes run out
within hours. Containers writing logs and image layers usually cause the growth.

## Impact

When the disk has no free space left, the kubelet evicts pods and new containers cannot start.

## Diagnosis

Find the largest directories with du on the node and compare the growth with the log volume of
the containers scheduled there. Check whether old container images pile up.

## Mitigation

Delete unused container images with crictl rmi --prune, rotate and compress large log files, and
move the biggest volumes to a larger disk. Grow the disk when the growth is organic.
"""

INODES = """\
---
title: Node Disk Inodes Filling Up
category: node
---

# NodeDiskInodesFillingUp

## Meaning

The root disk of a worker node is filling up: at the current rate its free inodes run out within
hours, even though free bytes may remain. Many tiny files, such as session or cache files, cause it.

## Impact

When the disk has no free inodes left, no new file can be created: writes fail and pods crash.

## Diagnosis

Count the files per directory on the node and look for a directory with millions of tiny files
written by one container.

## Mitigation

Remove the tiny files that pile up, fix the application that leaks them, and reformat the disk with
more inodes when the workload needs them.
"""

MEMORY = """\
---
title: Node Memory Pressure
category: node
---

# NodeMemoryPressure

## Meaning

A worker node runs low on available memory and the kubelet reports the MemoryPressure condition.

## Mitigation

Find the pods using the most memory, set memory limits on them and drain the node if it swaps.
"""

CERTIFICATE = """\
---
title: Ingress Certificate Expiring
category: network
---

# IngressCertificateExpiring

## Meaning

The TLS certificate served by the ingress controller expires within a week.

## Mitigation

Renew the certificate with the issuer, update the secret the ingress reads, and reload the
controller so that clients see the new certificate.
"""

SPACE_SOURCE = "node/NodeDiskSpaceFillingUp.md"
INODES_SOURCE = "node/NodeDiskInodesFillingUp.md"

FILES = {
    SPACE_SOURCE: SPACE,
    INODES_SOURCE: INODES,
    "node/NodeMemoryPressure.md": MEMORY,
    "network/IngressCertificateExpiring.md": CERTIFICATE,
}


def write_sibling_kb(root: Path) -> Path:
    for source, text in FILES.items():
        path = root / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
