"""GetPreferredAllocation's policy, as a pure function.

For one container asking for ``size`` devices out of ``available``:

1. every ``must_include`` ID comes first, in the kubelet's order;
2. then devices on one NUMA node: the node most must-include devices sit on, else the node that
   holds the most available physical devices (lowest node number on a tie); a device without NUMA
   information (no affinity, as the kubelet's topology manager sees it) fits any node;
3. within that preference, distinct physical devices (CDI devices) before a second replica of one
   already chosen: replicas are taken round-robin across physical devices;
4. ties by device name in natural order (``dev2`` before ``dev10``), then replica index.

Unknown or unhealthy IDs are offered last, so the answer always has ``size`` IDs when the kubelet
offered that many; the kubelet checks the answer against what it can allocate anyway.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdi_plugin.cdi.names import natural_key


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    physical: str  # the CDI name: replicas of one device share it
    replica: int
    numa: tuple[int, ...]
    healthy: bool


def _target_node(chosen: Sequence[Candidate], pool: Sequence[Candidate]) -> int | None:
    votes = Counter(n for c in chosen for n in c.numa)
    if votes:
        return min(votes, key=lambda n: (-votes[n], n))
    per_node: dict[int, set[str]] = {}
    for c in pool:
        for n in c.numa:
            per_node.setdefault(n, set()).add(c.physical)
    if not per_node:
        return None
    return min(per_node, key=lambda n: (-len(per_node[n]), n))


def preferred(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    devices: Mapping[str, Candidate],
) -> list[str]:
    """The IDs to prefer, ``must_include`` first; at most ``max(size, len(must_include))``."""
    chosen_ids = list(dict.fromkeys(must_include))
    if size <= len(chosen_ids):
        return chosen_ids
    taken = set(chosen_ids)
    pool = [devices[i] for i in dict.fromkeys(available) if i in devices and i not in taken]
    unknown = [i for i in dict.fromkeys(available) if i not in devices and i not in taken]
    chosen = [devices[i] for i in chosen_ids if i in devices]
    target = _target_node(chosen, [c for c in pool if c.healthy])
    uses = Counter(c.physical for c in chosen)
    rank_in_physical: dict[str, int] = {}
    keyed = []
    for c in sorted(pool, key=lambda c: (natural_key(c.physical), c.replica)):
        rank = rank_in_physical.get(c.physical, 0)
        rank_in_physical[c.physical] = rank + 1
        off_node = target is not None and bool(c.numa) and target not in c.numa
        keyed.append(((not c.healthy, off_node, uses[c.physical] + rank, natural_key(c.physical)), c.id))
    keyed.sort(key=lambda k: k[0])
    picks = [device_id for _, device_id in keyed] + unknown
    return chosen_ids + picks[: size - len(chosen_ids)]
