"""The website that the site's tests read, built once for the whole test run, and what those
tests share (tests/test_site*.py).

The build is the README's own command, ``scripts/build-book``, with ``ATTNCORE_PDF_SAMPLE=1``:
its PDF is a sample of the book (tests/test_site_pdf.py says what is checked on it, and what
on the whole printable page, which the build writes all the same). Under ``scripts/test`` the test
files run in several worker processes; the first that needs the site builds it, holding a lock,
and leaves a note of the result keyed by the run's id, so that the others read the same build
(or the same failure) instead of building again. A developer who has just built the site can
point ``ATTNCORE_BUILT_SITE`` at its folder (``_build/html``) to run the site's tests on it
without a build: scripts/test never sets it.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
BUILT_SITE = "ATTNCORE_BUILT_SITE"


def _run_id() -> str:
    # The same for every worker of one pytest-xdist run, new for the next run.
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"


def build_once() -> Path:
    """The built site (``_build/html``), built by this run's first caller; raises
    ``pytest.fail`` with the build's log when the build failed (for every caller)."""
    given = os.environ.get(BUILT_SITE, "").strip()
    if given:
        site = Path(given).resolve()
        if not (site / "index.html").is_file():
            pytest.fail(f"{BUILT_SITE}={given!r}: no built site there (no index.html)")
        return site
    from filelock import FileLock

    (ROOT / "_build").mkdir(exist_ok=True)
    note = ROOT / "_build" / f".site-build-{_run_id()}"
    with FileLock(str(ROOT / "_build" / ".site-build.lock")):
        if not note.exists():
            for old in (ROOT / "_build").glob(".site-build-*"):
                old.unlink()                       # notes of earlier runs
            # The PDF of a sample of the book (_ext/book_pdf.py's SAMPLE): the print code
            # tested on a few dozen pages; readers' builds print all of it.
            proc = subprocess.run([str(ROOT / "scripts" / "build-book")], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=1500, env={**os.environ, "ATTNCORE_PDF_SAMPLE": "1"})
            note.write_text("" if proc.returncode == 0 else
                            "the book build failed (warnings are errors):\n"
                            + proc.stdout[-6000:])
    failure = note.read_text()
    if failure:
        pytest.fail(failure)
    return SITE


def toc_pages() -> list[str]:
    from test_book_structure import toc_files

    return sorted(toc_files())


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def visible_text(dom: str, *, code: bool = True) -> str:
    dom = re.sub(r"<head\b.*?</head>", " ", dom, flags=re.S | re.I)
    dom = re.sub(r"<(script|style|mjx-assistive-mml|noscript)\b.*?</\1>", " ", dom,
                 flags=re.S | re.I)
    if not code:
        dom = re.sub(r"<pre\b.*?</pre>", " ", dom, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


# TeX that MathJax should have typeset; seen in page text it means a formula was not parsed
# as math (a line of a formula read as a list item, say).
RAW_TEX = re.compile(r"\\(mathbf|mathrm|mathbb|operatorname|frac|sqrt|begin|end|left|right|"
                     r"top|cdot|sum|prod|exp|log|qquad|quad|alpha|beta|ell)\b|\$\$|"
                     r"(?<![\w$])\$(?=[^$\s])[^$\n]{1,80}(?<=\S)\$(?![\w$])")


def notebook_setup_module():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import notebook_setup

    return notebook_setup


# --- the course bundle, and the site with a repository named ------------------------------------

BUNDLE = "course/attention-course.zip"
# (test_no_placeholder_repository_and_no_dead_buttons checks that the build without a
# repository, the committed default, shows none of them)
LAUNCH_BUTTONS = ("dropdown-launch-buttons", "btn-source-repository-button",
                  "btn-source-issues-button", "mybinder.org", "colab.research.google.com")


def chapter_pages(site: Path) -> list[Path]:
    from test_book_structure import NOTEBOOKS

    return [site / "chapters" / f"{nb.stem}.html" for nb in NOTEBOOKS]


def check_the_bundle(site: Path, root: Path) -> None:
    """The bundle is published at BUNDLE with every chapter as ``root`` stores it (its links
    to the book's pages pointed at the bundle's copies: tests/test_running_anywhere.py checks
    the rest of the bundle), and linked (by a relative address, so that it works from disk)
    from the front page and from the download menu of every chapter; the set-up cell is on
    no page."""
    import sys
    import zipfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
    import bundle_pages

    bundle = site / BUNDLE
    assert bundle.is_file(), f"no course bundle at {BUNDLE}"
    with zipfile.ZipFile(bundle) as zf:
        names = zf.namelist()
        for nb in sorted((root / "chapters").glob("*.ipynb")):
            assert zf.read(f"attention-course/{nb.name}") == bundle_pages.chapter_for_bundle(
                nb), nb.name
    for name in ("README.txt", "requirements.txt", "_course_setup.py", "LICENSE"):
        assert f"attention-course/{name}" in names, name
    assert [n for n in names if re.fullmatch(r"attention-course/attncore-[^/]+\.whl", n)]
    pages = [site / "index.html", *chapter_pages(site)]
    for page in pages:
        text = page.read_text()
        links = re.findall(r'href="([^"]*attention-course\.zip)"', text)
        assert links, f"{page.relative_to(site)} does not link the course bundle"
        for link in links:
            assert (page.parent / link).resolve() == bundle.resolve(), (page.name, link)
        if page.name != "index.html":
            assert "download-course-bundle-button" in text, page.name
        assert "_course_setup" not in text and notebook_setup_module().MARKER not in text, page.name


# What a build without a repository must not promise, and a build with one must offer.
REPOSITORY_ONLY = ("rocket", "./scripts/lab", "clone", "Binder")


def promises(site: Path) -> dict[str, str]:
    return {name: visible_text((site / name).read_text(), code=False)
            for name in ("index.html", "chapters/00_how_to_use.html")}


PDF = "attention-from-the-proof-up.pdf"


def pdf_text(pdf: Path) -> tuple[str, list[tuple[float, float, int, int]]]:
    """The PDF's text, page after page, and (shown width pt, shown height pt, pixel width,
    pixel height) of every raster image in it."""
    try:
        import pypdfium2 as pdfium
        import pypdfium2.raw as pdfium_c
    except ImportError:
        pytest.fail("pypdfium2 reads the book's PDF: pip install -r requirements.txt")
    doc = pdfium.PdfDocument(pdf)
    texts, images = [], []
    for page in doc:
        texts.append(page.get_textpage().get_text_bounded())
        for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
            # (pypdfium2 5 renamed get_pos to get_bounds)
            bounds = obj.get_bounds if hasattr(obj, "get_bounds") else obj.get_pos
            left, bottom, right, top = bounds()
            images.append((right - left, top - bottom, *obj.get_px_size()))
    return "\n".join(texts), images


def small_site(root: Path, parts: list[tuple[str | None, list[tuple[str, str, str]]]], *,
               title_suffix: str = "") -> Path:
    """A small course in ``root`` as Sphinx builds it, for the print code's tests without a
    build: its ``_toc.yml`` and ``_build/html``, a landing page ("Welcome") and a page per
    chapter. ``parts``: ``[(caption or None, [(name, title, body), ...]), ...]``, a chapter's
    page ``chapters/NAME.html`` with ``TITLE`` as its h1 and ``BODY`` in its article. The
    built site's folder is returned."""
    toc = ["root: index", "parts:"]
    for caption, chapters in parts:
        toc.append(f"  - caption: {caption}" if caption else "  - chapters:")
        if caption:
            toc.append("    chapters:")
        toc += [f"      - file: chapters/{name}" for name, _, _ in chapters]
    (root / "_toc.yml").write_text("\n".join(toc) + "\n")
    site = root / "_build" / "html"
    (site / "chapters").mkdir(parents=True)
    page = (f'<html><head><title>x{title_suffix}</title></head><body>'
            '<article class="bd-article"><h1>{title}</h1>{body}</article></body></html>')
    (site / "index.html").write_text(page.format(title="Welcome", body="<p>Hello.</p>"))
    for _, chapters in parts:
        for name, title, body in chapters:
            (site / "chapters" / f"{name}.html").write_text(page.format(title=title, body=body))
    return site
