"""The whole book as one PDF, printed by headless Chromium from the built website.

    python _ext/book_pdf.py _build/html          # what scripts/build-book runs after the site

The site's pages, in the order of ``_toc.yml`` (going-further pages after their chapter; the
API reference left out, see LEFT_OUT), are joined into one printable page,
``_build/print/book.html`` (outside the site, so that the site holds no extra page): the
article of each page, with the site's own styles, MathJax and, where a chapter has an
interactive figure, its Vega scripts, all served from the built site (no network). The ids
of each page are prefixed with its name, so that links between pages and to their sections
become links inside the PDF. The solutions, which the site keeps collapsed under their
exercises, are moved to a last part, "Solutions to the exercises": a printed page cannot
hide them, and an answer printed under its exercise would give it away.

Chromium (Debian's ``chromium``, as the tests use) loads that page with the network off,
waits until MathJax has typeset every formula and every interactive figure is drawn (in
its starting state), and prints it with ``Page.printToPDF`` into
``_build/html/<PDF_NAME>``, which the landing page links. Where no Chromium is installed,
nothing is printed and the landing page's link to the PDF is removed, so that the site
promises no file it lacks.

The DevTools protocol runs over ``--remote-debugging-pipe`` (JSON messages ended by a NUL
byte, read by Chromium on its descriptor 3 and written on 4), as in tests/headless_chromium.py.
"""

from __future__ import annotations

import base64
import fcntl
import html
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PDF_NAME = "attention-from-the-proof-up.pdf"
# The landing page's link to the PDF: removed from index.html when there is no PDF.
LINK_CLASS = "attncore-pdf"
PRINT_DIR_NAME = "print"
# The line under the title on the PDF's first page (LICENSE has the full texts).
LICENCE_LINE = ("Text, figures and notebooks: Creative Commons Attribution 4.0 (CC BY 4.0, "
                "https://creativecommons.org/licenses/by/4.0/). Code: MIT licence. The "
                "pretrained models and Python's help text keep their own licences "
                "(Apache-2.0, PSF). The course's LICENSE file has the full texts.")
TIMEOUT_S = 600

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND",
                  "--proxy-server=http://127.0.0.1:9", "--allow-file-access-from-files",
                  "--remote-debugging-pipe"]

# Resolves once MathJax has typeset the page and every interactive figure is drawn.
READY = """
new Promise((resolve, reject) => {
  const start = Date.now();
  (function wait() {
    const mj = window.MathJax;
    const figures = [...document.querySelectorAll("div.attncore-vega")];
    const drawn = figures.every(f => f.querySelector("svg.marks"));
    if (mj && mj.startup && mj.startup.promise && drawn) {
      mj.startup.promise.then(() => resolve(document.querySelectorAll("mjx-container").length),
                              reject);
    } else if (Date.now() - start > %(limit_ms)d) {
      reject(new Error("MathJax or a figure did not finish within %(limit_ms)d ms"));
    } else {
      setTimeout(wait, 100);
    }
  })();
})
"""

# Print styles: one page of the site per printed section, code that wraps instead of being
# cut off at the margin, no controls of the interactive figures (a printed figure shows its
# starting state, which its title states), no links' pilcrows.
PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm; }
html, body { background: #fff !important; }
body { font-size: 10.5pt; }
.attncore-print-page { break-before: page; }
.attncore-print-page:first-of-type { break-before: auto; }
.attncore-print-title { text-align: center; margin: 30vh 0 2rem; }
.attncore-print-toc li { margin: 0.2rem 0; }
.attncore-print-licence { text-align: center; font-size: 9pt; margin: 0 0 2rem; }
pre, div.highlight pre { white-space: pre-wrap !important; overflow: visible !important;
                         word-break: break-word; }
div.cell_output, div.output, .bd-article table, mjx-container[display="true"], div.math {
  overflow: visible !important; max-width: none !important; }
.vega-bindings, a.headerlink, .toggle-button, button.toggle-button, .copybtn,
.attncore-cards, .attncore-pdf { display: none !important; }
figure, img, svg, mjx-container[display="true"], table { break-inside: avoid; }
h1, h2, h3 { break-after: avoid; }
details.hide > summary { display: none; }
"""


# --- assembling the printable page ---------------------------------------------------------

# Left out: the API reference, a quarter of the site's text, made for looking names up (the
# site's search, and the docstrings themselves, serve that better than printed pages).
LEFT_OUT = ("api",)


def toc_stems(root: Path = ROOT) -> list[str]:
    """The documents of ``_toc.yml`` in reading order (the root first), without suffix, less
    those in LEFT_OUT."""
    text = (root / "_toc.yml").read_text()
    stems = [re.search(r"^root:\s*(\S+)", text, re.M).group(1)]
    stems += re.findall(r"^\s*-\s*file:\s*(\S+)", text, re.M)
    return [s for s in stems if s not in LEFT_OUT]


def _article(page_html: str):
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page_html, "html.parser")
    article = soup.select_one("article.bd-article") or soup.select_one("main")
    if article is None:
        raise RuntimeError("no article in the page")
    return soup, article


def _prefix(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", stem).strip("-")


def _rewrite(article, stem: str, stems: set[str], page_dir: Path, site: Path) -> None:
    """Prefix the page's ids with its name; point links to other pages at their sections
    here; point images and other files at the built site."""
    me = _prefix(stem)
    for tag in article.find_all(id=True):
        tag["id"] = f"{me}--{tag['id']}"
    for a in article.find_all("a", href=True):
        href = a["href"]
        if href.startswith("#"):
            a["href"] = f"#{me}--{href[1:]}" if len(href) > 1 else f"#{me}"
            continue
        if re.match(r"^[a-z]+:", href):
            continue
        path, _, fragment = href.partition("#")
        target = (page_dir / path).resolve()
        try:
            rel = target.relative_to(site.resolve())
        except ValueError:
            continue
        other = str(rel.with_suffix("")) if rel.suffix == ".html" else None
        if other in stems:
            a["href"] = f"#{_prefix(other)}--{fragment}" if fragment else f"#{_prefix(other)}"
        else:
            a["href"] = os.path.relpath(target, site.parent / PRINT_DIR_NAME)
    for tag in article.find_all(["img", "source"], src=True):
        if not re.match(r"^[a-z]+:", tag["src"]):
            tag["src"] = os.path.relpath((page_dir / tag["src"]).resolve(),
                                         site.parent / PRINT_DIR_NAME)


def _take_solutions(article) -> list:
    """Remove the page's solutions (sphinx-exercise's ``div.solution``) and return them."""
    taken = []
    for div in article.select("div.solution"):
        if div.find_parent("div", class_="solution") is None:
            taken.append(div.extract())
    return taken


def assemble(site: Path, root: Path = ROOT, *, solutions: bool = True,
             filename: str = "book.html") -> Path:
    """Write the printable page of the whole book; return its path. With ``solutions``
    False (the student edition, scripts/student-edition, as ``filename``), they are left
    out."""
    from bs4 import BeautifulSoup

    stems = toc_stems(root)
    out_dir = site.parent / PRINT_DIR_NAME
    if filename == "book.html":
        shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    static = os.path.relpath(site / "_static", out_dir)
    first = (site / f"{stems[1]}.html").read_text()       # a chapter: its styles and MathJax
    head_soup = BeautifulSoup(first, "html.parser")
    chapter_dir = (site / stems[1]).parent
    styles = [f'<link rel="stylesheet" href="{os.path.relpath(chapter_dir / link["href"], out_dir)}">'
              for link in head_soup.select('link[rel="stylesheet"]')]
    mathjax_config = next((s.string for s in head_soup.find_all("script")
                           if s.string and "window.MathJax" in s.string), "")
    title = head_soup.title.string.split("\u2014")[-1].strip() if head_soup.title else ""
    title = title or "Attention, from the proof up"

    with_solutions = solutions
    sections, solutions, toc = [], [], []
    needs_vega = False
    for stem in stems:
        page = site / f"{stem}.html"
        text = page.read_text()
        needs_vega |= 'class="attncore-vega"' in text
        _, article = _article(text)
        _rewrite(article, stem, set(stems), page.parent, site)
        taken = _take_solutions(article)
        heading = article.find(["h1"])
        name = heading.get_text(" ", strip=True).rstrip("#\u00b6 ") if heading else stem
        if stem != stems[0]:
            toc.append(f'<li><a href="#{_prefix(stem)}">{html.escape(name)}</a></li>')
        if taken and with_solutions:
            solutions.append(f'<h2>{html.escape(name)}</h2>' + "".join(str(t) for t in taken))
        sections.append(f'<section class="attncore-print-page" id="{_prefix(stem)}">'
                        f"{article.decode_contents()}</section>")
    last = ('<li><a href="#solutions">Solutions to the exercises</a></li>'
            if with_solutions else "")
    front = (f'<section class="attncore-print-page"><h1 class="attncore-print-title">'
             f'{html.escape(title)}</h1><p class="attncore-print-licence">'
             f'{html.escape(LICENCE_LINE)}</p><h2>Contents</h2><ol class="attncore-print-toc">'
             f'{"".join(toc)}{last}</ol></section>')
    back = ('<section class="attncore-print-page" id="solutions"><h1>Solutions to the '
            'exercises</h1>' + "".join(solutions) + "</section>") if with_solutions else ""
    # Print needs neither MathJax's menu nor the hidden MathML copy of each formula that it
    # adds for screen readers (half of its work), which a printed page cannot use.
    scripts = [f"<script>{mathjax_config}\n"
               "window.MathJax.options = Object.assign(window.MathJax.options || {}, "
               "{enableMenu: false, enableAssistiveMml: false});</script>",
               f'<script defer src="{static}/mathjax/tex-chtml.js"></script>']
    if needs_vega:
        scripts.append(f'<script src="{static}/vega/attncore-vega.js"></script>')
    page = ("<!DOCTYPE html>\n<html lang=\"en\" data-theme=\"light\"><head>"
            '<meta charset="utf-8"><title>' + html.escape(title) + "</title>"
            + "".join(styles) + f"<style>{PRINT_CSS}</style>" + "".join(scripts)
            + '</head><body><div class="bd-article-container"><article class="bd-article">'
            + front + "".join(sections) + back + "</article></div></body></html>\n")
    out = out_dir / filename
    out.write_text(page, encoding="utf-8")
    return out


# --- printing it ------------------------------------------------------------------------------

class _Pipe:
    """Just enough of the DevTools protocol over Chromium's pipe to load and print a page."""

    def __init__(self, chromium: str, profile: str):
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def fds_3_and_4() -> None:                       # in the child, before exec
            r = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)
            w = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "about:blank"], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=fds_3_and_4,
                                     close_fds=False, env={**os.environ, "HOME": profile})
        os.close(to_r)
        os.close(from_w)
        self.buffer, self.next_id = b"", 0

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = TIMEOUT_S) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError(f"Chromium did not answer {method}:\n"
                                       f"{self.log.read().decode(errors='replace')[-2000:]}")
                if select.select([self.from_r], [], [], left)[0]:
                    self.buffer += os.read(self.from_r, 1 << 22)
            raw, self.buffer = self.buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        for fd in (self.to_w, self.from_r):
            os.close(fd)
        self.log.close()


def print_pdf(page: Path, out: Path, chromium: str) -> int:
    """Print ``page`` to ``out`` once it is typeset; return how many formulas it holds."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as profile:
        pipe = _Pipe(chromium, profile)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget",
                                {"targetId": target, "flatten": True})["sessionId"]
            pipe.call("Runtime.enable", session=session)
            pipe.call("Page.enable", session=session)
            pipe.call("Page.navigate", {"url": page.as_uri()}, session)
            answer = pipe.call("Runtime.evaluate",
                               {"expression": READY % {"limit_ms": TIMEOUT_S * 1000 // 2},
                                "awaitPromise": True, "returnByValue": True}, session)
            if "exceptionDetails" in answer:
                raise RuntimeError(f"the book's page did not settle: {answer['exceptionDetails']}")
            formulas = int(answer["result"]["value"])
            settled = time.monotonic()
            printed = pipe.call("Page.printToPDF", {
                "printBackground": True, "preferCSSPageSize": True,
                "displayHeaderFooter": True, "headerTemplate": "<span></span>",
                "footerTemplate": '<div style="font-size:8pt;width:100%;text-align:center">'
                                  '<span class="pageNumber"></span></div>',
                "generateDocumentOutline": True}, session)
        finally:
            pipe.close()
    out.write_bytes(base64.b64decode(printed["data"]))
    print(f"book_pdf: typeset in {settled - start:.0f} s, printed in "
          f"{time.monotonic() - settled:.0f} s")
    return formulas


def drop_link(site: Path) -> None:
    """Remove the landing page's link to the PDF (there is no PDF)."""
    index = site / "index.html"
    text = index.read_text()
    text = re.sub(rf'<span class="{LINK_CLASS}">.*?</span>', "", text, flags=re.S)
    index.write_text(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    site = Path(argv[0] if argv else ROOT / "_build" / "html").resolve()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from browser import ENV, browser_or_none

    chromium, why = browser_or_none()
    if chromium is None:
        if os.environ.get(ENV, "").strip():
            print(f"book_pdf: {why}", file=sys.stderr)     # a variable set wrong: an error
            return 1
        drop_link(site)
        print(f"book_pdf: no PDF of the book: {why}; the landing page does not link one")
        return 0
    start = time.monotonic()
    page = assemble(site)
    assembled = time.monotonic()
    out = site / PDF_NAME
    formulas = print_pdf(page, out, chromium)
    print(f"book_pdf: {out.name} ({out.stat().st_size / 1e6:.1f} MB, {formulas} formulas): "
          f"page assembled in {assembled - start:.0f} s, typeset and printed in "
          f"{time.monotonic() - assembled:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
