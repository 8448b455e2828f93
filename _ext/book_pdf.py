"""The whole book as one PDF, printed by headless Chromium from the built website.

    python _ext/book_pdf.py _build/html          # what scripts/build-book runs after the site
    ATTNCORE_PDF_SAMPLE=1 python _ext/book_pdf.py _build/html   # the test suite's: a sample

The site's pages, in the order of ``_toc.yml`` (going-further pages after their chapter; the
API reference left out, see LEFT_OUT), are joined into one printable page,
``_build/print/book.html`` (outside the site, so that the site holds no extra page): a cover,
a contents page, the article of each page, with the site's own styles and MathJax, all served
from the built site (no network). The ids of each page are prefixed with its name, so that
links between pages and to their sections become links inside the PDF. The solutions, which
the site keeps collapsed under their exercises, are moved to a last part, "Solutions to the
exercises": a printed page cannot hide them, and an answer printed under its exercise would
give it away.

What only a screen can use is left out or replaced: each interactive figure prints the still
picture of its starting state that its notebook stores beside the chart (its caption says
so), the code that the site folds away (with its "Show code cell source" toggle) and the
self-checks' "Not answered yet" lines are not printed. The print styles (``PRINT_CSS``) make
tables fit the page and wrap, keep figures and a heading with what follows it whole, and never
keep whole anything taller than a page (which would leave a blank page).

With ``ATTNCORE_PDF_SAMPLE=1`` (SAMPLE_ENV), which the test suite's build sets, the whole
page is written all the same but only a sample of the book is printed (SAMPLE: the cover,
the contents, chapters 0 and 2, chapter 2's going-further page, the performance page, the
proofs, and the solutions of those pages), from ``_build/print/sample.html``: the print code is tested on a few dozen pages,
and what needs no print on the whole page.

Chromium (Debian's ``chromium``, as the tests use) loads that page with the network off,
waits until MathJax has typeset every formula, and prints it with ``Page.printToPDF`` into
``_build/html/<PDF_NAME>``, which the landing page links, with bookmarks made from the
headings. It prints twice: Chromium cannot number a contents page itself, so the first
printing's bookmarks tell on which page each entry starts, and the second prints the
numbers (in boxes of fixed width, so that filling them moves nothing). Where no Chromium is
installed, nothing is printed and the landing page's link to the PDF is removed, so that the
site promises no file it lacks.

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

# Resolves once MathJax has typeset the page (the interactive figures are printed as their
# still pictures, so nothing else is drawn).
READY = """
new Promise((resolve, reject) => {
  const start = Date.now();
  (function wait() {
    const mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(() => resolve(document.querySelectorAll("mjx-container").length),
                              reject);
    } else if (Date.now() - start > %(limit_ms)d) {
      reject(new Error("MathJax did not finish within %(limit_ms)d ms"));
    } else {
      setTimeout(wait, 100);
    }
  })();
})
"""

# Print styles: one page of the site per printed section, code that wraps instead of being
# cut off at the margin, tables that fit the page's width and wrap their cells, figures kept
# whole (and never taller than a page, so that keeping them whole leaves no blank page), a
# heading kept with what follows it, no links' pilcrows, and none of the site's controls.
PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm; }
html, body { background: #fff !important; }
body { font-size: 10.5pt; }
.attncore-print-page { break-before: page; }
.attncore-print-page:first-of-type { break-before: auto; }
.attncore-print-cover { text-align: center; padding-top: 70mm; }
.attncore-print-cover h1 { font-size: 26pt; margin-bottom: 1.2rem; }
.attncore-print-cover p { font-size: 12pt; margin: 0.4rem 0; }
.attncore-print-cover p.attncore-print-licence { font-size: 9pt; margin: 3rem 10% 0; }
ul.attncore-print-toc { list-style: none; padding-left: 0; }
ul.attncore-print-toc li { margin: 0.15rem 0; display: flex; align-items: baseline; }
ul.attncore-print-toc li.attncore-toc-part { font-weight: 600; margin-top: 0.7rem; }
ul.attncore-print-toc li.attncore-toc-sub { padding-left: 1.5rem; font-size: 95%; }
ul.attncore-print-toc a { flex: 0 1 auto; }
ul.attncore-print-toc .attncore-toc-dots { flex: 1 1 auto; margin: 0 0.4rem;
  border-bottom: 1px dotted #999; }
ul.attncore-print-toc .attncore-toc-page { flex: 0 0 2.2rem; text-align: right; }
pre, div.highlight pre { white-space: pre-wrap !important; overflow: visible !important;
                         word-break: break-word; }
div.cell_output, div.output, mjx-container[display="true"], div.math,
.pst-scrollable-table-container, .table-wrapper, div.admonition, div.proof, div.exercise {
  overflow: visible !important; max-width: none !important; }
.bd-article table { width: 100% !important; max-width: 100% !important;
  table-layout: auto; font-size: 92%; }
.bd-article table td, .bd-article table th { white-space: normal !important;
  overflow-wrap: break-word; word-break: normal; hyphens: manual; }
.bd-article table tr { break-inside: avoid; }
/* a formula in a cell may wrap between its terms (MathJax sets it as one unbreakable box,
   whose width would push the table's last columns off the page) */
.bd-article table mjx-container, .bd-article table mjx-math { white-space: normal !important; }
.bd-article table mjx-container > mjx-math { display: inline !important; }
.vega-bindings, a.headerlink, .toggle-button, button.toggle-button, .copybtn,
.attncore-cards, .attncore-pdf, details.hide > summary { display: none !important; }
figure, img, svg, mjx-container[display="true"], div.cell_output:has(img) {
  break-inside: avoid; }
img { max-height: 235mm; object-fit: contain; }
h1, h2, h3, h4, p.admonition-title { break-after: avoid; break-inside: avoid; }
h2::after, h3::after, h4::after, p.admonition-title::after {
  content: ""; display: block; height: 5rem; margin-bottom: -5rem; }
/* Chromium doubles the bookmark of a heading that opens a page ("Why Why attention
   attention"), unless a line box comes first: an empty one, 1 px high. */
h1::before, h2::before, h3::before, h4::before { content: ""; display: block; height: 1px; }
.attncore-print-still { display: block; margin: 0 auto; width: 640px; max-width: 100%;
  height: auto; }
.attncore-print-note { font-style: italic; }
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



NOT_ANSWERED = "Not answered yet"
STILL_NOTE = ("In print, the figure shows its starting state; on the website and in the "
              "notebook its controls can be moved.")


def _stills(stem: str, root: Path) -> list[tuple[bytes, int]]:
    """(PNG, shown width in CSS pixels) of the still picture that each interactive figure of
    the notebook ``stem`` stores beside its Vega-Lite specification, in order."""
    path = root / f"{stem}.ipynb"
    if not path.is_file():
        return []
    found = []
    for cell in json.loads(path.read_text())["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            data = output.get("data", {})
            if any(k.startswith("application/vnd.vegalite") for k in data) and "image/png" in data:
                width = output.get("metadata", {}).get("image/png", {}).get("width", 640)
                found.append((base64.b64decode(data["image/png"]), int(width)))
    return found


def _print_stills(article, stem: str, root: Path, out_dir: Path) -> int:
    """Put each interactive figure's still picture in place of its Vega-Lite chart, whose
    controls a printed page cannot move, and say so under its caption; return how many."""
    boxes = article.select("div.attncore-vega")
    stills = _stills(stem, root)
    if len(stills) != len(boxes):
        raise RuntimeError(f"{stem}: {len(boxes)} interactive figures on the page, "
                           f"{len(stills)} still pictures in the notebook")
    for k, (box, (png, width)) in enumerate(zip(boxes, stills)):
        name = f"stills/{_prefix(stem)}-{k}.png"
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_bytes(png)
        img = article.new_tag("img", src=name, alt="", style=f"width: {width}px")
        img["class"] = ["attncore-print-still"]
        box.replace_with(img)
        figure = img.find_parent("figure")
        caption = figure.find("figcaption") if figure else None
        if caption is not None:
            note = article.new_tag("span")
            note["class"] = ["attncore-print-note"]
            note.string = " " + STILL_NOTE
            (caption.find("p") or caption).append(note)
    return len(boxes)


def _drop_web_leftovers(article) -> None:
    """Remove what only a screen can use: the folded code of hidden inputs (with their
    "Show code cell source" toggles), and the self-checks' "Not answered yet" lines."""
    for details in article.select("details.hide"):
        details.decompose()
    for output in article.select("div.cell_output"):
        if output.get_text(" ", strip=True).startswith(NOT_ANSWERED):
            output.decompose()


def _plain_headings(article) -> None:
    """Headings whose PDF bookmarks read right. Chromium makes a bookmark from the heading's
    lines of text and drops the space where a line wraps ("Whyattention"), so the spaces
    between words become no-break spaces, each followed by a <wbr> where the line may wrap
    (maths left alone); and the link pilcrow goes."""
    for heading in article.find_all(["h1", "h2", "h3", "h4"]):
        for a in heading.select("a.headerlink"):
            a.decompose()
        for text in heading.find_all(string=True):
            if " " not in text or any("math" in (p.get("class") or []) or p.name == "mjx-container"
                                      for p in text.parents):
                continue
            words = str(text).split(" ")
            pieces = [words[0]]
            for word in words[1:]:
                pieces += ["\u00a0", article.new_tag("wbr"), word]
            for piece in reversed(pieces):
                text.insert_after(piece)
            text.extract()


def toc_parts(root: Path = ROOT) -> list[tuple[str, list[tuple[str, bool]]]]:
    """(caption, [(stem, is a section of the chapter before it), ...]) for each part of
    ``_toc.yml``, less the documents in LEFT_OUT."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    parts = []
    for part in toc.get("parts", []):
        entries = []
        for chapter in part.get("chapters") or []:
            entries.append((str(chapter["file"]), False))
            entries += [(str(sec["file"]), True) for sec in chapter.get("sections") or []]
        entries = [(stem, sub) for stem, sub in entries if stem not in LEFT_OUT]
        if entries:
            parts.append((part.get("caption", ""), entries))
    return parts


def _toc_item(target: str, name: str, css: str = "") -> str:
    """One line of the contents: the title, dots, and a page number that the first printing
    tells (:func:`number_contents`); its box has a fixed width, so filling it moves nothing."""
    return (f'<li class="{css}"><a href="#{target}">{html.escape(name)}</a>'
            f'<span class="attncore-toc-dots"></span>'
            f'<span class="attncore-toc-page" data-target="{target}"></span></li>')


# The pages that the test suite's build prints (scripts/build-book with SAMPLE_ENV set; see
# tests/test_site_pdf.py): one of each kind that the print has to get right, so that the
# print code is tested on a few dozen pages instead of the whole book. Chapter 0 (a chapter
# unnumbered), chapter 2 (numbered, with formulas, figures, an interactive figure's still
# picture, exercises whose solutions fill the part "Solutions to the exercises", and the
# book's table widest for its formulas, "Common slips in this derivation"), its going-further
# page (a section of a chapter), the performance page (tables of up to 8 columns, the most
# of any table in the book: tests/test_site_pdf.py checks that none has more), and the proofs.
SAMPLE = ("chapters/00_how_to_use", "chapters/02_why_sqrt_dk",
          "chapters/02_why_sqrt_dk_going_further", "performance", "appendix/proofs")
SAMPLE_ENV = "ATTNCORE_PDF_SAMPLE"
SAMPLE_FILE = "sample.html"
STUDENT_FILE = "student.html"


def assemble(site: Path, root: Path = ROOT, *, solutions: bool = True,
             filename: str = "book.html", sample: tuple[str, ...] | None = None) -> Path:
    """Write the printable page of the whole book; return its path. With ``solutions``
    False (the student edition, scripts/student-edition, as ``filename``), they are left
    out. With ``solutions`` and ``filename`` "book.html" (the build's), also write
    STUDENT_FILE beside it: the same page without the solutions, from the same reading of
    the site's pages, for the tests (a second reading took 11-14 s of one core). With
    ``sample`` (stems of ``_toc.yml``, such as SAMPLE), also write SAMPLE_FILE beside it:
    the same page with only those pages, their contents entries and their solutions (its
    path is ``assemble(...).parent / SAMPLE_FILE``). Raises RuntimeError
    when a page has no article, when a page's interactive figures and its notebook's still
    pictures differ in number, or when a stem of ``sample`` is not in the book."""
    from bs4 import BeautifulSoup

    import yaml

    stems = toc_stems(root)
    if sample is not None and set(sample) - set(stems):
        raise RuntimeError(f"not in the printed book: {sorted(set(sample) - set(stems))}")
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
    config_file = root / "_config.yml"
    config = (yaml.safe_load(config_file.read_text()) if config_file.is_file() else None) or {}
    title = str(config.get("title") or "Attention, from the proof up")
    author = str(config.get("author") or "")

    with_solutions = solutions
    sections, solutions, names = {}, {}, {}
    for stem in stems:
        page = site / f"{stem}.html"
        _, article = _article(page.read_text())
        _rewrite(article, stem, set(stems), page.parent, site)
        _print_stills(article, stem, root, out_dir)
        _drop_web_leftovers(article)
        _plain_headings(article)
        taken = _take_solutions(article)
        heading = article.find(["h1"])
        name = heading.get_text(" ", strip=True).rstrip("#\u00b6 ") if heading else stem
        names[stem] = re.sub(r"\s+", " ", name)
        if taken and with_solutions:
            solutions[stem] = (f'<h2>{html.escape(names[stem])}</h2>'
                               + "".join(str(t) for t in taken))
        sections[stem] = (f'<section class="attncore-print-page" id="{_prefix(stem)}">'
                          f"{article.decode_contents()}</section>")

    def page_of(chosen: list[str], with_solutions: bool = with_solutions) -> str:
        toc = []
        for caption, entries in toc_parts(root):
            items = [_toc_item(_prefix(stem), names[stem], "attncore-toc-sub" if sub else "")
                     for stem, sub in entries if stem in chosen]
            if caption and items:
                toc.append(f'<li class="attncore-toc-part">{html.escape(caption)}</li>')
            toc += items
        if with_solutions:
            toc.append(_toc_item("solutions", "Solutions to the exercises", "attncore-toc-part"))
        cover = (f'<section class="attncore-print-page attncore-print-cover">'
                 f'<h1 class="attncore-print-title">{html.escape(title)}</h1>'
                 + (f"<p>{html.escape(author)}</p>" if author else "")
                 + f"<p>Printed from the course's website, {time.strftime('%Y-%m-%d')}</p>"
                 + f'<p class="attncore-print-licence">{html.escape(LICENCE_LINE)}</p>'
                 "</section>")
        front = (f'<section class="attncore-print-page"><h2>Contents</h2>'
                 f'<ul class="attncore-print-toc">{"".join(toc)}</ul></section>')
        back = ('<section class="attncore-print-page" id="solutions">'
                '<h1>Solutions to the '
                'exercises</h1>' + "".join(solutions[s] for s in chosen if s in solutions)
                + "</section>") if with_solutions else ""
        # Print needs neither MathJax's menu nor the hidden MathML copy of each formula that
        # it adds for screen readers (half of its work), which a printed page cannot use.
        scripts = [f"<script>{mathjax_config}\n"
                   "window.MathJax.options = Object.assign(window.MathJax.options || {}, "
                   "{enableMenu: false, enableAssistiveMml: false});</script>",
                   f'<script defer src="{static}/mathjax/tex-chtml.js"></script>']
        return ("<!DOCTYPE html>\n<html lang=\"en\" data-theme=\"light\"><head>"
                '<meta charset="utf-8"><title>' + html.escape(title) + "</title>"
                + "".join(styles) + f"<style>{PRINT_CSS}</style>" + "".join(scripts)
                + '</head><body><div class="bd-article-container"><article class="bd-article">'
                + cover + front + "".join(sections[s] for s in chosen) + back
                + "</article></div></body></html>\n")

    out = out_dir / filename
    out.write_text(page_of(stems), encoding="utf-8")
    if with_solutions and filename == "book.html":
        (out_dir / STUDENT_FILE).write_text(page_of(stems, with_solutions=False),
                                            encoding="utf-8")
    if sample is not None:
        (out_dir / SAMPLE_FILE).write_text(page_of([s for s in stems if s in sample]),
                                           encoding="utf-8")
    return out


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def page_numbers(pdf: bytes, entries: list[tuple[str, str]]) -> dict[str, int]:
    """Target id -> the printed page number (1 for the first page) of each contents entry
    ``(target, title)``, read from the PDF's bookmarks, which Chromium makes from the
    headings: the first bookmark, after the one before, whose letters hold the title's."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    try:
        marks = []
        for mark in doc.get_toc():
            dest = mark.get_dest()
            index = dest.get_index() if dest is not None else None
            if index is not None and mark.level == 0:        # the pages' titles (h1)
                marks.append((_letters(mark.get_title()), index + 1))
    finally:
        doc.close()
    found, at = {}, 0
    for target, title in entries:
        want = _letters(title)
        for i in range(at, len(marks)):
            if want and want in marks[i][0]:
                found[target], at = marks[i][1], i + 1
                break
    return found


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


PRINT_OPTIONS = {
    "printBackground": True, "preferCSSPageSize": True,
    "displayHeaderFooter": True, "headerTemplate": "<span></span>",
    "footerTemplate": '<div style="font-size:8pt;width:100%;text-align:center">'
                      '<span class="pageNumber"></span></div>',
    "generateDocumentOutline": True}
# The contents' entries, (target id, title), and the script that writes their page numbers.
CONTENTS = """[...document.querySelectorAll("span.attncore-toc-page")].map(
  span => [span.dataset.target, span.parentElement.querySelector("a").textContent])"""
FILL = """(numbers => document.querySelectorAll("span.attncore-toc-page").forEach(span => {
  if (span.dataset.target in numbers) span.textContent = numbers[span.dataset.target];
}))(%s)"""


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
            first = base64.b64decode(pipe.call("Page.printToPDF", PRINT_OPTIONS, session)["data"])
            # Chromium cannot number the contents itself (no target-counter() in print): the
            # first printing tells on which page each entry starts, the second prints them.
            entries = pipe.call("Runtime.evaluate", {"expression": CONTENTS,
                                                     "returnByValue": True}, session)
            numbers = page_numbers(first, [tuple(e) for e in entries["result"]["value"]])
            pipe.call("Runtime.evaluate", {"expression": FILL % json.dumps(numbers)}, session)
            printed = pipe.call("Page.printToPDF", PRINT_OPTIONS, session)
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
    # The test suite's build prints only SAMPLE (the whole page is written all the same, and
    # the tests check on it what needs no print); the readers' build prints the whole book.
    sample = SAMPLE if os.environ.get(SAMPLE_ENV, "").strip() not in ("", "0") else None
    page = assemble(site, sample=sample)
    if sample is not None:
        page = page.parent / SAMPLE_FILE
        print(f"book_pdf: {SAMPLE_ENV} is set: printing only {', '.join(sample)}")
    assembled = time.monotonic()
    out = site / PDF_NAME
    formulas = print_pdf(page, out, chromium)
    print(f"book_pdf: {out.name} ({out.stat().st_size / 1e6:.1f} MB, {formulas} formulas): "
          f"page assembled in {assembled - start:.0f} s, typeset and printed in "
          f"{time.monotonic() - assembled:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
