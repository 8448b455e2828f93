"""The website: it builds with warnings as errors, and its math renders with no network.

The build is the README's own command (scripts/build-book). The browser check loads built
pages from disk in Debian's headless Chromium (one browser for all pages, driven through its
DevTools pipe: see headless_chromium.py), with every network request refused, asserts that
MathJax (served from the site itself) typeset the formulas, and that no page reported an
error: no uncaught exception, no console.error, no file that failed to load.
"""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import pytest
from headless_chromium import BrowserError, Chromium

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"


@pytest.fixture(scope="module")
def site() -> Path:
    """Build the book once for this module, exactly as the README tells a reader to."""
    proc = subprocess.run([str(ROOT / "scripts" / "build-book")], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1500)
    if proc.returncode != 0:
        pytest.fail(f"the book build failed (warnings are errors):\n{proc.stdout[-6000:]}")
    return SITE


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def test_every_toc_entry_has_a_page(site):
    from test_book_structure import toc_files

    for stem in toc_files():
        assert (site / f"{stem}.html").is_file(), f"no page for {stem}"


def test_mathjax_is_served_from_the_site(site):
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert (site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()
    page = (site / "chapters" / "00_how_to_use.html").read_text()
    assert re.search(r'src="\.\./_static/mathjax/tex-chtml\.js(\?v=\w+)?"', page)


def test_no_page_loads_anything_from_the_network(site):
    # Links to the repository are fine; scripts, styles and fonts must all be local.
    remote = re.compile(r'<(script|link|img|iframe)\b[^>]*\b(src|href)="(https?:)?//', re.I)
    for page in pages(site):
        for m in remote.finditer(page.read_text()):
            tag = page.read_text()[m.start():m.start() + 200]
            if m.group(1).lower() == "link" and 'rel="canonical"' in tag:
                continue
            pytest.fail(f"{page.relative_to(site)} loads a remote resource: {tag}")


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for every page of this module (started once: it costs a second
    of CPU a time), closed, or killed, when the module is done."""
    try:
        chromium = Chromium()
    except BrowserError as e:
        pytest.fail(str(e))
    with chromium:
        yield chromium


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


def _toc_pages() -> list[str]:
    from test_book_structure import toc_files

    return sorted(toc_files())


@pytest.mark.browser
@pytest.mark.parametrize("stem", _toc_pages())
def test_page_renders_offline_without_errors(site, browser, stem):
    page = site / f"{stem}.html"
    source = page.read_text()
    n_math = len(re.findall(r'class="[^"]*\bmath\b', source))
    dom, console_errors = browser.render(page)
    assert not console_errors, f"{stem}: errors in the browser console: {console_errors[:3]}"
    typeset = len(re.findall(r"<mjx-container\b", dom))
    assert typeset >= n_math, f"{stem}: {typeset} formulas typeset, expected >= {n_math}"
    text = visible_text(dom, code=False)
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(text)})
    assert not raw, f"{stem}: TeX left untypeset in the page text: {raw[:5]}"
    for delim in (r"\(", r"\[", r"\begin{"):
        assert delim not in text, f"{stem}: untypeset TeX {delim!r} left in the visible text"
    # Solutions stay collapsed until the reader opens them.
    solutions = re.findall(r'<div class="([^"]*\bsolution\b[^"]*)"', dom)
    shown = [c for c in solutions if "toggle-hidden" not in c]
    assert not shown, f"{stem}: {len(shown)} solutions shown open: {shown[:2]}"


@pytest.mark.browser
def test_the_browser_checks_catch_console_errors_and_raw_tex(browser, tmp_path):
    # Guards the test above against passing vacuously: each kind of error, alone on a page,
    # is reported (Chromium's own log cannot tell a console.error from a console.log), and
    # a page that only logs and informs is not.
    broken = {  # what: (the page's script, words its report must hold)
        "a redeclared const": ("<script>const a = 1;</script><script>const a = 2;</script>",
                               "already been declared"),
        "a plain console.error": ("<script>console.error('Got invalid theme mode');</script>",
                                  "Got invalid theme mode"),
        "an uncaught exception": ("<script>null.mode;</script>", "TypeError"),
        "a console.error after a timer": (
            "<script>setTimeout(() => console.error('late error'), 5000);</script>",
            "late error"),
        "a script that failed to load": ('<script src="missing.js"></script>', "missing.js"),
    }
    for i, (what, (body, words)) in enumerate(broken.items()):
        page = tmp_path / f"broken_{i}.html"
        page.write_text(f"<!DOCTYPE html><html><body><p>x</p>{body}</body></html>")
        dom, errors = browser.render(page)
        assert any(words in e for e in errors), f"{what} was not reported: {errors}"
    page = tmp_path / "quiet.html"
    page.write_text("<!DOCTYPE html><html><body><p>Raw $x + \\mathbf{y}$ here.</p><script>"
                    "console.log('log'); console.info('info');</script></body></html>")
    dom, errors = browser.render(page)
    assert not errors, f"console.log and console.info were reported as errors: {errors}"
    assert RAW_TEX.search(visible_text(dom, code=False))


def test_pages_show_the_outputs_nbval_verified(site):
    # The site is built from the stored outputs (no execution); nbval proves they equal a
    # fresh run. Every printed line of every chapter must be on its page.
    import json

    from test_book_structure import NOTEBOOKS

    checked = 0
    for nb in NOTEBOOKS:
        text = html.unescape(re.sub(r"<[^>]+>", "", (site / "chapters" /
                                                     f"{nb.stem}.html").read_text()))
        for cell in json.loads(nb.read_text())["cells"]:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    for line in "".join(out["text"]).splitlines():
                        if line.strip():
                            assert line.strip() in text, f"{nb.name}: {line!r} not on its page"
                            checked += 1
    assert checked > 100


def test_the_chapters_have_math_to_check(site):
    # Guards the test above against passing vacuously (e.g. if math stopped being emitted).
    for stem in ("chapters/00_how_to_use", "chapters/02_why_sqrt_dk", "appendix/proofs"):
        assert re.search(r'class="[^"]*\bmath\b', (site / f"{stem}.html").read_text()), stem


def test_bibliography_labels_read_like_the_citations(site):
    # A reader who looks up "Vaswani et al. (2017)" in a chapter's references, or in the
    # bibliography, finds an entry labelled the same way, "Vaswani et al., 2017".
    bib = (site / "bibliography.html").read_text()
    labels = re.findall(r'<div class="citation" id="[^"]+"[^>]*>\s*<span class="label">'
                        r'<span class="fn-bracket">\[</span>([^<]+)<', bib)
    labels = {" ".join(html.unescape(label).split()) for label in labels}
    keys = re.findall(r"^@\w+\{", (ROOT / "references.bib").read_text(), re.M)
    assert len(labels) == len(keys), \
        f"the bibliography lists {len(labels)} entries, references.bib holds {len(keys)}"
    checked = 0
    for page in sorted((site / "chapters").glob("*.html")):
        dom = page.read_text()
        section = re.search(r'<section id="references">(.*?)</section>', dom, re.S)
        if not section:
            continue
        for item in re.findall(r"<li>(.*?)</li>", section.group(1), re.S):
            text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", item)).split())
            m = re.match(r"(.+?) \((\d{4}[a-z]?)\)\. ", text)
            assert m, f"{page.name}: a reference that does not start with 'Who (year).': {text!r}"
            assert f"{m.group(1)}, {m.group(2)}" in labels, \
                f"{page.name}: {m.group(1)} ({m.group(2)}) has no entry labelled so in the bibliography"
            checked += 1
    assert checked >= 10


# --- the site speaks to readers, and its buttons lead somewhere ---------------------------------

def _notebook_setup():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import notebook_setup

    return notebook_setup


# Paths of the machine that built the site, and words about how it was produced.
LOCAL_PATH = re.compile(r"(?<![\w.])(/work|/home|/tmp|/root)\b|\.venv\b")
PRODUCTION = re.compile(r"\b(lent|this task|sessions?)\b", re.I)
# How the course is made (tests, markers, glue), and roles MyST did not resolve.
MACHINERY = re.compile(r"\bnbval\b|NBVAL|\bglue\b|test suite|\bpytest\b|in this edition|"
                       r"\{(?:glue|cite|doc|numref|ref|prf:ref)(?::\w+)?\}`", re.I)


def test_the_visible_text_speaks_to_readers(site):
    found = []
    for page in pages(site):
        text = " ".join(visible_text(page.read_text()).split())
        for pattern in (LOCAL_PATH, PRODUCTION, MACHINERY):
            for m in pattern.finditer(text):
                context = text[max(0, m.start() - 60):m.end() + 40]
                found.append(f"{page.relative_to(site)}: ...{context}...")
    assert not found, "text for the builders, not the readers:\n" + "\n".join(found)


def test_visible_text_check_catches_what_it_should():
    # Guards the test above against passing vacuously.
    for bad in ("python executable: /work/main/.venv/bin/python", "see /home/me/x",
                "run .venv/bin/jupyter lab", "no GPU was lent to this task", "this session",
                "not checked by the test suite", "Every notebook runs as a test (nbval, strict)",
                "{glue:text}`sqrt-dk-ratio`", "{cite}`ba2016layer`", "not measured in this edition"):
        assert LOCAL_PATH.search(bad) or PRODUCTION.search(bad) or MACHINERY.search(bad), bad
    for fine in ("https://example.org/home/page", "the square root", "excellent, silent",
                 "./scripts/lab opens JupyterLab"):
        assert not LOCAL_PATH.search(fine) and not PRODUCTION.search(fine), fine
        assert not MACHINERY.search(fine), fine


def test_no_placeholder_repository_and_no_dead_buttons(site):
    ns = _notebook_setup()
    url = ns.configured_repository()
    assert "attncore/attention-course" not in url
    chapter = (site / "chapters" / "00_how_to_use.html").read_text()
    for page in pages(site):
        assert "attncore/attention-course" not in page.read_text(), page.relative_to(site)
    buttons = ("dropdown-launch-buttons", "btn-source-repository-button",
               "btn-source-issues-button", "mybinder.org", "colab.research.google.com")
    if not url:
        # No repository named (a local build): no button that would lead nowhere.
        for page in pages(site):
            shown = [b for b in buttons if b in page.read_text()]
            assert not shown, f"{page.relative_to(site)} shows {shown} with no repository named"
    else:
        owner_repo = "/".join(url.rstrip("/").split("/")[-2:])
        for b in buttons:
            assert b in chapter, f"the chapter pages lack {b} although {url} is named"
        assert f'href="{url}"' in chapter
        assert f"mybinder.org/v2/gh/{owner_repo}/" in chapter
        assert f"colab.research.google.com/github/{owner_repo}/blob/" in chapter
    # The notebooks a reader downloads from the site install attncore from the named repository.
    downloads = sorted((site / "_sources" / "chapters").glob("*.ipynb"))
    assert downloads, "the site offers no notebook to download"
    for nb in downloads:
        named = re.findall(r'REPOSITORY = \\"(.*?)\\"', nb.read_text())
        assert named == ([url] if url else []), f"{nb.name} names {named}, _config.yml {url!r}"


# --- the course bundle, and the site with a repository named ------------------------------------

BUNDLE = "course/attention-course.zip"
# (test_no_placeholder_repository_and_no_dead_buttons checks that the build without a
# repository, the committed default, shows none of them)
LAUNCH_BUTTONS = ("dropdown-launch-buttons", "btn-source-repository-button",
                  "btn-source-issues-button", "mybinder.org", "colab.research.google.com")


def _chapter_pages(site: Path) -> list[Path]:
    from test_book_structure import NOTEBOOKS

    return [site / "chapters" / f"{nb.stem}.html" for nb in NOTEBOOKS]


def _check_the_bundle(site: Path, root: Path) -> None:
    """The bundle is published at BUNDLE with every chapter as ``root`` stores it, and linked
    (by a relative address, so that it works from disk) from the front page and from the
    download menu of every chapter; the set-up cell is on no page."""
    import zipfile

    bundle = site / BUNDLE
    assert bundle.is_file(), f"no course bundle at {BUNDLE}"
    with zipfile.ZipFile(bundle) as zf:
        names = zf.namelist()
        for nb in sorted((root / "chapters").glob("*.ipynb")):
            assert zf.read(f"attention-course/{nb.name}") == nb.read_bytes(), nb.name
    for name in ("README.txt", "requirements.txt", "_course_setup.py"):
        assert f"attention-course/{name}" in names, name
    assert [n for n in names if re.fullmatch(r"attention-course/attncore-[^/]+\.whl", n)]
    pages = [site / "index.html", *_chapter_pages(site)]
    for page in pages:
        text = page.read_text()
        links = re.findall(r'href="([^"]*attention-course\.zip)"', text)
        assert links, f"{page.relative_to(site)} does not link the course bundle"
        for link in links:
            assert (page.parent / link).resolve() == bundle.resolve(), (page.name, link)
        if page.name != "index.html":
            assert "download-course-bundle-button" in text, page.name
        assert "_course_setup" not in text and _notebook_setup().MARKER not in text, page.name


def test_the_course_bundle_is_published_and_linked(site):
    _check_the_bundle(site, ROOT)


@pytest.fixture(scope="module")
def site_with_repository(tmp_path_factory) -> tuple[Path, Path, str]:
    """The book built from a copy of this checkout in which `scripts/set-repository` named a
    repository: the build a fork's GitHub Pages workflow makes (the one extra build)."""
    import os
    import shutil
    import sys

    url = "https://github.com/someone/attention-fork"
    copy = tmp_path_factory.mktemp("with-repository") / "course"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.split(b"\0")):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            (copy / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / os.fsdecode(name))
    proc = subprocess.run([sys.executable, str(copy / "scripts" / "set-repository"), url],
                          cwd=copy, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The flags of scripts/build-book, whose set-up the copy would repeat.
    env = {**os.environ, "PYTHONPATH": str(copy)}
    proc = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", "--all",
                           "--warningiserror", "--keep-going", "--quiet", str(copy)],
                          cwd=copy, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=1500)
    if proc.returncode != 0:
        pytest.fail(f"the book build with a repository failed:\n{proc.stdout[-6000:]}")
    return copy / "_build" / "html", copy, url


def test_with_a_repository_every_chapter_has_launch_buttons_and_the_bundle(site_with_repository):
    site, copy, url = site_with_repository
    owner_repo = "/".join(url.split("/")[-2:])
    for page in _chapter_pages(site):
        text = page.read_text()
        shown = [b for b in LAUNCH_BUTTONS if b in text]
        assert shown == list(LAUNCH_BUTTONS), f"{page.name} shows only {shown}"
        assert f"mybinder.org/v2/gh/{owner_repo}/" in text, page.name
        assert f"colab.research.google.com/github/{owner_repo}/blob/" in text, page.name
        assert f'href="{url}"' in text, page.name
    _check_the_bundle(site, copy)
    # The notebooks of the site and of the bundle install from the repository when alone.
    for nb in (site / "_sources" / "chapters").glob("*.ipynb"):
        assert f'REPOSITORY = \\"{url}\\"' in nb.read_text(), nb.name

