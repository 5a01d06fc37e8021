"""What each application's VMs used: the CPU counters of their cgroups, read per period.

:class:`CpuMeter` remembers each VM's last counter (``CgroupTree.cpu_usage``: CPU seconds since
its group was made) and gives, per application, the core-seconds its VMs used since the last
reading (:meth:`CpuMeter.take`), including what a VM destroyed since then used up to its end
(:meth:`CpuMeter.close`, read just before its group is removed). A VM seen for the first time
(a new one, or one re-adopted after a restart) counts from its group's creation when it is
new, from now when it was adopted (what it used before was the previous server's to charge).
This is what charging by measured use reads (:mod:`merkat.runtime.metering`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from merkat.backends.local.cgroups import CgroupTree


@dataclass
class CpuMeter:
    """Per-VM CPU counters of ``tree``'s groups (module doc); ``group(vm)`` names a VM's
    group in the tree."""

    tree: CgroupTree
    last: dict[str, float] = field(default_factory=dict)  # vm -> counter at the last reading
    ended: dict[str, float] = field(default_factory=dict)  # app -> used by destroyed VMs

    def start(self, vm: str, group: str, adopted: bool = False) -> None:
        """Begin counting ``vm``: from its group's creation (0), or from now when adopted."""
        now = self.tree.cpu_usage(group) if adopted else 0.0
        self.last[vm] = now or 0.0

    def close(self, vm: str, app: str, group: str) -> None:
        """``vm`` is about to be destroyed: keep what it used since the last reading."""
        if vm not in self.last:
            return
        now = self.tree.cpu_usage(group)
        if now is not None:
            self.ended[app] = self.ended.get(app, 0.0) + max(0.0, now - self.last[vm])
        del self.last[vm]

    def take(self, app: str, vms: Iterable[tuple[str, str]]) -> float | None:
        """Core-seconds ``app``'s VMs (``(vm, group)`` pairs) used since the last call, or
        None when no counter of them can be read (no accounting controller)."""
        used = self.ended.pop(app, None)
        for vm, group in vms:
            now = self.tree.cpu_usage(group)
            if now is None:
                continue
            used = (used or 0.0) + max(0.0, now - self.last.get(vm, 0.0))
            self.last[vm] = now
        return used
