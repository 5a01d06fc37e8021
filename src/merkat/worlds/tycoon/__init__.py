"""Tycoon's world (Lai et al.): per-host auctions, Best Response agents, price prediction and
funding (:mod:`.simulator`), and a recorded price series replayed as the other users' demand
(:mod:`.background`). The auction itself is a market mechanism (:mod:`merkat.market.tycoon`).
"""
