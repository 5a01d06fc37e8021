"""The platform: applications under controllers, and the scheduling period that drives them.

:class:`~merkat.core.period.Platform` runs one period top-down (renew, decide, clear,
apply, charge, record); :mod:`merkat.core.backend` is the seam to the world.
"""
