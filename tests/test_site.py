"""The website: it builds with warnings as errors (the README's own command,
scripts/build-book, once for the whole test run: tests/built_site.py), serves everything from
itself, shows the outputs nbval verified, speaks to readers, and offers only what the build has.

What a browser shows is checked in test_site_browser.py, the PDF in test_site_pdf.py, the build
with a repository named in test_site_repository.py.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from built_site import (REPOSITORY_ONLY, ROOT, check_the_bundle,
                        notebook_setup_module, pages, promises, visible_text)


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
    ns = notebook_setup_module()
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


def test_the_course_bundle_is_published_and_linked(site):
    check_the_bundle(site, ROOT)


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


def test_without_a_repository_nothing_is_promised_that_the_build_lacks(site):
    import subprocess
    import sys

    assert notebook_setup_module().configured_repository() == ""
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "how_to_run.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    for name, text in promises(site).items():
        promised = [w for w in REPOSITORY_ONLY if w.lower() in text.lower()]
        assert not promised, f"{name} promises {promised} with no repository named"
    text = " ".join(promises(site)["chapters/00_how_to_use.html"].split())
    assert "course bundle" in text and "measured on the machine that built" in text


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

