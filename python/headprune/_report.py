"""headprune.Report: a sweep's report, its figures shown inline in a notebook."""
import html
import os
import re
import tempfile

from . import _engine


class Figure:
    """One figure of the report: the very SVG the HTML report draws (shown inline in a notebook)."""

    def __init__(self, id, svg):
        self.id = id
        self.svg = svg

    def _repr_svg_(self):
        return self.svg

    def save(self, path):
        """Write the SVG to path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.svg)

    def __repr__(self):
        return f"Figure({self.id!r}, {len(self.svg)} bytes of SVG)"


class Report:
    """A sweep's report, as `headprune report` writes it: .html, the whole self-contained page; .figures,
    its figures in the page's order (each a Figure); the report's summary (sweep_id, n_figures, n_left_out).
    In a notebook it shows its figures inline."""

    def __init__(self, db, sweep=None, scale="log", eps=0.01, timeout=None):
        with tempfile.TemporaryDirectory(prefix="headprune-report-") as tmp:
            page, svgs = os.path.join(tmp, "report.html"), os.path.join(tmp, "svg")
            self.summary = _engine.report(os.fspath(db), page, svg_dir=svgs, sweep=int(sweep or 0), eps=eps,
                                          scale=scale, timeout=float(timeout or 0))
            with open(page, encoding="utf-8") as f:
                self.html = f.read()
            found = {}
            for name in os.listdir(svgs) if os.path.isdir(svgs) else []:
                with open(os.path.join(svgs, name), encoding="utf-8") as f:
                    found[name[:-4]] = re.sub(r"^<\?xml[^>]*\?>\s*", "", f.read())
        where = {i: self.html.find(f'id="fig-{i}"') for i in found}  # the page's figure ids: fig-<name>
        self.figures = [Figure(i, found[i]) for i in sorted(found, key=lambda i: (where[i] < 0, where[i], i))]
        self.sweep_id = self.summary["sweep_id"]

    def save(self, path):
        """Write the HTML page to path."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html)

    def _repr_html_(self):
        return "".join(f'<div title="{html.escape(f.id)}">{f.svg}</div>' for f in self.figures)

    def __repr__(self):
        return (f"Report(sweep {self.sweep_id}: {len(self.figures)} figures, {self.summary['n_left_out']} left "
                f"out)")
