#!/usr/bin/env python3
"""browser_report.py -- `headprune report` opened in a real headless browser.

Runs a sweep of tests/plans/sweep.yaml (the llama-gqa fixture: 3 layers x 4
heads, 2 KV heads) with a roles study added (a copy of the plan in a temporary
folder), writes its report (and its SVGs), and the report of a copy
of the database rewritten with hostile strings (markup, an <img> with a URL,
invalid UTF-8), then opens each in Debian's chromium, headless, driven over
the DevTools protocol on a pipe (--remote-debugging-pipe: no port, no
third-party client), at a laptop's 1366 x 768, and checks:

  - it renders without console errors, exceptions or failed loads
    (Log.entryAdded, Runtime.consoleAPICalled, Runtime.exceptionThrown,
    Network.loadingFailed: a CSP violation is a console error too);
  - it makes no network request: every Network.requestWillBeSent is the page's
    own file:// URL (and DNS is disabled besides, --host-resolver-rules);
  - a screenshot is not blank: many distinct colours, and each heatmap cell's
    pixels are its fill colour;
  - the heatmaps have n_layers x n_heads (and n_layers x n_kv_heads) cells,
    each with a non-empty box after layout; each panel of the roles figure has
    n_layers x n_heads points, each with a box, and the estimates figure a
    panel an attribution study with a point a unit; no page is wider than
    the window;
  - each SVG file is well-formed XML (xml.etree) and renders as an SVG.

The checker is tested first on pages that do make a request or log an error:
if it cannot see those, it would pass anything, so the test fails.

Exit 0 pass, 1 fail, 77 skip (meson's code) only when chromium is not
installed (scripts/test.sh installs it). Bounded in time: chromium is killed
after DEADLINE seconds whatever happens.
Environment: HP_HEADPRUNE (the binary), HP_TESTS (this folder).
"""
import base64
import json
import os
import select
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zlib

DEADLINE = 150  # seconds for everything the browser does
WIDTH, HEIGHT = 1366, 768
LAYERS, HEADS, KV_HEADS = 3, 4, 2


class Fail(Exception):
    pass


# --- chromium over the DevTools protocol on a pipe -------------------------------------------

class Browser:
    def __init__(self, exe, tmp, deadline):
        self.deadline = deadline
        self.events = []
        self.buf = b""
        self.next_id = 0
        # chromium reads commands from fd 3 and writes replies to fd 4
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()
        profile = os.path.join(tmp, "profile")

        def child_fds():
            os.dup2(cmd_r, 3)
            os.dup2(out_w, 4)
            os.setsid()  # its own process group: killed whole at the end

        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", "--user-data-dir=" + profile, "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps", "--mute-audio",
                "--no-proxy-server", "--host-resolver-rules=MAP * ~NOTFOUND", "--force-color-profile=srgb",
                "--hide-scrollbars", "--window-size=%d,%d" % (WIDTH, HEIGHT), "about:blank"]
        self.log = open(os.path.join(tmp, "chromium.log"), "w")
        self.proc = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=child_fds, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        os.close(cmd_r)
        os.close(out_w)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Log", "Runtime"):
            self.call(domain + ".enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        os.close(self.cmd_w)
        os.close(self.out_r)
        self.log.close()

    def _send(self, method, params, session):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def wait_for(self, pred, what):
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" not in msg:
                    self.events.append(msg)
                if pred(msg):
                    return msg
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise Fail("chromium: no answer in time waiting for " + what)
            ready, _, _ = select.select([self.out_r], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.out_r, 1 << 20)
                if not chunk:
                    raise Fail("chromium exited (see chromium.log) waiting for " + what)
                self.buf += chunk

    def call(self, method, params=None, session=False):
        i = self._send(method, params, session)
        msg = self.wait_for(lambda m: m.get("id") == i, method)
        if "error" in msg:
            raise Fail("%s: %s" % (method, msg["error"]))
        return msg.get("result", {})

    def js(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in r:
            raise Fail("script %s: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def open(self, url):
        """Load url and return what went wrong: requests to elsewhere, console errors."""
        self.events = []
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for(lambda m: m.get("method") == "Page.loadEventFired", "the load of " + url)
        # let late work (layout, any deferred load) report: a round trip after a short pause
        time.sleep(0.5)
        self.js("1")
        problems = []
        for e in self.events:
            m, p = e.get("method", ""), e.get("params", {})
            if m == "Network.requestWillBeSent":
                u = p["request"]["url"]
                if u != url:
                    problems.append("request: " + u)
            elif m == "Network.loadingFailed":
                problems.append("failed load: %s" % p.get("errorText"))
            elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                problems.append("console %s: %s" % (p["entry"]["level"], p["entry"]["text"]))
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"):
                problems.append("console.%s" % p["type"])
            elif m == "Runtime.exceptionThrown":
                problems.append("exception: %s" % p["exceptionDetails"].get("text"))
        return problems

    def screenshot(self, clip):
        r = self.call("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True},
                      session=True)
        return png_pixels(base64.b64decode(r["data"]))


# --- PNG (stdlib only) ------------------------------------------------------------

def png_pixels(data):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise Fail("screenshot is not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                raise Fail("screenshot PNG of depth %d colour type %d" % (depth, ctype))
            bpp = 4 if ctype == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, o = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[o], bytearray(raw[o + 1:o + 1 + stride])
        o += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


# --- the checks ---------------------------------------------------------------------

def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if p.returncode != 0:
        raise Fail("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return p.stdout


def check_checker(b, tmp):
    """The checker must see a request, a CSP violation and a console error, or it proves nothing."""
    pages = {
        "request.html": '<!DOCTYPE html><html><body><img src="http://x.invalid/a.png" alt=""></body></html>',
        "csp.html": '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
                    'content="default-src \'none\'; style-src \'unsafe-inline\'"></head><body>'
                    '<img src="http://x.invalid/b.png" alt=""></body></html>',
        "console.html": '<!DOCTYPE html><html><body><script>console.error("x")</script></body></html>',
    }
    for name, text in pages.items():
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        if not b.open("file://" + path):
            raise Fail("the checker sees nothing wrong with %s: it cannot be trusted" % name)


def check_report(b, path, label, hostile=False):
    url = "file://" + path
    problems = b.open(url)
    if problems:
        raise Fail("%s: %s" % (label, "; ".join(problems[:5])))
    if b.js("document.querySelectorAll('script').length") != 0:
        raise Fail(label + ": the page has a script element")
    for fig, n in (("fig-heatmap", LAYERS * HEADS), ("fig-heatmap-kv", LAYERS * KV_HEADS)):
        got = b.js("[...document.querySelectorAll('#%s rect.cell')].filter(c => { const r = "
                   "c.getBoundingClientRect(); return r.width > 1 && r.height > 1; }).length" % fig)
        if got != n:
            raise Fail("%s: %s has %s rendered cells, want %d" % (label, fig, got, n))
    panels = b.js("[...document.querySelectorAll('#fig-roles g.role-panel')].map(g => [g.dataset.role, "
                  "[...g.querySelectorAll('path.point')].filter(p => { const r = p.getBoundingClientRect(); "
                  "return r.width > 1 && r.height > 1; }).length])")
    if len(panels) < 7:  # a decoder: every score but rare_token
        raise Fail("%s: the roles figure has %d panels, want 7: %s" % (label, len(panels), panels))
    for role, got in panels:
        if got != LAYERS * HEADS:
            raise Fail("%s: roles panel %s has %d rendered points, want %d" % (label, role, got, LAYERS * HEADS))
    # the estimates figure: a panel an attribution study of the plan, a rendered point a unit
    est = b.js("[...document.querySelectorAll('#fig-estimates g.estimate-panel')].map(g => [g.dataset.study, "
               "[...g.querySelectorAll('path.point')].filter(p => { const r = p.getBoundingClientRect(); "
               "return r.width > 1 && r.height > 1; }).length])")
    want = [["attribution", LAYERS * HEADS], ["attribution-kv", LAYERS * KV_HEADS]]
    if not hostile and est != want:
        raise Fail("%s: the estimates figure's panels and points are %s, want %s" % (label, est, want))
    # no text is cut off: every text of every figure lies inside its figure (a legend's title, a tick label)
    cut = b.js("[...document.querySelectorAll('svg')].flatMap(svg => { const f = svg.getBoundingClientRect(); "
               "return [...svg.querySelectorAll('text')].filter(t => { const r = t.getBoundingClientRect(); "
               "return r.width > 0 && (r.left < f.left - 0.5 || r.right > f.right + 0.5 || r.top < f.top - 0.5 || "
               "r.bottom > f.bottom + 0.5); }).map(t => svg.id + ': ' + t.textContent); })")
    if cut:
        raise Fail("%s: text cut off at its figure's edge: %s" % (label, "; ".join(cut[:5])))
    wide = b.js("[document.documentElement.scrollWidth, window.innerWidth]")
    if wide[0] > wide[1]:
        raise Fail("%s: the page is %d px wide in a %d px window" % (label, wide[0], wide[1]))
    if hostile:
        injected = b.js("document.querySelectorAll('img, image, iframe, object, embed, b, i, "
                        "a[href^=\"http\"]').length")
        if injected:
            raise Fail("%s: %d injected elements in the DOM" % (label, injected))
        return
    # not blank: the whole page at a quarter of its pixels
    height = b.js("document.documentElement.scrollHeight")
    w, h, rows = b.screenshot({"x": 0, "y": 0, "width": WIDTH, "height": min(height, 6000), "scale": 0.5})
    colours = {px for row in rows for px in row}
    if len(colours) < 64:
        raise Fail("%s: the screenshot has %d distinct colours: blank?" % (label, len(colours)))
    # each heatmap cell's pixels are its fill (sampled a quarter into the cell, away from its mark)
    box = b.js("(() => { const r = document.getElementById('fig-heatmap').getBoundingClientRect(); "
               "return [r.x + scrollX, r.y + scrollY, r.width, r.height]; })()")
    cells = b.js("[...document.querySelectorAll('#fig-heatmap rect.cell')].map(c => { const r = "
                 "c.getBoundingClientRect(); return [r.x + scrollX + r.width / 4, r.y + scrollY + r.height / 4, "
                 "c.getAttribute('fill')]; })")
    w, h, rows = b.screenshot({"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1})
    for x, y, fill in cells:
        px = rows[int(y - box[1])][int(x - box[0])]
        want = tuple(int(fill[i:i + 2], 16) for i in (1, 3, 5))
        if max(abs(p - q) for p, q in zip(px, want)) > 3:
            raise Fail("%s: a heatmap cell drawn %s is %s on screen" % (label, fill, px))


def check_svgs(b, folder):
    names = sorted(os.listdir(folder))
    if "heatmap.svg" not in names or "curves.svg" not in names:
        raise Fail("SVG files missing: %s" % names)
    for name in names:
        path = os.path.join(folder, name)
        root = ET.parse(path).getroot()  # well-formed XML, or this raises
        if root.tag != "{http://www.w3.org/2000/svg}svg":
            raise Fail("%s: the root is %s" % (name, root.tag))
        problems = b.open("file://" + path)
        if problems:
            raise Fail("%s: %s" % (name, "; ".join(problems[:5])))
        if b.js("document.documentElement.nodeName") != "svg" or b.js("document.querySelector('parsererror')"):
            raise Fail(name + ": chromium does not render it as an SVG")


def make_hostile(db, tmp):
    hostile = os.path.join(tmp, "hostile.db")
    src = sqlite3.connect(db)
    dst = sqlite3.connect(hostile)
    src.backup(dst)
    src.close()
    bad = '"><img src="http://x.invalid/i.png"><b>bold</b>'
    dst.executescript(
        "UPDATE plans SET text = '</pre><img src=\"http://x.invalid/p.png\"><script>alert(1)</script>' "
        "|| CAST(X'FF01C0AF' AS TEXT);"
        "UPDATE sweeps SET name = '<i>x</i><iframe src=\"http://x.invalid/\"></iframe>';"
        "UPDATE models SET path = '</code><object data=\"http://x.invalid/o\"></object>';"
        "UPDATE results SET kernel = '<embed src=\"http://x.invalid/e\">';")
    dst.execute("UPDATE sweep_jobs SET study = ? WHERE study = 'single'", (bad,))
    dst.execute("UPDATE sweep_jobs SET study = ? WHERE study = 'random'", ("<a href='http://x.invalid/'>r</a>",))
    dst.execute("UPDATE sweep_roles SET study = ?", ('</text><image href="http://x.invalid/r.png"/>',))
    dst.commit()
    dst.close()
    return hostile


def plan_with_roles(tests, tmp):
    """tests/plans/sweep.yaml with a roles study added, its fixtures named by absolute path."""
    with open(os.path.join(tests, "plans", "sweep.yaml")) as f:
        text = f.read().replace("../fixtures/", os.path.join(tests, "fixtures") + "/")
    path = os.path.join(tmp, "sweep-roles.yaml")
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n  - roles\n")
    return path


def main():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("SKIP: chromium is not installed, so the report is not opened in a browser "
              "(scripts/test.sh installs it: apt-get install chromium)")
        return 77
    hp, tests = os.environ["HP_HEADPRUNE"], os.environ["HP_TESTS"]
    root = os.path.dirname(tests)
    tmp = tempfile.mkdtemp(prefix="hp_browser_")
    b = None
    try:
        db = os.path.join(tmp, "s.db")
        run([hp, "run", plan_with_roles(tests, tmp), "--db", db, "--threads", "1", "--quiet"], root)
        html = os.path.join(tmp, "report.html")
        svg = os.path.join(tmp, "svg")
        printed = run([hp, "report", "--db", db, "--out", html, "--svg", svg], root)
        if printed.strip() != html:
            raise Fail("report printed %r, not its path" % printed)
        hostile_html = os.path.join(tmp, "hostile.html")
        run([hp, "report", "--db", make_hostile(db, tmp), "--out", hostile_html], root)

        b = Browser(exe, tmp, time.monotonic() + DEADLINE)
        check_checker(b, tmp)
        check_report(b, html, "report.html")
        check_report(b, hostile_html, "hostile.html", hostile=True)
        check_svgs(b, svg)
        print("ok: the report renders in %s with no request, no console error, %d x %d heatmap cells and "
              "roles points a panel, a non-blank screenshot; hostile strings stay text; %d SVG files render"
              % (exe, LAYERS, HEADS, len(os.listdir(svg))))
        return 0
    except (Fail, ET.ParseError, subprocess.TimeoutExpired) as e:
        print("FAIL: %s" % e)
        log = os.path.join(tmp, "chromium.log")
        if os.path.exists(log):
            with open(log) as f:
                print("chromium.log (last lines):\n" + "".join(f.readlines()[-15:]))
        return 1
    finally:
        if b:
            b.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
