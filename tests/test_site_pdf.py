"""The book's PDF (printed by _ext/book_pdf.py at the end of scripts/build-book, from the site
that tests/built_site.py builds once for the run) and the printable page it is printed from."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from built_site import PDF, RAW_TEX, ROOT, pages, pdf_text, toc_pages, visible_text


def test_the_pdf_holds_every_chapter_typeset_and_sharp(site):
    from test_book_structure import NOTEBOOKS

    pdf = site / PDF
    assert pdf.is_file(), "build-book printed no PDF of the book"
    assert f'href="{PDF}"' in (site / "index.html").read_text(), "the landing page links no PDF"
    text, images = pdf_text(pdf)
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
    for stem in toc_pages():
        text = " ".join(visible_text((site / f"{stem}.html").read_text()).split())
        assert "CC BY 4.0" in text and "MIT licence" in text, f"{stem}: no licence in its footer"
    text, _ = pdf_text(site / PDF)
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

