"""Run reports: one self-contained HTML page per run (``merkat report RUN --out FILE.html``).

A *source* turns a run into a :class:`~merkat.report.model.Report` (title, parameters, tables,
figures as PNG bytes); :func:`~merkat.report.html.render` turns a report into HTML with the
figures embedded as ``data:`` URIs, so the page opens alone, offline. Sources are registered by
name in :data:`~merkat.report.sources.SOURCES` (a simulator run folder, an experiment folder, a
live server's history).
"""
