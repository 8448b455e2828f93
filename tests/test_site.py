"""The website: it builds with warnings as errors, and its math renders with no network.

The build is the README's own command (scripts/build-book). The browser check loads built
pages from disk in Debian's headless Chromium, with every network request refused, and asserts
that MathJax (served from the site itself) typeset the formulas.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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


def render(page: Path) -> str:
    """The DOM of ``page`` after Chromium has run its scripts, with networking refused."""
    if CHROMIUM is None:
        pytest.fail("Debian's chromium is not installed: `apt-get install chromium` "
                    "(scripts/test installs it when run as root)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
               # no network: every host resolves to nothing and any proxy use goes nowhere
               "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
               "--allow-file-access-from-files",
               # let MathJax's deferred, asynchronous typesetting finish before the dump
               "--virtual-time-budget=20000", "--run-all-compositor-stages-before-draw",
               "--dump-dom", page.as_uri()]
        proc = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=120, env={**os.environ, "HOME": profile})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def visible_text(dom: str) -> str:
    dom = re.sub(r"<head\b.*?</head>", " ", dom, flags=re.S | re.I)
    dom = re.sub(r"<(script|style|mjx-assistive-mml|noscript)\b.*?</\1>", " ", dom,
                 flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


def _toc_pages() -> list[str]:
    from test_book_structure import toc_files

    return sorted(toc_files())


@pytest.mark.browser
@pytest.mark.parametrize("stem", _toc_pages())
def test_math_is_typeset_offline(site, stem):
    page = site / f"{stem}.html"
    source = page.read_text()
    n_math = len(re.findall(r'class="[^"]*\bmath\b', source))
    dom = render(page)
    typeset = len(re.findall(r"<mjx-container\b", dom))
    assert typeset >= n_math, f"{stem}: {typeset} formulas typeset, expected >= {n_math}"
    text = visible_text(dom)
    assert "$$" not in text, f"{stem}: raw $$ left in the visible text"
    for delim in (r"\(", r"\[", r"\begin{"):
        assert delim not in text, f"{stem}: untypeset TeX {delim!r} left in the visible text"


def test_the_chapters_have_math_to_check(site):
    # Guards the test above against passing vacuously (e.g. if math stopped being emitted).
    for stem in ("chapters/00_how_to_use", "chapters/02_why_sqrt_dk", "appendix/proofs"):
        assert re.search(r'class="[^"]*\bmath\b', (site / f"{stem}.html").read_text()), stem


# --- the site speaks to readers, and its buttons lead somewhere ---------------------------------

def _notebook_setup():
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import notebook_setup

    return notebook_setup


# Paths of the machine that built the site, and words about how it was produced.
LOCAL_PATH = re.compile(r"(?<![\w.])(/work|/home|/tmp|/root)\b|\.venv\b")
PRODUCTION = re.compile(r"\b(lent|this task|sessions?)\b", re.I)


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
        assert named == [url], f"{nb.name} names {named}, _config.yml names {url!r}"
