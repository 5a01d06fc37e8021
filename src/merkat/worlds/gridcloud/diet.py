"""The DIET hierarchy (grid-cloud model §2, §3.2): a Master Agent, agents, Local Agents and the
SeDs at the bottom — its shape and the gathering of OFFERS. Pure: no clock; the simulator of
:mod:`.run` delivers the messages as events with the §4.2 delay per hop.

Shape: ``fanout`` lists how many children each agent level has, top down; the last level are
Local Agents, to which the SeDs (one per provider) are attached round-robin. ``(2,)`` is a MA
with two LAs; ``(2, 3)`` a MA with two agents of three LAs each. Agents with no SeD below them
are pruned (DIET does not forward a request to a subtree that cannot run the service).

A REQUEST_FOR_OFFERS goes from the MA down to every SeD; each SeD answers with an OFFERS
message to its parent; each agent waits for an OFFERS message from *every* child for that
request, merges them (each child's offers exactly once) and sends one OFFERS message up; the
MA's merged message goes to the user (:class:`Gather`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from merkat.worlds.gridcloud.model import Offer


@dataclass(frozen=True)
class Node:
    """A node of the tree: ``sed`` is the provider index for a SeD, None for an agent."""

    id: int
    parent: int | None
    children: tuple[int, ...]
    sed: int | None
    name: str


@dataclass(frozen=True)
class Hierarchy:
    nodes: tuple[Node, ...]

    @property
    def root(self) -> int:
        return 0

    def seds(self) -> list[int]:
        return [n.id for n in self.nodes if n.sed is not None]

    def depth(self, node: int) -> int:
        d = 0
        p = self.nodes[node].parent
        while p is not None:
            d += 1
            p = self.nodes[p].parent
        return d


def build(providers: int, fanout: Sequence[int] = (1,)) -> Hierarchy:
    """The tree over ``providers`` SeDs for agent fan-outs ``fanout`` (see the module doc).
    Raises ValueError for no provider or a fan-out below 1."""
    if providers < 1:
        raise ValueError(f"providers must be at least 1, got {providers}")
    if not fanout or any(f < 1 for f in fanout):
        raise ValueError(f"fanout: each level needs at least 1 child, got {list(fanout)}")
    parent: list[int | None] = [None]
    names = ["MA"]
    level = [0]
    for depth, f in enumerate(fanout):
        nxt = []
        last = depth == len(fanout) - 1
        for p in level:
            for _ in range(f):
                parent.append(p)
                names.append(f"{'LA' if last else 'A'}{len(names)}")
                nxt.append(len(parent) - 1)
        level = nxt
    sed_of: dict[int, int] = {}
    for k in range(providers):
        parent.append(level[k % len(level)])
        names.append(f"SeD{k}")
        sed_of[len(parent) - 1] = k
    # prune agents with no SeD below
    keep = set(sed_of)
    for i in sorted(sed_of):
        up = parent[i]
        while up is not None and up not in keep:
            keep.add(up)
            up = parent[up]
    keep.add(0)
    order = sorted(keep)
    new_id = {old: k for k, old in enumerate(order)}
    children: dict[int, list[int]] = {k: [] for k in range(len(order))}
    for old in order[1:]:
        above = parent[old]
        assert above is not None
        children[new_id[above]].append(new_id[old])
    nodes = tuple(
        Node(new_id[old], None if parent[old] is None else new_id[parent[old]],  # type: ignore[index]
             tuple(children[new_id[old]]), sed_of.get(old), names[old])
        for old in order
    )
    return Hierarchy(nodes)


@dataclass
class Gather:
    """An agent's pending OFFERS for one request: it is complete when every child answered.

    :meth:`add` takes one child's OFFERS message; a child answering twice is an error (its
    offers would be merged twice). :attr:`offers` is the merged list, children in tree order.
    """

    children: tuple[int, ...]
    received: dict[int, list[Offer]] = field(default_factory=dict)

    def add(self, child: int, offers: list[Offer]) -> bool:
        """Record ``child``'s offers; True when all children have answered."""
        if child not in self.children:
            raise ValueError(f"node {child} is not a child of this agent")
        if child in self.received:
            raise ValueError(f"node {child} already answered this request")
        self.received[child] = offers
        return len(self.received) == len(self.children)

    @property
    def offers(self) -> list[Offer]:
        return [o for c in self.children for o in self.received.get(c, [])]
