"""db.report() against `headprune report --svg DIR` on the same database."""
import re

import pytest

from conftest import cli


def cli_report(db, tmp_path, *opts):
    tmp_path.mkdir(parents=True, exist_ok=True)
    out, svg = tmp_path / "r.html", tmp_path / "svg"
    cli("report", "--db", db, "--out", out, "--svg", svg, *opts)
    page = out.read_text(encoding="utf-8")
    figs = {p.stem: re.sub(r"^<\?xml[^>]*\?>\s*", "", p.read_text(encoding="utf-8")) for p in svg.glob("*.svg")}
    return page, figs


def test_figures_equal_cli_svgs(hp, session_db, tmp_path):
    rep = hp.open(str(session_db)).report()
    page, figs = cli_report(session_db, tmp_path)
    assert len(figs) >= 3 and {"heatmap", "curves", "redundancy"} <= set(figs)
    assert [f.id for f in rep.figures] and sorted(f.id for f in rep.figures) == sorted(figs)
    for f in rep.figures:
        assert not f.svg.startswith("<?xml") and f.svg.lstrip().startswith("<svg")
        assert f.svg == figs[f.id], f.id
    # in the order the page has them: each figure's SVG is in the page under id="fig-<name>"
    where = {i: page.find(f'id="fig-{i}"') for i in figs}
    assert all(w >= 0 for w in where.values()), where
    assert [f.id for f in rep.figures] == sorted(figs, key=where.get)
    assert rep.summary["n_figures"] >= len(figs) - 1 and rep.sweep_id == 2
    html = rep._repr_html_()
    for f in rep.figures:
        assert f.svg in html


def test_html_equals_cli_page_but_dates(hp, session_db, tmp_path):
    rep = hp.open(str(session_db)).report()
    page, _ = cli_report(session_db, tmp_path)
    strip = lambda s: re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(Z|[+-]\d\d:?\d\d)?", "DATE", s)
    assert strip(rep.html).count("<svg") == strip(page).count("<svg")
    assert len(rep.html) == pytest.approx(len(page), rel=0.01)


def test_linear_scale(hp, session_db, tmp_path):
    db = hp.open(str(session_db))
    log, lin = db.report(), db.report(scale="linear")
    _, cli_log = cli_report(session_db, tmp_path / "a")
    _, cli_lin = cli_report(session_db, tmp_path / "b", "--scale", "linear")
    lin_f = {f.id: f.svg for f in lin.figures}
    log_f = {f.id: f.svg for f in log.figures}
    assert lin_f == cli_lin
    differs = {i for i in cli_log if cli_log[i] != cli_lin[i]}
    assert differs, "the linear scale changes nothing: not a test"
    assert {i for i in log_f if log_f[i] != lin_f[i]} == differs
    with pytest.raises(ValueError, match="scale"):
        db.report(scale="cubic")


def test_report_of_older_sweep(hp, session_db, tmp_path):
    rep = hp.open(str(session_db)).report(sweep=1)
    _, figs = cli_report(session_db, tmp_path, "--sweep", "1")
    assert rep.sweep_id == 1 and {f.id: f.svg for f in rep.figures} == figs
    with pytest.raises(hp.Error):
        hp.open(str(session_db)).report(sweep=9)


def test_figure_save(hp, session_db, tmp_path):
    rep = hp.open(str(session_db)).report()
    f = rep.figures[0]
    f.save(tmp_path / "f.svg")
    assert (tmp_path / "f.svg").read_text(encoding="utf-8") == f.svg == f._repr_svg_()
    rep.save(tmp_path / "p.html")
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == rep.html
