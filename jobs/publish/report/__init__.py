"""HTML reports (job, fleet, comparison, validation): self-contained Jinja2 pages with autoescaping and inline SVG plots.

``html.py`` renders, ``sections.py`` and ``fleet_tables.py`` build sections from tables, ``plots.py`` draws.
"""
