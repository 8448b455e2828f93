"""The website in a browser: its math renders with no network, nothing scrolls sideways on a
phone, the interactive figures are drawn and follow the keyboard.

The browser checks load built pages (tests/built_site.py builds the site once for the run) from
disk in headless Chromium (one browser for all pages, driven through its DevTools pipe: see
headless_chromium.py), with every network request refused, assert that MathJax (served from the
site itself) typeset the formulas, and that no page reported an error: no uncaught exception, no
console.error, no file that failed to load. Each page is loaded once for all of its checks (the
on_a_phone fixture): typesetting it is most of what a check costs.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from built_site import RAW_TEX, ROOT, pages, toc_pages, visible_text
from headless_chromium import BrowserError, Chromium


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


class Loaded:
    """What the probes saw in one page, loaded once at a phone's width (see on_a_phone)."""

    def __init__(self):
        self.dom = ""                   # the DOM once the page had settled (as render() has it)
        self.errors: list[str] = []     # what the page reported by then
        self.overflow: dict = {}        # OVERFLOW_PROBE's answer
        self.titles: list = []          # TITLE_PROBE's answer
        self.figures: dict | None = None    # drive_figures()' record, on a page with figures
        self.dark: dict | None = None       # dark_mode()'s record, on INTERACTIVE_CHAPTERS[0]
        self.search_boxes: int | None = None    # on index.html: SEARCH_BOXES' answer
        self.failure = ""               # why the probes could not finish, if they could not

    def raise_failure(self) -> None:
        if self.failure:
            raise BrowserError(self.failure)


@pytest.fixture(scope="module")
def on_a_phone(site, browser) -> dict[Path, Loaded]:
    """Every built page, loaded once in the browser at a phone's width (PHONE, with mobile
    emulation), and every probe of this module's page checks run on it; the tests assert on
    what it recorded. MathJax's typesetting is most of a page's cost, and the checks used to
    load each page two or three times over.

    The same load serves all of them because none of them depends on the width: MathJax
    typesets the same formulas, the sphinx-togglebutton script collapses the same solutions,
    the keyboard and the dark mode act on a figure alike at either width (only a long title
    breaks into lines on a phone). (Measured on 2026-11-29: on each of the 40 built pages the
    formulas typeset, the raw TeX left, the solutions shown and the console errors were the
    same at 420 px as in the browser's own 780 px window.) A wide screen's scripts were never
    run here either: 780 px is under the theme's desktop layout too (its sidebar folds under
    992 px), and its scripts ask the width nothing but whether a box scrolls. Pages are loaded
    two tabs at a time, so that the next one typesets on the other core while these probes run
    (Chromium.open_each).
    """
    loaded = {}
    for page, tab in browser.open_each(pages(site), width=PHONE):
        record = loaded[page] = Loaded()
        try:
            if isinstance(tab, BrowserError):
                raise tab
            record.dom, record.errors = tab.dom(), tab.errors()
            record.overflow = tab.evaluate(OVERFLOW_PROBE)
            record.titles = tab.evaluate(TITLE_PROBE)
            if page == site / "index.html":
                record.search_boxes = tab.evaluate(SEARCH_BOXES)
            if 'class="attncore-vega"' in page.read_text():
                record.figures = {}
                drive_figures(tab, record.figures)
                if page == site / f"{INTERACTIVE_CHAPTERS[0]}.html":
                    record.dark = dark_mode(tab)
        except (BrowserError, OSError) as e:    # this page's tests fail with it, not others
            record.failure = f"{page.relative_to(site)}: {e}"
    return loaded



@pytest.mark.browser
@pytest.mark.parametrize("stem", toc_pages())
def test_page_renders_offline_without_errors(site, on_a_phone, stem):
    page = site / f"{stem}.html"
    source = page.read_text()
    n_math = len(re.findall(r'class="[^"]*\bmath\b', source))
    loaded = on_a_phone[page]
    loaded.raise_failure()
    dom, console_errors = loaded.dom, loaded.errors
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
    # Loaded as on_a_phone loads the site's pages (two tabs at a time, at a phone's width),
    # so that a report must also come from its own page, not from the tab beside it.
    expected = {}
    for i, (what, (body, words)) in enumerate(broken.items()):
        page = tmp_path / f"broken_{i}.html"
        page.write_text(f"<!DOCTYPE html><html><body><p>x</p>{body}</body></html>")
        expected[page] = what, words
    quiet = tmp_path / "quiet.html"
    quiet.write_text("<!DOCTYPE html><html><body><p>Raw $x + \\mathbf{y}$ here.</p><script>"
                     "console.log('log'); console.info('info');</script></body></html>")
    for page, tab in browser.open_each([*expected, quiet], width=PHONE):
        if isinstance(tab, BrowserError):
            raise tab
        dom, errors = tab.dom(), tab.errors()
        if page == quiet:
            assert not errors, f"console.log and console.info were reported as errors: {errors}"
            assert RAW_TEX.search(visible_text(dom, code=False))
        else:
            what, words = expected[page]
            assert any(words in e for e in errors), f"{what} was not reported: {errors}"
            others = [w for p, (_, w) in expected.items() if p != page]
            assert not any(w in e for w in others for e in errors), \
                f"{what}: another page's error reported: {errors}"


@pytest.mark.browser
def test_a_page_the_browser_fails_on_fails_alone(browser, tmp_path):
    # on_a_phone's loads: a page that cannot be loaded is reported in its turn, and the pages
    # loading beside it and after it are still loaded and probed.
    files = [tmp_path / f"page_{i}.html" for i in range(4)]
    missing = files[1]
    for i, page in enumerate(files):
        if page != missing:
            page.write_text(f"<!DOCTYPE html><html><body><p>page {i}</p></body></html>")
    seen = [(page, tab if isinstance(tab, BrowserError) else tab.evaluate(
                "document.body.textContent"))
            for page, tab in browser.open_each(files, width=PHONE)]
    assert [page for page, _ in seen] == files
    assert isinstance(dict(seen)[missing], BrowserError), seen
    assert [text for page, text in seen if page != missing] == ["page 0", "page 2", "page 3"]


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
def test_no_page_scrolls_sideways_on_a_phone(site, on_a_phone):
    # Every built page, not only the chapters: the index, search and API pages too.
    problems, checked = [], 0
    for page in pages(site):
        loaded = on_a_phone[page]
        loaded.raise_failure()
        found = {**loaded.overflow, "sticking": list(loaded.overflow["sticking"])}
        # an interactive figure's title runs off no chart (the chart clips it)
        for title, right, edge in loaded.titles:
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
    loaded = {}
    for what, (body, bad) in cases.items():
        page = tmp_path / f"{what.replace(' ', '_')}.html"
        page.write_text('<!DOCTYPE html><html><head><meta name="viewport" '
                        'content="width=device-width, initial-scale=1"></head>'
                        f"<body>{body}</body></html>")
        loaded[page] = what, bad
    # loaded and probed as on_a_phone does
    for page, tab in browser.open_each(loaded, width=PHONE):
        if isinstance(tab, BrowserError):
            raise tab
        found = tab.evaluate(OVERFLOW_PROBE)
        what, bad = loaded[page]
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

# A pause for what a key press or a change of theme sets off, where the page's figures cannot
# be asked (JupyterLab draws them with its own renderer).
SETTLE = "new Promise(r => setTimeout(() => requestAnimationFrame(() => r(true)), 300))"

# Settles once every figure on the page has drawn what its controls and theme say: a change of
# theme draws a figure anew (a new view, once vega-embed has compiled the spec again), and a
# control's input event queues a run of the figure's view, which a later runAsync() awaits.
DRAWN = """
(async () => {
  const boxes = [...document.querySelectorAll("div.attncore-vega")];
  const current = box => {
    const target = box.querySelector("div.attncore-vega-view");
    return box.attncoreView && target && target.contains(box.attncoreView.container());
  };
  const start = Date.now();
  while (!boxes.every(current) && Date.now() - start < 10000)
    await new Promise(r => requestAnimationFrame(r));
  await Promise.all(boxes.filter(current).map(box => box.attncoreView.runAsync()));
  await new Promise(r => requestAnimationFrame(r));
  return true;
})()"""


def drive_figures(tab, record: dict) -> None:
    """Each control of each interactive figure of the page in ``tab``, focused and changed
    with the keyboard. Fills ``record`` as it goes (what it holds stands if the browser fails
    midway): the figures as first drawn ("figures": FIGURE_STATE), one entry per control in
    their order ("steps": focused, the key, the control's value and whether the drawing
    changed), the page's console "errors" and "warnings" then, and the figures' numbers,
    captions and widths ("layout").
    """
    figures = record["figures"] = tab.evaluate(FIGURE_STATE)
    steps = record["steps"] = []
    for f_index, figure in enumerate(figures):
        for c_index, control in enumerate(figure["controls"]):
            selector = (f'document.querySelectorAll("div.attncore-vega")[{f_index}]'
                        f'.querySelectorAll(".vega-bindings input, .vega-bindings '
                        f'select")[{c_index}]')
            focused = tab.evaluate(f"({selector}.focus(), document.activeElement === "
                                   f"{selector})")
            before = tab.evaluate(FIGURE_STATE)[f_index]
            if control["type"] == "checkbox":
                key = " "
            elif control["type"] == "range":
                key = "ArrowLeft" if control["value"] == control["max"] else "ArrowRight"
            else:
                key = "ArrowDown"
            tab.press(key)
            tab.evaluate(DRAWN, await_promise=True)
            after = tab.evaluate(FIGURE_STATE)[f_index]
            steps.append({"focused": focused, "key": key,
                          "value": after["controls"][c_index]["value"],
                          "svg_changed": after["svg"] != before["svg"]})
    record["errors"], record["warnings"] = tab.errors(), console_warnings(tab)
    layout = tab.evaluate("""
[...document.querySelectorAll("div.attncore-vega")].map(box => {
  const figure = box.closest("figure");
  const column = box.closest("div.cell").getBoundingClientRect().width;
  return {number: figure ? (figure.querySelector(".caption-number") || {}).textContent : null,
          caption: figure ? (figure.querySelector("figcaption") || {}).textContent : "",
          width: box.querySelector("svg.marks").getBoundingClientRect().width, column};
})""")
    record["layout"] = layout


def dark_mode(tab) -> dict:
    """The first figure's colours and its first slider's value, in the page's light mode and
    then in the dark mode after the slider was moved one step right."""
    colours = """
(() => { const box = document.querySelector("div.attncore-vega");
  const svg = box.querySelector("svg.marks");
  const title = svg.querySelector(".role-title text, text");
  const label = box.querySelector(".vega-bindings label, .vega-bindings span");
  return {card: getComputedStyle(box).backgroundColor, title: getComputedStyle(title).fill,
          label: getComputedStyle(label).color,
          slider: box.querySelector(".vega-bindings input[type=range]").value}; })()"""
    light = tab.evaluate(colours)
    selector = 'document.querySelector("div.attncore-vega .vega-bindings input[type=range]")'
    tab.evaluate(f"{selector}.focus()")
    tab.press("ArrowRight")
    tab.evaluate('document.documentElement.dataset.theme = "dark"')
    tab.evaluate(DRAWN, await_promise=True)
    return {"light": light, "dark": tab.evaluate(colours), "errors": tab.errors()}


@pytest.mark.browser
def test_interactive_figures_are_drawn_and_follow_the_keyboard(site, on_a_phone):
    for stem in INTERACTIVE_CHAPTERS:
        assert 'class="attncore-vega"' in (site / f"{stem}.html").read_text(), \
            f"{stem}: no interactive figure on the page"
    changed = 0
    for page in pages(site):
        if 'class="attncore-vega"' not in page.read_text():
            continue
        loaded = on_a_phone[page]
        record = loaded.figures or {}
        if "figures" not in record:
            loaded.raise_failure()
        figures, steps = record["figures"], iter(record.get("steps", []))
        assert figures and all(f["svg"] for f in figures), f"{page.name}: a figure not drawn"
        loaded.raise_failure()      # drawn, and then the browser failed, if it did
        for f_index, figure in enumerate(figures):
            assert figure["controls"], f"{page.name}: figure {f_index} has no controls"
            for c_index, control in enumerate(figure["controls"]):
                where = f"{page.name}, figure {f_index}, control {control['name']}"
                assert control["tabIndex"] >= 0 and not control["disabled"], \
                    f"{where}: the keyboard cannot reach it"
                step = next(steps)
                assert step["focused"], f"{where}: cannot be focused"
                key = step["key"]
                assert step["value"] != control["value"], \
                    f"{where}: {key!r} did not change the control"
                assert step["svg_changed"], \
                    f"{where}: changing the control did not change what is drawn"
                changed += 1
        errors = record["errors"]
        assert not errors, f"{page.name}: errors in the browser console: {errors[:3]}"
        warned = record["warnings"]
        assert not warned, f"{page.name}: warnings in the browser console: {warned[:3]}"
        # each figure is numbered, has a caption, and is as wide as the column
        for f_index, figure in enumerate(record["layout"]):
            where = f"{page.name}, figure {f_index}"
            assert figure["number"] and re.match(r"Fig\. \d+\.\d+", figure["number"]), where
            assert len(figure["caption"]) > 60, f"{where}: no caption that says what to try"
            assert figure["width"] >= 0.9 * figure["column"], f"{where}: {figure}"
    assert changed >= 9


@pytest.mark.browser
def test_interactive_figures_follow_the_dark_mode(site, on_a_phone):
    # In the book theme's dark mode the figure is drawn again with Vega's dark theme: a dark
    # background, light text, its controls where the reader left them. (On the page that
    # on_a_phone loaded, after drive_figures moved each control one step.)
    page = site / f"{INTERACTIVE_CHAPTERS[0]}.html"
    on_a_phone[page].raise_failure()
    light, dark, errors = (on_a_phone[page].dark[k] for k in ("light", "dark", "errors"))

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
    # outputs, which JupyterLab's own Vega renderer draws whatever the trust: every one of
    # attncore.lab.interactive.FIGURES is drawn, and a control changes what is drawn. The
    # figures are the outputs the chapters store, what a reader downloads (nbval compares
    # each with a fresh run's), gathered into one notebook.
    import os
    import secrets
    import signal
    import socket
    import sys
    import time
    import urllib.request

    import nbformat

    from attncore.lab.interactive import FIGURES, VEGALITE_MIME

    # the metadata of a chapter (its kernel and language), as a reader's notebook has it
    chapter = nbformat.read(ROOT / f"{INTERACTIVE_CHAPTERS[0]}.ipynb", as_version=4)
    notebook = nbformat.v4.new_notebook(metadata=chapter.metadata)
    stored = {}                                  # figure's name -> the chapters' cells
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and any(
                    VEGALITE_MIME in out.get("data", {}) for out in cell.outputs):
                names = [n for n in FIGURES if re.search(rf"\b{n}\(", cell.source)]
                assert len(names) == 1, \
                    f"{path.name}: a Vega-Lite output whose cell calls {names} of FIGURES"
                stored.setdefault(names[0], []).append(cell)
    counts = {n: len(stored.get(n, [])) for n in FIGURES}
    assert counts == dict.fromkeys(FIGURES, 1), \
        f"the chapters store these figures so many times, not once each: {counts}"
    for i, name in enumerate(FIGURES):
        cell = stored[name][0]
        cell.execution_count = i + 1
        for out in cell.outputs:
            if out.output_type == "execute_result":
                out.execution_count = i + 1
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


SEARCH_BOXES = """[...document.querySelectorAll(
  ".search-button-field, .search-button, form.bd-search, input[type=search]")]
  .filter(e => !e.closest("dialog:not([open])"))
  .filter(e => e.getBoundingClientRect().width > 0).length"""


@pytest.mark.browser
def test_one_search_box_on_a_wide_screen_and_on_a_phone(site, browser, on_a_phone):
    # The theme offered a search field in the header and another in the sidebar; the sidebar's
    # is left out (html_sidebars in _config.yml). The search dialog, closed, does not count.
    # (At a phone's width on_a_phone counted them.)
    with browser.open(site / "index.html", width=1280) as tab:
        assert tab.evaluate(SEARCH_BOXES) == 1, "at 1280 px"
    on_a_phone[site / "index.html"].raise_failure()
    assert on_a_phone[site / "index.html"].search_boxes == 1, f"at {PHONE} px"


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

