"""The grid-cloud economic model (Rodero-Merino et al., RR-7837, §2-§4): providers whose Task
Allocation Module makes offers over a DIET hierarchy, posted prices adapted to demand (eq. 5,
:mod:`merkat.market.posted`), a Virtual Bank that gives the providers' income back to users,
and users with negotiation strategies. See ``docs/gridcloud.md``.

- :mod:`.model` — the catalog, clusters, constants, tasks and offers;
- :mod:`.provider` — hosts, VMs, PE queues and the TAM (eq. 1-4, §3.3.3 tie-breaks);
- :mod:`.diet` — the hierarchy's shape and the merging of OFFERS;
- :mod:`.users` — task generation, utilities, strategies, priorities;
- :mod:`.run` — the event simulation (:func:`~.run.simulate`).
"""
