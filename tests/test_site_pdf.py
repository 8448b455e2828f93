"""The book's PDF (printed by _ext/book_pdf.py at the end of scripts/build-book, from the site
that tests/built_site.py builds once for the run) and the printable page it is printed from."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from built_site import (PDF, RAW_TEX, ROOT, pages, pdf_text, small_site, toc_pages,
                        visible_text)


# The suite's build prints a sample of the book (ATTNCORE_PDF_SAMPLE, _ext/book_pdf.py's
# SAMPLE, from _build/print/sample.html) and writes the whole printable page all the same
# (_build/print/book.html). What needs the print is checked on the PDF, for the pages printed;
# what the print only carries over from the page (every chapter's article, its formulas as TeX
# for MathJax, its headings for the bookmarks, the stills in place of widgets, no web
# leftovers, the tables' columns) is checked on the whole page. A site printed whole (a
# developer's ATTNCORE_BUILT_SITE) is checked the same way: its printed page is the whole one.
# Whether MathJax typesets every page of the site is checked page by page in
# tests/test_site_browser.py.


def _book_page(site: Path) -> str:
    """The printable page of the whole book, as the build wrote it."""
    return (site.parent / "print" / "book.html").read_text()


def _printed_page(site: Path) -> str:
    """The page that the build printed into the PDF: the sample, or the whole book."""
    sample = site.parent / "print" / "sample.html"
    return sample.read_text() if sample.is_file() else _book_page(site)


def _prefix(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", stem).strip("-")


def _chapter_titles(printed: str | None = None) -> dict[str, str]:
    """Chapter stem -> its title (the notebook's first heading), for every chapter, or for
    those on the page ``printed``."""
    from test_book_structure import NOTEBOOKS

    titles = {}
    for nb_path in NOTEBOOKS:
        stem = f"chapters/{nb_path.stem}"
        if printed is not None and f'id="{_prefix(stem)}"' not in printed:
            continue
        nb = json.loads(nb_path.read_text())
        title = re.search(r"^#\s+(.+)$", "".join(nb["cells"][0]["source"]), re.M).group(1)
        titles[stem] = re.sub(r"\s+", " ", title)
    return titles


def _code_lines(page: str) -> set[str]:
    code = set()
    for block in re.findall(r"<pre\b.*?</pre>", page, re.S):
        code.update(line.strip() for line in html.unescape(re.sub(r"<[^>]+>", "", block))
                    .splitlines() if line.strip())
    return code


# MathJax typesets TeX between these delimiters inside the elements of these classes (the
# site's configuration, copied into the printable page: processHtmlClass "math").
MATH = re.compile(r'<(span|div) class="math notranslate nohighlight">(.*?)</\1>', re.S)


def test_the_printable_page_holds_every_chapter_with_its_formulas_as_tex(site):
    # On the whole page, without printing: every chapter, its formulas as TeX in the elements
    # that MathJax typesets (\(...\) or \[...\]), and no TeX outside them and code (which
    # MathJax would leave as it is: the PDF would print it raw).
    page = _book_page(site)
    text = re.sub(r"\s+", " ", visible_text(page))
    for stem, title in _chapter_titles().items():
        assert title in text, f"the printable page lacks the chapter {title!r}"
    assert "Solutions to the exercises" in text
    formulas = [html.unescape(m.group(2)).strip() for m in MATH.finditer(page)]
    assert len(formulas) > 1000, f"only {len(formulas)} formulas on the printable page"
    bad = [f for f in formulas if not re.fullmatch(r"\\\((.*)\\\)|\\\[(.*)\\\]", f, re.S)]
    assert not bad, f"formulas MathJax would not find: {bad[:3]}"
    # (code and printed outputs, the <pre> blocks, may hold TeX, such as a figure label in
    # a plotting cell: left out)
    prose = visible_text(MATH.sub(" ", page), code=False)
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(prose)})
    assert not raw, f"TeX outside the formulas MathJax typesets: {raw[:5]}"


def test_the_pdf_holds_the_printed_chapters_typeset_and_sharp(site):
    pdf = site / PDF
    assert pdf.is_file(), "build-book printed no PDF of the book"
    assert f'href="{PDF}"' in (site / "index.html").read_text(), "the landing page links no PDF"
    printed = _printed_page(site)
    text, images = pdf_text(pdf)
    flat = re.sub(r"\s+", " ", text)
    titles = _chapter_titles(printed)
    assert titles, "the PDF prints no chapter"
    for title in titles.values():
        assert title in flat, f"the PDF lacks the chapter {title!r}"
    assert "Solutions to the exercises" in flat
    # Raw TeX in the text, other than in code and printed outputs (which may hold TeX, such
    # as a figure label in a plotting cell), means MathJax had not typeset a formula.
    code = _code_lines(printed)
    prose = "\n".join(line for line in text.splitlines()
                      if line.strip() and not any(line.strip() in c for c in code))
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(prose)})
    assert not raw, f"TeX left untypeset in the PDF: {raw[:5]}"
    # Figures stored at twice their shown size keep their pixels in print: at least
    # 1.9 pixels per CSS pixel (a point is 4/3 CSS pixels) for every large raster image.
    # (At least 20 for the whole book; a sample with fewer PNG figures and stills: every one.)
    figures = len(re.findall(r'<img [^>]*src="[^"]*\.png"', printed))
    large = [(w, h, pw, ph) for w, h, pw, ph in images if w > 150]
    assert len(large) >= min(20, figures) > 0, \
        f"only {len(large)} figures in the PDF, of {figures} PNG pictures on the printed page"
    blurry = [i for i in large if i[2] < 1.9 * i[0] * 4 / 3]
    assert not blurry, f"{len(blurry)} figures printed below 2x: {blurry[:3]}"


def test_every_page_and_the_pdf_name_the_licences(site):
    # The footer of _config.yml on every page (tests/test_licence.py checks its words), and
    # the licence line under the title on the PDF's first page.
    for stem in toc_pages():
        text = " ".join(visible_text((site / f"{stem}.html").read_text()).split())
        assert "CC BY 4.0" in text and "MIT licence" in text, f"{stem}: no licence in its footer"
    text, _ = pdf_text(site / PDF)
    first_page = " ".join(text.split()[:400])
    assert "CC BY 4.0" in first_page and "MIT licence" in first_page, first_page[:500]


def _divs(page: str, css_class: str) -> int:
    """How many <div> elements of ``page`` (as BeautifulSoup writes it: every attribute
    quoted with ", no > inside one) have the class ``css_class``."""
    return sum(css_class in classes.split()
               for classes in re.findall(r'<div\b[^>]*?\sclass="([^"]*)"', page))


def test_the_student_editions_pdf_page_has_every_exercise_and_no_solution(site):
    # scripts/student-edition prints this page (not printed again here: the book's PDF
    # above is printed by the same code from the page with the solutions). Both pages are
    # the build's, assembled from one reading of the site (book_pdf.assemble);
    # tests/test_student_edition.py checks that the page assembled with solutions=False, as
    # scripts/student-edition asks for it, is the same.
    full = _book_page(site)
    student = (site.parent / "print" / "student.html").read_text()
    assert _divs(full, "solution") and not _divs(student, "solution")
    assert _divs(student, "exercise") == _divs(full, "exercise") > 50
    assert "Solutions to the exercises" not in html.unescape(re.sub(r"<[^>]+>", "", student))


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


def _bookmark_matches(stem: str, title: str, marks: list[str]) -> list[str]:
    """The bookmarks (the h1 headings' text, spaces made plain) that read as the title of the
    chapter ``stem``: its number, then its title (chapter 0 and going-further pages: the
    title alone)."""
    number = int(Path(stem).name[:2])
    want = title if number == 0 or "_going_further" in stem else None
    return [m for m in marks if m == want or re.fullmatch(rf"{number}(\.\d+)?\. "
                                                         + re.escape(title), m)]


def test_the_printable_page_makes_readable_bookmarks_and_no_widgets(site):
    # On the whole page, without printing, what the print carries over as it is: each
    # chapter's h1 (its PDF bookmark, checked in print below for the printed ones) reads as
    # its title, with no plain space where Chromium would drop one at a line break; the
    # interactive figures are their stills; no web controls are left; and no table has more
    # columns than one that the sample prints (whose every column is checked in print).
    page = _book_page(site)
    marks = [re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", h))).strip()
             for h in re.findall(r"<h1\b.*?</h1>", page, re.S)]
    for stem, title in _chapter_titles().items():
        assert len(_bookmark_matches(stem, title, marks)) == 1, \
            f"the heading of {stem} does not read {title!r}: {[m for m in marks if title[:12] in m]}"
        section = page.split(f'<section class="attncore-print-page" id="{_prefix(stem)}">')[1]
        heading = re.search(r"<h1\b.*?</h1>", section, re.S).group(0)
        words = html.unescape(re.sub(r"<[^>]+>", "", MATH.sub("", heading)))
        assert " " not in words, f"{stem}: a plain space in its heading {words!r}, which " \
                                 "the bookmark loses where the line wraps"
    text = re.sub(r"\s+", " ", visible_text(page))
    for leftover in ("Not answered yet: replace None", "Show code cell source",
                     "Hide code cell source"):
        assert leftover not in text, f"the printable page holds {leftover!r}"
    assert 'class="attncore-vega"' not in page, "an interactive figure is printed as a widget"
    assert page.count('class="attncore-print-still"') >= 5

    def columns(table: str) -> int:
        return max([len(re.findall(r"<t[hd]\b", row))
                    for row in re.findall(r"<tr\b.*?</tr>", table, re.S)] or [0])

    widest = max(columns(t) for t in re.findall(r"<table\b.*?</table>", _printed_page(site),
                                               re.S))
    wider = [columns(t) for t in re.findall(r"<table\b.*?</table>", page, re.S)
             if columns(t) > widest]
    assert not wider, f"tables of {wider} columns, more than any the PDF prints ({widest})"


def test_the_pdf_prints_like_a_book(site):
    # Read as a book, not as a browser's printout: a contents page with page numbers, one
    # bookmark per chapter that reads as its title, the interactive figures' still pictures,
    # no web controls, no blank page, and tables whose every column is printed (for the
    # pages printed: the sample, in the suite's build).
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    pdf = site / PDF
    printed = _printed_page(site)
    text, _ = pdf_text(pdf)
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
    titles = _chapter_titles(printed)
    assert any(Path(s).name.startswith("00_") for s in titles) and \
        any(not Path(s).name.startswith("00_") for s in titles) and \
        any("_going_further" in s for s in titles), \
        f"the PDF prints no chapter 0, numbered chapter or going-further page: {sorted(titles)}"
    for stem, title in titles.items():
        ok = _bookmark_matches(stem, title, marks)
        assert len(ok) == 1, f"the bookmark of {stem} does not read {title!r}: " \
                             f"{[m for m in marks if title[:12] in m]}"
    # every entry of the contents, and only those printed, with its page number after it
    sections = re.findall(r'<section class="attncore-print-page" id="([^"]+)"', printed)
    targets = re.findall(r'<span class="attncore-toc-page" data-target="([^"]+)"', printed)
    assert set(targets) <= set(sections) and set(sections) - set(targets) <= {"index"}, \
        f"the contents list {targets}, the PDF prints {sections}"
    entries = [html.unescape(re.sub(r"<[^>]+>", "", a)) for a in
               re.findall(r'<a href="#[^"]*">(.*?)</a><span class="attncore-toc-dots">', printed)]
    captions = [html.unescape(c) for c in
                re.findall(r'<li class="attncore-toc-part">([^<]*)</li>', printed)]
    contents = re.sub(r"\s+", " ", contents)
    # each entry's words up to its first formula (which the PDF prints typeset), in order
    keys = [re.sub(r"\s+", " ", re.split(r"\\\(", entry)[0]).strip() for entry in entries]
    spots, at = [], 0
    for key in keys:
        spot = contents.find(key, at)
        assert spot >= 0, f"the contents lack {key!r}: {contents[:300]!r}"
        spots.append(spot)
        at = spot + len(key)
    for key, start, end in zip(keys, spots, spots[1:] + [len(contents)]):
        line = contents[start + len(key):end]
        for caption in captions:
            line = line.replace(caption, "")
        assert re.search(r"\s\d+\s*$", line), \
            f"the contents give no page number for {key!r}: {contents[:300]!r}"
    assert not re.search(r"\d+\. \d+\. ", contents), "the contents number twice"
    stills = printed.count('class="attncore-print-still"')
    assert stills >= 1, "the PDF prints no interactive figure's still picture"
    # every column of every table is printed: some page holds every word of its header row
    # (a column cut off at the margin loses its header's words with the rest of it)
    missing = []
    tables = re.findall(r"<table\b.*?</table>", printed, re.S)
    assert tables, "the PDF prints no table"
    for table in tables:
        header = [html.unescape(re.sub(r"<[^>]+>", " ", cell)) for cell in
                  re.findall(r"<th\b[^>]*>(.*?)</th>", table, re.S) if 'class="math' not in cell]
        words = set(re.findall(r"\w+", " ".join(header)))
        if words and not any(words <= on_page for on_page in page_words):
            missing.append(" | ".join(" ".join(h.split()) for h in header))
    assert not missing, f"tables cut off in print (their headers): {missing[:5]}"


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



def test_the_sample_page_holds_only_its_pages_their_contents_and_solutions(tmp_path):
    # Without a build: what the suite's build prints (a sample, ATTNCORE_PDF_SAMPLE) beside
    # the whole page, which it still writes, from a three-page site as Sphinx writes it.
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    import book_pdf

    root = tmp_path / "course"
    root.mkdir()
    site = small_site(root, [
        (caption, [(name, title, f'<div class="exercise"><p>Do {title}.</p></div>'
                                 f'<div class="solution"><p>Answer {title}.</p></div>')])
        for caption, name, title in (("One", "01_x", "Ones"), ("Two", "02_y", "Twos"))])
    whole = book_pdf.assemble(site, root)
    alone = book_pdf.assemble(site, root).read_text()
    assert book_pdf.assemble(site, root, sample=("chapters/02_y",)) == whole
    assert whole.read_text() == alone, "the whole page is the same with a sample beside it"
    sample = (whole.parent / book_pdf.SAMPLE_FILE).read_text()
    assert "Answer Ones" in alone and "Answer Twos" in alone
    assert "Do Twos." in sample and "Answer Twos" in sample and "CC BY 4.0" in sample
    assert "Ones" not in sample and "Hello." not in sample and ">One<" not in sample
    assert ">Two<" in sample and "Solutions to the exercises" in sample
    try:
        book_pdf.assemble(site, root, sample=("chapters/03_z",))
    except RuntimeError as err:
        assert "chapters/03_z" in str(err)
    else:
        raise AssertionError("a sample of a page not in the book was accepted")


def test_the_published_site_holds_the_whole_books_pdf():
    # Without a build: the suite's build prints a sample (tests/built_site.py), so the
    # workflow prints the whole book into the site it publishes, after the suite and before
    # the upload, without ATTNCORE_PDF_SAMPLE.
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = workflow["jobs"]["test-and-build"]["steps"]
    runs = [str(step.get("run", "")) for step in steps]
    uses = [str(step.get("uses", "")) for step in steps]
    suite = runs.index("./scripts/test")
    printing = [i for i, run in enumerate(runs) if "_ext/book_pdf.py _build/html" in run]
    upload = next(i for i, use in enumerate(uses) if use.startswith("actions/upload-pages"))
    assert printing and suite < printing[-1] < upload, runs
    assert "ATTNCORE_PDF_SAMPLE" not in runs[printing[-1]] + str(steps[printing[-1]].get("env"))
    assert "ATTNCORE_PDF_SAMPLE" not in str(workflow.get("env")) + \
        str(workflow["jobs"]["test-and-build"].get("env"))
