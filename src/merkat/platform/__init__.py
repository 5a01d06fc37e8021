"""The platform: applications under controllers, and the scheduling period that drives them.

:class:`~merkat.platform.period.Platform` runs one period top-down (renew, decide, clear,
apply, charge, record); :mod:`merkat.platform.backend` is the seam to the world.
"""
