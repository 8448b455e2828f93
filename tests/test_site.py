"""The website: it builds with warnings as errors, and its math renders with no network.

The build is the README's own command (scripts/build-book). The browser check loads built
pages from disk in Debian's headless Chromium (one browser for all pages, driven through its
DevTools pipe: see headless_chromium.py), with every network request refused, asserts that
MathJax (served from the site itself) typeset the formulas, and that no page reported an
error: no uncaught exception, no console.error, no file that failed to load.
"""

from __future__ import annotations

import html
import json
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
# (How the course is made, tests, markers, glue, notes to authors: MACHINERY, below.)


def test_the_visible_text_speaks_to_readers(site):
    found = []
    for page in pages(site):
        text = " ".join(visible_text(page.read_text()).split())
        for pattern in (LOCAL_PATH, PRODUCTION):
            for m in pattern.finditer(text):
                context = text[max(0, m.start() - 60):m.end() + 40]
                found.append(f"{page.relative_to(site)}: ...{context}...")
    assert not found, "text for the builders, not the readers:\n" + "\n".join(found)


def test_visible_text_check_catches_what_it_should():
    # Guards the test above against passing vacuously.
    for bad in ("python executable: /work/main/.venv/bin/python", "see /home/me/x",
                "run .venv/bin/jupyter lab", "no GPU was lent to this task", "this session"):
        assert LOCAL_PATH.search(bad) or PRODUCTION.search(bad), bad
    for fine in ("https://example.org/home/page", "the square root", "excellent, silent",
                 "./scripts/lab opens JupyterLab"):
        assert not LOCAL_PATH.search(fine) and not PRODUCTION.search(fine), fine


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



# --- a phone's width: nothing scrolls the page sideways ------------------------------------------

PHONE = 420     # CSS pixels: a large phone held upright

# What sticks out of a phone's screen: the page's own scroll width, and every visible element
# whose right edge passes the viewport without an ancestor that scrolls it in a box of its own
# (overflow-x auto or scroll). An ancestor that merely clips (overflow hidden) does not count:
# what it cuts off, a reader cannot reach. Screen-reader-only copies (MathJax's assistive
# MathML, Bootstrap's visually-hidden) are clipped to nothing on purpose and are skipped.
OVERFLOW_PROBE = """
(() => {
  const width = document.documentElement.clientWidth;
  const scrolls = el => {
    const x = getComputedStyle(el).overflowX;
    return x === "auto" || x === "scroll";
  };
  const hiddenOnPurpose = el => el.closest("mjx-assistive-mml, .visually-hidden, .sr-only, " +
                                           "dialog:not([open]), [hidden]");
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || r.right <= width + 1 || r.left >= width) continue;
    const style = getComputedStyle(el);
    if (style.visibility === "hidden" || style.position === "fixed" || hiddenOnPurpose(el))
      continue;
    let a = el.parentElement, boxed = false;
    while (a && a !== document.body) {
      if (scrolls(a) && a.getBoundingClientRect().right <= width + 1) { boxed = true; break; }
      a = a.parentElement;
    }
    if (boxed) continue;
    // report the outermost offender only: its children stick out with it
    if (el.parentElement && out.some(o => o.el === el.parentElement)) {
      out.push({el, child: true});
      continue;
    }
    out.push({el, what: el.tagName.toLowerCase() + (el.className && el.className.baseVal ===
              undefined ? "." + String(el.className).trim().split(/\\s+/).join(".") : ""),
              right: Math.round(r.right), text: (el.textContent || "").trim().slice(0, 60)});
  }
  return {width, scrollWidth: document.scrollingElement.scrollWidth,
          sticking: out.filter(o => !o.child).slice(0, 8)
                       .map(o => `${o.what} to x=${o.right}: ${o.text}`)};
})()
"""


TITLE_PROBE = """
[...document.querySelectorAll("div.attncore-vega svg.marks")].flatMap(svg =>
  [...svg.querySelectorAll(".role-title text")].map(t =>
    [t.textContent, Math.round(t.getBoundingClientRect().right),
     Math.round(svg.getBoundingClientRect().right)]))"""


@pytest.mark.browser
def test_no_page_scrolls_sideways_on_a_phone(site, browser):
    # Every built page, not only the chapters: the index, search and API pages too.
    problems, checked = [], 0
    for page in pages(site):
        with browser.open(page, width=PHONE) as tab:
            found = tab.evaluate(OVERFLOW_PROBE)
            # an interactive figure's title runs off no chart (the chart clips it)
            for title, right, edge in tab.evaluate(TITLE_PROBE):
                if right > edge + 1:
                    found["sticking"].append(f"the figure title {title!r} runs {right - edge}"
                                             " px off its chart")
        checked += 1
        assert found["width"] == PHONE, f"the viewport is {found['width']} px, not {PHONE}"
        if found["scrollWidth"] > PHONE + 1 or found["sticking"]:
            problems.append(f"{page.relative_to(site)}: page {found['scrollWidth']} px wide; "
                            + "; ".join(found["sticking"]))
    assert checked >= 15
    assert not problems, "wider than a phone's screen:\n" + "\n".join(problems)


@pytest.mark.browser
def test_the_phone_check_catches_what_sticks_out(browser, tmp_path):
    # Guards the test above: a wide formula-like box outside a scroll box is found, the same
    # box inside one is not, and neither is a box that a clipping ancestor cuts off silently
    # reported as fine.
    wide = '<div style="width: 700px">a formula</div>'
    cases = {"bare": (wide, True),
             "in its own scroll box": (f'<div style="overflow-x: auto">{wide}</div>', False),
             "cut off by a clipping box": (f'<div style="overflow-x: hidden">{wide}</div>', True)}
    for what, (body, bad) in cases.items():
        page = tmp_path / f"{what.replace(' ', '_')}.html"
        page.write_text('<!DOCTYPE html><html><head><meta name="viewport" '
                        'content="width=device-width, initial-scale=1"></head>'
                        f"<body>{body}</body></html>")
        with browser.open(page, width=PHONE) as tab:
            found = tab.evaluate(OVERFLOW_PROBE)
        assert bool(found["sticking"]) == bad, f"{what}: {found}"


# --- interactive figures: drawn offline, driven by the keyboard --------------------------------

INTERACTIVE_CHAPTERS = ["chapters/02_why_sqrt_dk", "chapters/04_scaled_dot_product_attention",
                        "chapters/07_rotary_positions", "chapters/08_tiled_attention",
                        "chapters/12_inside_a_pretrained_model"]


def console_warnings(tab) -> list[str]:
    """The console.warn messages of a tab (vega-embed logs version mismatches so)."""
    return [" ".join(str(a.get("value", "")) for a in e["params"].get("args", []))
            for e in tab._browser._events
            if e.get("sessionId") == tab._session and e.get("method") == "Runtime.consoleAPICalled"
            and e["params"].get("type") == "warning"]

# The figure's controls and what is drawn: the SVG that vega-embed rendered.
FIGURE_STATE = """
(() => [...document.querySelectorAll("div.attncore-vega")].map(box => ({
  svg: (box.querySelector("svg.marks") || {}).outerHTML || "",
  controls: [...box.querySelectorAll(".vega-bindings input, .vega-bindings select")]
            .map(c => ({type: c.type, name: c.name, tabIndex: c.tabIndex,
                        disabled: c.disabled, value: c.type === "checkbox" ? c.checked
                                                  : c.value, max: c.max || null}))
})))()
"""

SETTLE = "new Promise(r => setTimeout(() => requestAnimationFrame(() => r(true)), 300))"


@pytest.mark.browser
def test_interactive_figures_are_drawn_and_follow_the_keyboard(site, browser):
    for stem in INTERACTIVE_CHAPTERS:
        assert 'class="attncore-vega"' in (site / f"{stem}.html").read_text(), \
            f"{stem}: no interactive figure on the page"
    changed = 0
    for page in pages(site):
        if 'class="attncore-vega"' not in page.read_text():
            continue
        with browser.open(page) as tab:
            figures = tab.evaluate(FIGURE_STATE)
            assert figures and all(f["svg"] for f in figures), f"{page.name}: a figure not drawn"
            for f_index, figure in enumerate(figures):
                assert figure["controls"], f"{page.name}: figure {f_index} has no controls"
                for c_index, control in enumerate(figure["controls"]):
                    where = f"{page.name}, figure {f_index}, control {control['name']}"
                    assert control["tabIndex"] >= 0 and not control["disabled"], \
                        f"{where}: the keyboard cannot reach it"
                    selector = (f'document.querySelectorAll("div.attncore-vega")[{f_index}]'
                                f'.querySelectorAll(".vega-bindings input, .vega-bindings '
                                f'select")[{c_index}]')
                    assert tab.evaluate(f"({selector}.focus(), document.activeElement === "
                                        f"{selector})"), f"{where}: cannot be focused"
                    before = tab.evaluate(FIGURE_STATE)[f_index]
                    if control["type"] == "checkbox":
                        key = " "
                    elif control["type"] == "range":
                        key = "ArrowLeft" if control["value"] == control["max"] else "ArrowRight"
                    else:
                        key = "ArrowDown"
                    tab.press(key)
                    tab.evaluate(SETTLE, await_promise=True)
                    after = tab.evaluate(FIGURE_STATE)[f_index]
                    assert after["controls"][c_index]["value"] != control["value"], \
                        f"{where}: {key!r} did not change the control"
                    assert after["svg"] != before["svg"], \
                        f"{where}: changing the control did not change what is drawn"
                    changed += 1
            errors = tab.errors()
            assert not errors, f"{page.name}: errors in the browser console: {errors[:3]}"
            warned = console_warnings(tab)
            assert not warned, f"{page.name}: warnings in the browser console: {warned[:3]}"
            # each figure is numbered, has a caption, and is as wide as the column
            layout = tab.evaluate("""
[...document.querySelectorAll("div.attncore-vega")].map(box => {
  const figure = box.closest("figure");
  const column = box.closest("div.cell").getBoundingClientRect().width;
  return {number: figure ? (figure.querySelector(".caption-number") || {}).textContent : null,
          caption: figure ? (figure.querySelector("figcaption") || {}).textContent : "",
          width: box.querySelector("svg.marks").getBoundingClientRect().width, column};
})""")
            for f_index, figure in enumerate(layout):
                where = f"{page.name}, figure {f_index}"
                assert figure["number"] and re.match(r"Fig\. \d+\.\d+", figure["number"]), where
                assert len(figure["caption"]) > 60, f"{where}: no caption that says what to try"
                assert figure["width"] >= 0.9 * figure["column"], f"{where}: {figure}"
    assert changed >= 9


@pytest.mark.browser
def test_interactive_figures_follow_the_dark_mode(site, browser):
    # In the book theme's dark mode the figure is drawn again with Vega's dark theme: a dark
    # background, light text, its controls where the reader left them.
    page = site / f"{INTERACTIVE_CHAPTERS[0]}.html"
    colours = """
(() => { const box = document.querySelector("div.attncore-vega");
  const svg = box.querySelector("svg.marks");
  const title = svg.querySelector(".role-title text, text");
  const label = box.querySelector(".vega-bindings label, .vega-bindings span");
  return {card: getComputedStyle(box).backgroundColor, title: getComputedStyle(title).fill,
          label: getComputedStyle(label).color,
          slider: box.querySelector(".vega-bindings input[type=range]").value}; })()"""
    with browser.open(page) as tab:
        light = tab.evaluate(colours)
        selector = 'document.querySelector("div.attncore-vega .vega-bindings input[type=range]")'
        tab.evaluate(f"{selector}.focus()")
        tab.press("ArrowRight")
        tab.evaluate('document.documentElement.dataset.theme = "dark"')
        tab.evaluate(SETTLE, await_promise=True)
        dark = tab.evaluate(colours)
        errors = tab.errors()

    def brightness(css: str) -> int:
        return sum(int(v) for v in re.findall(r"\d+", css)[:3])

    assert brightness(light["card"]) > 600 and brightness(light["title"]) < 330, light
    assert brightness(dark["card"]) < 330, f"the figure stays light in dark mode: {dark}"
    assert brightness(dark["title"]) > 600 and brightness(dark["label"]) > 600, dark
    assert dark["slider"] == str(int(light["slider"]) + 1), "the redrawn figure lost its state"
    assert not errors, errors


@pytest.mark.browser
def test_interactive_figures_render_in_jupyterlab_in_an_untrusted_notebook(browser, tmp_path):
    # A reader who opens a downloaded chapter in JupyterLab has not trusted it, and JupyterLab
    # runs no script of an untrusted notebook's HTML outputs. The figures are Vega-Lite
    # outputs, which JupyterLab's own Vega renderer draws whatever the trust: all five are
    # drawn, and a control changes what is drawn.
    import os
    import secrets
    import signal
    import socket
    import sys
    import time
    import urllib.request

    import nbformat

    from attncore.lab.interactive import FIGURES

    # the metadata of a chapter (its kernel and language), as a reader's notebook has it
    chapter = nbformat.read(ROOT / f"{INTERACTIVE_CHAPTERS[0]}.ipynb", as_version=4)
    notebook = nbformat.v4.new_notebook(metadata=chapter.metadata)
    for i, (name, make) in enumerate(FIGURES.items()):
        data, metadata = make()._repr_mimebundle_()
        cell = nbformat.v4.new_code_cell(f"from attncore.lab.interactive import {name}\n"
                                         f"{name}()", execution_count=i + 1)
        cell.outputs = [nbformat.v4.new_output("execute_result", data=data, metadata=metadata,
                                               execution_count=i + 1)]
        notebook.cells.append(cell)
    nbformat.write(notebook, tmp_path / "figures.ipynb")        # unsigned: not trusted
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    home = tmp_path / "home"
    home.mkdir()
    # JupyterLab's dark theme: the figures must be legible there too
    themes = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    themes.mkdir(parents=True)
    (themes / "themes.jupyterlab-settings").write_text('{"theme": "JupyterLab Dark"}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(HOME=str(home), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = tmp_path / "lab.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
             f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={tmp_path}", "--LabApp.expose_app_in_browser=True",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        with browser.open(f"{base}/lab/tree/figures.ipynb?token={token}", width=1200,
                          height=6000) as tab:
            drawn = tab.evaluate("""
new Promise(resolve => {
  const start = Date.now();
  (function wait() {
    const n = document.querySelectorAll(".jp-RenderedVegaCommon5 svg.marks").length;
    if (n >= %d || Date.now() - start > 60000) resolve(n); else setTimeout(wait, 250);
  })();
})""" % len(FIGURES), await_promise=True)
            assert drawn == len(FIGURES), f"JupyterLab drew {drawn} of {len(FIGURES)} figures"
            first = ".jp-RenderedVegaCommon5"
            svg = f'document.querySelector("{first} svg.marks").outerHTML'
            slider = f'document.querySelector("{first} .vega-bindings input[type=range]")'
            notebook = "window.jupyterapp.shell.currentWidget"
            widths = tab.evaluate('[...document.querySelectorAll(".jp-RenderedVegaCommon5 '
                                  'svg.marks")].map(s => s.getBoundingClientRect().width)')
            assert min(widths) >= 600, f"figures drawn too narrow in JupyterLab: {widths}"
            # In JupyterLab's dark theme the figures are drawn in Vega's dark colours.
            title_fill = tab.evaluate(f'getComputedStyle(document.querySelector("{first} '
                                      f'svg.marks .role-title text")).fill')
            assert sum(int(v) for v in re.findall(r"\d+", title_fill)[:3]) > 600, title_fill
            # A click on the slider, then the arrow keys: they move the slider, not the
            # notebook's active cell (JupyterLab's command-mode shortcuts take arrow keys).
            box = tab.evaluate(f"(() => {{ const r = {slider}.getBoundingClientRect(); "
                               "return [r.left + r.width / 2, r.top + r.height / 2]; })()")
            for kind in ("mousePressed", "mouseReleased"):
                browser.call("Input.dispatchMouseEvent", {
                    "type": kind, "x": box[0], "y": box[1], "button": "left",
                    "clickCount": 1}, tab._session)
            tab.evaluate(SETTLE, await_promise=True)
            cell_before = tab.evaluate(f"{notebook}.content.activeCellIndex")
            value = int(tab.evaluate(f"{slider}.value"))
            before = tab.evaluate(svg)
            tab.press("ArrowLeft" if value == int(tab.evaluate(f"{slider}.max")) else "ArrowRight")
            tab.evaluate(SETTLE, await_promise=True)
            assert tab.evaluate(f"document.activeElement === {slider}"), "the slider lost focus"
            assert int(tab.evaluate(f"{slider}.value")) != value, "the arrow key did not move it"
            assert tab.evaluate(f"{notebook}.content.activeCellIndex") == cell_before, \
                "the arrow key moved the notebook's active cell"
            assert tab.evaluate(svg) != before, "moving the slider changed nothing drawn"
            tab.press("End")
            tab.evaluate(SETTLE, await_promise=True)
            assert tab.evaluate(f"{slider}.value") == tab.evaluate(f"{slider}.max")
            # Space toggles a checkbox (no notebook shortcut takes it).
            checkbox = f'document.querySelector("{first} .vega-bindings input[type=checkbox]")'
            checked = tab.evaluate(f"({checkbox}.focus(), {checkbox}.checked)")
            before = tab.evaluate(svg)
            tab.press(" ")
            tab.evaluate(SETTLE, await_promise=True)
            assert tab.evaluate(f"{checkbox}.checked") != checked, "Space did not tick the box"
            assert tab.evaluate(svg) != before, "ticking the box changed nothing drawn"
            # What a person looks at before trusting the check: the figures after the keys.
            if os.environ.get("ATTNCORE_LAB_SCREENSHOTS"):
                import base64

                shot = browser.call("Page.captureScreenshot", {"format": "png"}, tab._session)
                (Path(os.environ["ATTNCORE_LAB_SCREENSHOTS"]) / "figures-after-keys.png"
                 ).write_bytes(base64.b64decode(shot["data"]))
            # Opening and using the figures leaves the notebook unchanged: JupyterLab's Vega
            # renderer would add a picture to an output that has none, and autosave would
            # write it into the file.
            assert tab.evaluate(f"{notebook}.context.model.dirty") is False, \
                "the notebook is marked changed after opening it"
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)     # the server we started, and its kernels
        except ProcessLookupError:
            pass
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.mark.browser
def test_one_search_box_on_a_wide_screen_and_on_a_phone(site, browser):
    # The theme offered a search field in the header and another in the sidebar; the sidebar's
    # is left out (html_sidebars in _config.yml). The search dialog, closed, does not count.
    controls = ".search-button-field, .search-button, form.bd-search, input[type=search]"
    visible = f"""[...document.querySelectorAll("{controls}")]
                 .filter(e => !e.closest("dialog:not([open])"))
                 .filter(e => e.getBoundingClientRect().width > 0).length"""
    for width in (1280, PHONE):
        with browser.open(site / "index.html", width=width) as tab:
            assert tab.evaluate(visible) == 1, f"at {width} px"


# --- no machinery in what the reader sees -------------------------------------------------------

# What only the people who produce the book should see, never a reader (the developers' guide:
# "no test markers, glue calls, figure-size comments, remarks about the test suite, or
# instructions to authors in what the site shows"). One place, so the list grows here: each
# entry is a pattern and why it is machinery. Matched in the visible text of every page.
MACHINERY = {
    r"(?i:nbval)": "the notebook test runner and its markers (# NBVAL_IGNORE_OUTPUT)",
    r"(?i:\bglue\b)": "glue: the code that feeds the run's numbers to the prose",
    # (not "display=False" alone: torch's FlopCounterMode(display=False) is the lesson's code)
    r"\{(?:glue|cite|doc|numref|ref|prf:ref)(?::\w+)?\}`": "a role MyST did not resolve",
    r"(?i:\btest suite\b|\bpytest\b)": "a remark about the course's tests",
    r"(?i:\bfigures are at most\b)": "a figure-size comment for authors",
    r"lem-proofs-<": "a label pattern for authors (\"labelled lem-proofs-<name>\")",
    r"(?i:\ba chapter that needs a new\b)": "an instruction to authors (the proofs appendix)",
    r"(?i:\bin this edition\b)": "a note about producing the book (\"not measured in this "
                                  "edition\"), not its content",
    r"\bCONTRIBUTING(?:\.md)?\b": "the authors' guide",
    r"\b(?:TODO|FIXME|XXX)\b": "a note left for the authors",
}


# Elements whose text a reader never sees, whatever they click: the page's head and code,
# templates, and anything hidden by an attribute. (Collapsed solutions, dropdowns and
# hidden-input toggles are not among them: a click shows them. Cells removed from the page,
# remove-cell and remove-input, are not in it at all.)
UNSEEN_TAGS = {"head", "script", "style", "template", "noscript", "mjx-assistive-mml"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
             "param", "source", "track", "wbr"}
# Elements that break the text (inline ones, such as the spans of highlighted code, do not:
# `glue(` is three spans).
BLOCK_TAGS = {"address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl",
              "dt", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6",
              "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary",
              "table", "td", "th", "tr", "ul"}


def reader_text(page_html: str) -> str:
    """The text of a page that a reader can see, clicking whatever opens (see UNSEEN_TAGS),
    with whitespace collapsed."""
    from html.parser import HTMLParser

    class Reader(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.stack: list[tuple[str, bool]] = []        # (tag, unseen)
            self.parts: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag in BLOCK_TAGS:
                self.parts.append(" ")
            if tag in VOID_TAGS:
                return
            a = dict(attrs)
            style = (a.get("style") or "").replace(" ", "").lower()
            unseen = (tag in UNSEEN_TAGS or "hidden" in a or a.get("aria-hidden") == "true"
                      or "display:none" in style or "visibility:hidden" in style)
            parent = bool(self.stack) and self.stack[-1][1]
            self.stack.append((tag, parent or unseen))

        def handle_endtag(self, tag):
            if tag in BLOCK_TAGS:
                self.parts.append(" ")
            # pop to the matching element (browsers close unclosed children the same way)
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i][0] == tag:
                    del self.stack[i:]
                    break

        def handle_data(self, data):
            if not (self.stack and self.stack[-1][1]):
                self.parts.append(data)

    reader = Reader()
    reader.feed(page_html)
    reader.close()
    return " ".join("".join(reader.parts).split())


def machinery_in(text: str) -> list[str]:
    """Each piece of MACHINERY in ``text``, with why it is machinery and its context."""
    found = []
    for pattern, why in MACHINERY.items():
        for m in re.finditer(pattern, text):
            found.append(f"{m.group(0)!r} ({why}): "
                         f"...{text[max(0, m.start() - 60):m.end() + 40]}...")
    return found


def test_no_machinery_in_what_readers_see(site):
    found = []
    for page in pages(site):
        text = reader_text(page.read_text())
        found += [f"{page.relative_to(site)}: {f}" for f in machinery_in(text)]
    assert not found, "the site shows readers how the book is made:\n" + "\n".join(found)


def test_the_machinery_check_catches_what_it_should():
    # Guards the test above against passing vacuously, and against reading hidden text.
    for bad in ("# NBVAL_IGNORE_OUTPUT", "runs under nbval, strict", 'glue("x-y", f"{v:.2f}", '
                "display=False)", "not checked by the test suite", "# Figures are at most 8.5 "
                "inches wide", "labelled `lem-proofs-<name>`", "A chapter that needs a new fact "
                "adds a lemma", "The GPU rows are not measured in this edition.",
                "The loss is {glue:text}`x-loss`.", "Every notebook runs as a test (nbval, "
                "strict)", "{cite}`ba2016layer`", "see {prf:ref}`lem-proofs-x`", "run pytest"):
        assert machinery_in(bad), bad
    for fine in ("the proof of lem-proofs-linearity", "the softmax glues the rows together",
                 "with FlopCounterMode(display=False) as counter:",
                 "a test of the rule", "a figure at most 8 cm wide", "Vaswani et al. (2017)"):
        assert not machinery_in(fine), fine
    page = ("<html><head><title>nbval</title></head><body><p>Lesson text.</p>"
            "<script>glue('a', 1)</script><div hidden>TODO</div>"
            "<span style='display: none'>test suite</span><br><img src=x alt=y>"
            "<pre><span>glue</span><span>(</span><span>x</span>)</pre>"
            "<details><summary>Solution</summary><p>Open me.</p></details>"
            "<div class='toggle-hidden'>Click to show.</div></body></html>")
    assert reader_text(page) == "Lesson text. glue(x) Solution Open me. Click to show."


# --- the landing page, chapter 0 and the PDF: what this build offers --------------------------

def _chapter_cards():
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    import chapter_cards

    return chapter_cards


def test_every_chapter_has_a_card_and_every_card_a_chapter(site):
    cards = _chapter_cards()
    assert cards.check() == []
    chapters = cards.chapters()
    # the numbered chapters 1, 2, ... in order; the pages of the unnumbered part (chapter 0,
    # the page on training) carry 0
    numbers = [n for n, _, _ in chapters]
    assert [n for n in numbers if n] == list(range(1, len([n for n in numbers if n]) + 1))
    assert numbers[0] == 0 and numbers == sorted(numbers)
    page = (site / "index.html").read_text()
    grid = page[page.index("attncore-cards"):]
    found = re.findall(r'<div class="sd-card [^"]*">.*?<img[^>]*src="([^"]+)".*?'
                       r'<div class="sd-card-title[^"]*">\s*(.*?)\s*</div>.*?'
                       r'href="chapters/([^"#]+)\.html"', grid, re.S)
    assert [stem for _, _, stem in found] == [stem for _, _, stem in chapters], \
        "the cards are not the chapters of _toc.yml, in its order"
    for (src, title, stem), (number, slug, _) in zip(found, chapters):
        assert Path(src).stem == slug, f"{stem}'s card shows {src}"
        title = html.unescape(re.sub(r"<[^>]+>", "", title))
        name = cards.chapter_title(stem)
        assert title == (name if number == 0 else f"{number} \u00b7 {name}"), (stem, title)
    # under the parts' captions, in the sidebar's order
    captions = [html.unescape(c).replace("\u2019", "'") for c in        # smart quotes
                re.findall(r'<p class="rubric"[^>]*>(.*?)</p>', grid, re.S)]
    assert captions == [caption for caption, _ in cards.parts()], captions


def test_the_card_check_catches_a_missing_and_an_extra_card(tmp_path):
    cards = _chapter_cards()
    (tmp_path / "_static" / "cards").mkdir(parents=True)
    (tmp_path / "_toc.yml").write_text(
        "root: index\nparts:\n  - caption: x\n    chapters:\n"
        "      - file: chapters/00_how_to_use\n      - file: chapters/01_not_a_card\n")
    for slug in ("how_to_use", "why_sqrt_dk"):
        (tmp_path / "_static" / "cards" / f"{slug}.svg").write_text("<svg/>")
    problems = "\n".join(cards.check(tmp_path))
    assert "chapter 'not_a_card' has no card" in problems
    assert "chapter 'not_a_card' has no picture" in problems
    assert "picture _static/cards/why_sqrt_dk.svg is for no chapter" in problems
    assert "card 'why_sqrt_dk' is for no chapter" in problems


# What a build without a repository must not promise, and a build with one must offer.
REPOSITORY_ONLY = ("rocket", "./scripts/lab", "clone", "Binder")


def _promises(site: Path) -> dict[str, str]:
    return {name: visible_text((site / name).read_text(), code=False)
            for name in ("index.html", "chapters/00_how_to_use.html")}


def test_without_a_repository_nothing_is_promised_that_the_build_lacks(site):
    import subprocess
    import sys

    assert _notebook_setup().configured_repository() == ""
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "how_to_run.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    for name, text in _promises(site).items():
        promised = [w for w in REPOSITORY_ONLY if w.lower() in text.lower()]
        assert not promised, f"{name} promises {promised} with no repository named"
    text = " ".join(_promises(site)["chapters/00_how_to_use.html"].split())
    assert "course bundle" in text and "measured on the machine that built" in text


def test_with_a_repository_the_landing_page_and_chapter_0_say_how_to_use_it(
        site_with_repository):
    site, copy, url = site_with_repository
    texts = _promises(site)
    for name, text in texts.items():
        missing = [w for w in ("rocket", "./scripts/lab") if w not in text]
        assert not missing, f"{name} does not mention {missing} although {url} is named"
    # the theme shows a GitHub link by its owner/name; it links the whole address
    assert "/".join(url.split("/")[-2:]) in texts["chapters/00_how_to_use.html"]
    assert f'href="{url}"' in (site / "chapters" / "00_how_to_use.html").read_text()


def test_outputs_measured_on_the_building_machine_are_marked(site):
    from test_book_structure import NOTEBOOKS

    marked = 0
    for nb_path in NOTEBOOKS:
        nb = json.loads(nb_path.read_text())
        expected = sum(1 for c in nb["cells"] if c["cell_type"] == "code" and c["outputs"]
                       and "nbval-ignore-output" in c["metadata"].get("tags", [])
                       and "remove-cell" not in c["metadata"].get("tags", []))
        page = (site / "chapters" / f"{nb_path.stem}.html").read_text()
        shown = page.count('class="attncore-measured"')
        assert shown == expected, f"{nb_path.stem}: {shown} outputs marked, {expected} measured"
        marked += shown
    assert marked >= 5


PDF = "attention-from-the-proof-up.pdf"


def _pdf_text(pdf: Path) -> tuple[str, list[tuple[float, float, int, int]]]:
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


def test_the_pdf_holds_every_chapter_typeset_and_sharp(site):
    from test_book_structure import NOTEBOOKS

    pdf = site / PDF
    assert pdf.is_file(), "build-book printed no PDF of the book"
    assert f'href="{PDF}"' in (site / "index.html").read_text(), "the landing page links no PDF"
    text, images = _pdf_text(pdf)
    flat = re.sub(r"\s+", " ", text)
    for nb_path in NOTEBOOKS:
        nb = json.loads(nb_path.read_text())
        title = re.search(r"^#\s+(.+)$", "".join(nb["cells"][0]["source"]), re.M).group(1)
        assert re.sub(r"\s+", " ", title) in flat, f"the PDF lacks the chapter {title!r}"
    assert "Solutions to the exercises" in flat
    # Raw TeX in the text, other than in code and printed outputs (which may hold TeX, such
    # as a figure label in a plotting cell), means MathJax had not typeset a formula.
    page = (site.parent / "print" / "book.html").read_text()
    code = set()
    for block in re.findall(r"<pre\b.*?</pre>", page, re.S):
        code.update(line.strip() for line in html.unescape(re.sub(r"<[^>]+>", "", block))
                    .splitlines() if line.strip())
    prose = "\n".join(line for line in text.splitlines()
                      if line.strip() and not any(line.strip() in c for c in code))
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(prose)})
    assert not raw, f"TeX left untypeset in the PDF: {raw[:5]}"
    # Figures stored at twice their shown size keep their pixels in print: at least
    # 1.9 pixels per CSS pixel (a point is 4/3 CSS pixels) for every large raster image.
    large = [(w, h, pw, ph) for w, h, pw, ph in images if w > 150]
    assert len(large) >= 20, f"only {len(large)} figures in the PDF"
    blurry = [i for i in large if i[2] < 1.9 * i[0] * 4 / 3]
    assert not blurry, f"{len(blurry)} figures printed below 2x: {blurry[:3]}"


def test_every_page_and_the_pdf_name_the_licences(site):
    # The footer of _config.yml on every page (tests/test_licence.py checks its words), and
    # the licence line under the title on the PDF's first page.
    for stem in _toc_pages():
        text = " ".join(visible_text((site / f"{stem}.html").read_text()).split())
        assert "CC BY 4.0" in text and "MIT licence" in text, f"{stem}: no licence in its footer"
    text, _ = _pdf_text(site / PDF)
    first_page = " ".join(text.split()[:400])
    assert "CC BY 4.0" in first_page and "MIT licence" in first_page, first_page[:500]


def test_the_student_editions_pdf_page_has_every_exercise_and_no_solution(site):
    # scripts/student-edition prints this page (not printed again here: the book's PDF
    # above is printed by the same code from the page with the solutions).
    import sys

    from bs4 import BeautifulSoup

    sys.path.insert(0, str(ROOT / "_ext"))
    import book_pdf

    full = BeautifulSoup(book_pdf.assemble(site, ROOT, solutions=True, filename="full.html")
                         .read_text(), "html.parser")
    student = BeautifulSoup(book_pdf.assemble(site, ROOT, solutions=False,
                                              filename="student.html").read_text(),
                            "html.parser")
    assert full.select("div.solution") and not student.select("div.solution")
    assert len(student.select("div.exercise")) == len(full.select("div.exercise")) > 50
    assert "Solutions to the exercises" not in student.get_text()
def _text_beyond_the_right_edge(page) -> bool:
    """Whether a character of ``page`` (an icon of the private-use area aside) starts right
    of the page's right edge."""
    width, textpage = page.get_width(), page.get_textpage()
    if not textpage.get_text_bounded(left=width, bottom=0, right=4 * width,
                                     top=page.get_height()).strip():
        return False                                    # the quick answer, for most pages
    text = textpage.get_text_range()
    return any(textpage.get_charbox(i)[0] >= width and not text[i].isspace()
               and not "\ue000" <= text[i] <= "\uf8ff"
               for i in range(min(textpage.count_chars(), len(text))))


def test_the_pdf_prints_like_a_book(site):
    # Read as a book, not as a browser's printout: a contents page with page numbers, one
    # bookmark per chapter that reads as its title, the interactive figures' still pictures,
    # no web controls, no blank page, and tables whose every column is printed.
    import sys

    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    sys.path.insert(0, str(ROOT / "_ext"))
    from book_pdf import toc_parts

    pdf = site / PDF
    text, _ = _pdf_text(pdf)
    flat = re.sub(r"\s+", " ", text)
    for leftover in ("Not answered yet: replace None", "Show code cell source",
                     "Hide code cell source"):
        assert leftover not in flat, f"the PDF prints {leftover!r}"
    doc = pdfium.PdfDocument(pdf)
    try:
        pages = [doc[i] for i in range(len(doc))]
        blank = [i + 1 for i, page in enumerate(pages)
                 if not re.sub(r"\d+", "", page.get_textpage().get_text_bounded()).strip()
                 and not any(True for _ in page.get_objects(
                     filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE, pdfium_c.FPDF_PAGEOBJ_PATH]))]
        # text that starts right of the page: a table or formula wider than it, cut off
        cut = [i + 1 for i, page in enumerate(pages) if _text_beyond_the_right_edge(page)]
        page_words = [set(re.findall(r"\w+", page.get_textpage().get_text_bounded()))
                      for page in pages]
        contents = " ".join(page.get_textpage().get_text_bounded() for page in pages[1:3])
        marks = [re.sub(r"\s+", " ", m.get_title()).strip() for m in doc.get_toc()
                 if m.level == 0]                          # the pages' titles (h1)
    finally:
        doc.close()
    assert not blank, f"blank pages: {blank}"
    assert not cut, f"text printed beyond the right edge of pages {cut[:10]}"
    chapters = [stem for _, entries in toc_parts() for stem, _ in entries
                if stem.startswith("chapters/")]
    for stem in chapters:
        nb = json.loads((ROOT / f"{stem}.ipynb").read_text())
        title = re.search(r"^#\s+(.+)$", "".join(nb["cells"][0]["source"]), re.M).group(1)
        title = re.sub(r"\s+", " ", title)
        number = int(Path(stem).name[:2])
        want = title if number == 0 or "_going_further" in stem else None
        ok = [m for m in marks if m == want or re.fullmatch(rf"{number}(\.\d+)?\. "
                                                               + re.escape(title), m)]
        assert len(ok) == 1, f"the bookmark of {stem} does not read {title!r}: " \
                             f"{[m for m in marks if title[:12] in m]}"
    first_chapter = re.sub(r"\s+", " ", contents)
    assert re.search(r"What attention computes[ .]*\d+", first_chapter), \
        f"the contents give no page numbers: {first_chapter[:300]!r}"
    assert not re.search(r"\d+\. \d+\. ", first_chapter), "the contents number twice"
    page = (site.parent / "print" / "book.html").read_text()
    assert 'class="attncore-vega"' not in page, "an interactive figure is printed as a widget"
    assert page.count('class="attncore-print-still"') >= 5
    # every column of every table is printed: some page holds every word of its header row
    # (a column cut off at the margin loses its header's words with the rest of it)
    missing = []
    for table in re.findall(r"<table\b.*?</table>", page, re.S):
        header = [html.unescape(re.sub(r"<[^>]+>", " ", cell)) for cell in
                  re.findall(r"<th\b[^>]*>(.*?)</th>", table, re.S) if 'class="math' not in cell]
        words = set(re.findall(r"\w+", " ".join(header)))
        if words and not any(words <= on_page for on_page in page_words):
            missing.append(" | ".join(" ".join(h.split()) for h in header))
    assert not missing, f"tables cut off in print (their headers): {missing[:5]}"


@pytest.mark.browser
def test_search_snippets_show_formulas_as_text(site, browser):
    # Sphinx makes a result's snippet from the page's HTML, where formulas are still TeX; the
    # site's script turns them into text (QKᵀ, not \(QK^\top\)).
    chapter = (site / "chapters" / "01_what_attention_computes.html").read_text()
    with browser.open(site / "search.html") as tab:
        snippet = tab.evaluate(f"Search.makeSearchSummary({json.dumps(chapter)}, "
                               "['softmax'], '').textContent")
        whole = tab.evaluate(f"Search.htmlToText({json.dumps(chapter)}, '')")
    assert "softmax" in snippet.lower()
    for text in (snippet, whole):
        raw = sorted({m.group(0) for m in RAW_TEX.finditer(text)})
        assert not raw and "\\(" not in text, f"TeX in a search snippet: {raw[:5]}"


def test_the_printed_page_drops_web_leftovers_and_keeps_bookmarks_readable(tmp_path):
    # Without a build: what _ext/book_pdf.py does to one page's article before printing.
    import base64
    import sys

    from bs4 import BeautifulSoup

    sys.path.insert(0, str(ROOT / "_ext"))
    import book_pdf

    soup = BeautifulSoup(
        '<article><h2><span class="section-number">2.1. </span>Why the sum'
        '<a class="headerlink" href="#x">#</a></h2>'
        '<details class="hide above-input"><summary>Show code cell source</summary>'
        '<div class="cell_input">import numpy</div></details>'
        '<div class="cell_output"><pre>Not answered yet: replace None with your answer</pre>'
        '</div><div class="cell_output"><pre>kept</pre></div>'
        '<figure><div class="attncore-vega"></div><figcaption><p>Move the slider.</p>'
        '</figcaption></figure></article>', "html.parser")
    article = soup.article
    (tmp_path / "chapters").mkdir()
    png = base64.b64encode(b"\x89PNG still").decode()
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": [], "outputs": [
        {"output_type": "display_data", "metadata": {"image/png": {"width": 640}},
         "data": {"application/vnd.vegalite.v5+json": {}, "image/png": png}}]}]}
    (tmp_path / "chapters" / "02_x.ipynb").write_text(json.dumps(nb))
    assert book_pdf._print_stills(article, "chapters/02_x", tmp_path, tmp_path / "print") == 1
    book_pdf._drop_web_leftovers(article)
    book_pdf._plain_headings(article)
    text = str(article)
    assert "Show code cell source" not in text and "import numpy" not in text
    assert "Not answered yet" not in text and "kept" in text
    assert "attncore-vega" not in text and 'class="attncore-print-still"' in text
    assert (tmp_path / "print" / "stills" / "chapters-02-x-0.png").read_bytes() == \
        b"\x89PNG still"
    assert book_pdf.STILL_NOTE in article.figcaption.get_text()
    heading = article.h2
    assert heading.get_text() == "2.1.\u00a0Why\u00a0the\u00a0sum"          # no pilcrow
    assert len(heading.find_all("wbr")) == 3                    # where the line may wrap
