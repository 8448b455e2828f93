"""The chapters read right in JupyterLab, with jupyterlab-myst and with its plain renderer, and
in nbconvert's HTML.

The test starts JupyterLab from the course environment (``.venv/bin/jupyter lab``, as
``./scripts/lab`` does) on a free loopback port with no token, opens chapters in headless
Chromium (tests/headless_chromium.py, allowed to reach 127.0.0.1 and nothing else) and reads
what the reader sees: the text of each rendered markdown cell (the CodeMirror editor that holds
the cell's source is hidden and not read), before and after a click on every collapsed box.
The same browser reads each chapter as ``jupyter nbconvert --to html`` renders it (mistune and
nbconvert's own HTML clean-up: what GitHub's and nbviewer's previews show), from disk.

With jupyterlab-myst (what ./scripts/lab and Binder give):

- no directive or role is left as raw text (``:::{``, ``{prf:``, ``:label:`` ...);
- no reference is unresolved (jupyterlab-myst shows one as its label behind a warning icon,
  a ``span.text-yellow-600`` titled "Cross Reference Not Found" or "Citation Not Found");
- every solution is hidden until its box is clicked, and readable after the click;
- every number that a markdown cell's metadata ``attncore.numbers`` says comes from the run
  is in the cell's rendered text.

With jupyterlab-myst disabled (JupyterLab's own renderer, marked: close to what Colab, VS Code
and plain Jupyter show), and in nbconvert's HTML, for every chapter:

- every solution is hidden until its ``<summary>`` is clicked, and readable after the click;
- no label, option line, role, target or comment of MyST is left as text (``:label:``,
  ``{prf:ref}``, ``(name)=``, ``% ...``; scripts/portable_markdown.py writes the chapters so).
  A directive's opening line, ``:::{prf:theorem} Title``, does show: it reads as the box's
  heading.

Each check is also run on two small notebooks from notebook_fixtures.py: one that follows the
conventions (every check passes) and one that breaks each of them (every break is reported).

The two JupyterLab servers run from a temporary configuration of their own (no change to the
shared environment): a JUPYTER_CONFIG_DIR with the notebook's windowing mode "none" (so that
JupyterLab renders every cell, not only those in view), for the plain one a page_config.json
that disables jupyterlab-myst (JUPYTER_PREFER_ENV_PATH=0 gives that directory precedence over
the environment's own page_config.json, which locks the extension on) and MathJax (typeset
maths hides no solution and shows no markup, and typesetting took a third of the time), and
no kernel: the notebooks are read, not run, so no kernel is started. The notebooks are copies
in a temporary folder, so JupyterLab writes nothing into the repository. Without MyST,
JupyterLab and nbconvert read each notebook's markdown cells alone: what a renderer makes of
one does not depend on the other cells, and the code cells, highlighted and with their
outputs, would take most of the time (nbconvert six times as long).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

import headless_chromium
import notebook_fixtures
from headless_chromium import BrowserError, Chromium

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import portable_markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JUPYTER = ROOT / ".venv" / "bin" / "jupyter"
ALL_CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# Reading a chapter costs Chromium 1.5-6 s of CPU with jupyterlab-myst, 1-3 s without and
# well under a second as nbconvert's HTML (measured on a 2-core machine). Without MyST is where
# a solution shows or markup is left as text, so JupyterLab's plain renderer and nbconvert
# read every chapter; with jupyterlab-myst the suite reads the first chapter (what "how to use
# this book" promises) and chapter 2, which has every kind of content (proofs, figures,
# exercises with code and prose solutions, numbers from the run, citations), and
# test_every_chapter_is_written_as_the_browser_check_expects checks the source of every
# chapter for what the browser would show wrong.
# ATTNCORE_LAB_CHAPTERS=all reads every chapter with jupyterlab-myst too (or a comma-separated
# list of notebook names, those); do that before trusting a change to how chapters are written.
SUBSET = ("00_how_to_use.ipynb", "02_why_sqrt_dk.ipynb")
# A folder (existing) for a screenshot of each notebook as first rendered, in each JupyterLab
# (myst-NAME.png, plain-NAME.png): what a person looks at before trusting the checks.
SCREENSHOTS = os.environ.get("ATTNCORE_LAB_SCREENSHOTS", "")
# The tabs' height in CSS pixels: a screen's (what a reader's window shows), and the rest of
# the notebook laid out below it all the same (the windowing mode "none"); for screenshots, a
# tall one, to see more of a notebook at once.
TAB_HEIGHT = 4000 if SCREENSHOTS else 1000
_chosen = os.environ.get("ATTNCORE_LAB_CHAPTERS", "")
CHAPTERS = [nb for nb in ALL_CHAPTERS
            if (_chosen == "all" or nb.name in (_chosen.split(",") if _chosen else SUBSET))]
FIXTURES = {"conventions.ipynb": notebook_fixtures.conventions_notebook,
            "broken.ipynb": notebook_fixtures.broken_notebook}

# What a reader must never see in a rendered markdown cell: MyST syntax left as text.
RAW = (":::{", "```{", "{prf:", "{glue", "{cite", "{numref", "{doc}", "{ref}", "{eq}",
       ":label:", ":class:")
# Without MyST a directive's opening line shows (``:::{prf:theorem} Title``: the box's
# heading, which a reader can follow); nothing else of MyST may: no option line, role (a
# {name} that follows no colon, letter or backslash: not a fence, not TeX's \text{ref}),
# comment line, or HTML that the renderer left as text.
RAW_PLAIN = (":label:", ":class:", ":name:", "<details", "<!--")
ROLE_PLAIN = re.compile(r"(?<![\w\\:])\{(?:prf:[\w-]+|ref|numref|eq|doc|cite(?::\w+)?|"
                        r"glue(?::\w+)?)\}")
# a target line, (name)=, written before a heading or a box; a MyST comment line, % ...
TARGET = re.compile(r"(?:^|\n)\([\w.-]+\)=(?:\n|$)")
COMMENT = re.compile(r"(?:^|\n)%(?: [^\n]*)?(?=\n|$)")

# Time limits, seconds: the server's start, one notebook's rendering, and all the reading:
# READ_S for each notebook a server shows (about 2 to 15 s each on a busy 2-core machine).
START_S, NOTEBOOK_S, READ_S = 60, 120, 40
# The longest the test waits on a tab before it looks at the other (under the browser's own
# time limit, NOTEBOOK_S + 15 s, for one command).
WAIT_S = 30


# --- the servers -----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """``jupyter lab`` on 127.0.0.1, without token, serving ``root``; myst or plain."""

    def __init__(self, root: Path, config: Path, *, myst: bool):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = config / "lab" / "user-settings" / "@jupyterlab" / "notebook-extension"
        settings.mkdir(parents=True)
        (settings / "tracker.jupyterlab-settings").write_text(
            json.dumps({"windowingMode": "none"}))
        (config / "labconfig").mkdir()
        if not myst:
            (config / "labconfig" / "page_config.json").write_text(
                json.dumps({"disabledExtensions": {"jupyterlab-myst": True,
                                                   "@jupyterlab/mathjax-extension": True}}))
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config),
               "JUPYTER_DATA_DIR": str(config / "data"),
               "JUPYTER_RUNTIME_DIR": str(config / "runtime"), "JUPYTER_PREFER_ENV_PATH": "0"}
        self.log = (config / "lab.log").open("w")
        self.proc = subprocess.Popen(
            [str(JUPYTER), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             "--ServerApp.port_retries=0", "--ServerApp.token=", "--ServerApp.password=",
             "--ServerApp.disable_check_xsrf=True", "--allow-root",
             f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
             # no kernel is started: the notebooks are read, not run
             '--KernelSpecManager.allowed_kernelspecs=["no-kernel-for-this-test"]'],
            cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.logfile = config / "lab.log"
        self._terminated = False

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited:\n{self.logfile.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"jupyter lab did not listen within {START_S} s:\n"
                           f"{self.logfile.read_text()[-3000:]}")

    def terminate(self) -> None:
        """SIGTERM, once (the server shuts its kernels down, were there any): servers told
        together shut down side by side."""
        if self.proc.poll() is None and not self._terminated:
            self.proc.send_signal(signal.SIGTERM)
            self._terminated = True

    def stop(self) -> None:
        """SIGTERM (see terminate), 15 s, then kill its process group (the server's own, not
        yet reaped, so the id is still its)."""
        self.terminate()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# --- the reading, in the browser ---------------------------------------------------------------

APP_READY = """
new Promise((resolve, reject) => {
  const start = Date.now();
  (function wait() {
    if (window.jupyterapp && document.querySelector('#jp-main-dock-panel')) {
      window.jupyterapp.started.then(() => window.jupyterapp.restored)
        .then(() => resolve(true), reject);
    } else if (Date.now() - start > %(limit_ms)d) {
      reject(new Error('JupyterLab did not start within %(limit_ms)d ms'));
    } else {
      setTimeout(wait, 100);
    }
  })();
})
"""

# Reads the notebooks %(names)s one after the other, in the background: opens each, waits
# until every markdown cell is rendered and its text has stopped changing, reads each cell,
# clicks every closed <summary>, reads again, closes the notebook; leaves what it read, or why
# it could not, in window.attncoreRead[name], and sets window.attncoreDone when done.
# window.attncoreWait(ms) is a promise of [attncoreDone, attncoreShow] that settles when the
# reading is done, when it asks for a screenshot, or after ms milliseconds, whichever comes
# first: the test waits on it rather than asking again and again.
READ_NOTEBOOKS = r"""
window.attncoreRead = {};
window.attncoreDone = false;
window.attncoreWaiting = [];
window.attncoreWake = () => {
  const waiting = window.attncoreWaiting;
  window.attncoreWaiting = [];
  waiting.forEach(resolve => resolve());
};
window.attncoreWait = ms => new Promise(resolve => {
  if (window.attncoreDone || (window.attncoreShow && window.attncoreShow !== window.attncoreShown)) {
    resolve();
  } else {
    window.attncoreWaiting.push(resolve);
    setTimeout(resolve, ms);
  }
}).then(() => [window.attncoreDone, window.attncoreShow || null]);
(async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  const app = window.jupyterapp;
  // no kernel is offered: dismiss JupyterLab's kernel chooser when it asks
  const dismiss = () => document.querySelectorAll('.jp-Dialog .jp-mod-reject')
                               .forEach(b => b.click());
  const read = async path => {
    const start = Date.now();
    const panel = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
    await panel.context.ready;
    await panel.revealed;
    const cells = () => panel.content.widgets;
    const rendered = cell => cell.node.querySelector(
        '.jp-InputArea > .myst, .jp-InputArea > .jp-MarkdownOutput');
    const texts = () => cells().map(c => c.model.type !== 'markdown' ? null
        : (rendered(c) ? rendered(c).innerText : null));
    const settle = async () => {
      // Settled: every markdown cell rendered, and its text the same 250 ms apart. Where the
      // page changes nothing at all for 250 ms (no change to the document seen by a
      // MutationObserver), the text is the same 250 ms apart: that is noticed within 20 ms
      // of those 250 ms, not at the next of the readings 250 ms apart.
      const start = Date.now();
      let changed = Date.now();
      const observer = new MutationObserver(() => { changed = Date.now(); });
      observer.observe(document.documentElement, {subtree: true, childList: true,
                                                  characterData: true, attributes: true});
      try {
        let last = null, readAt = 0;
        while (Date.now() - start < %(limit_ms)d) {
          dismiss();
          const quiet = Date.now() - changed >= 250;
          if (quiet || Date.now() - readAt >= 250) {
            readAt = Date.now();
            const now = texts();
            // rendered: a node with text for every markdown cell that has a source
            const done = now.every((t, i) => cells()[i].model.type !== 'markdown' ||
                (t !== null && (t.trim() !== '' ||
                                cells()[i].model.sharedModel.source.trim() === '')));
            const key = JSON.stringify(now);
            if (done && (quiet || key === last)) return now;
            last = done ? key : null;
          }
          await sleep(quiet ? 250 : 20);
        }
      } finally {
        observer.disconnect();
      }
      throw new Error('the notebook did not finish rendering within %(limit_ms)d ms');
    };
    try {
      const before = await settle();
      const renderedMs = Date.now() - start;
      if (%(pause)s) {                  // let the test take a screenshot first
        window.attncoreShow = path;
        window.attncoreWake();
        while (window.attncoreShown !== path) await sleep(100);
      }
      const unresolved = cells().map(c => c.model.type !== 'markdown' ? [] :
          [...c.node.querySelectorAll('.jp-InputArea > .myst [title$="Not Found"]')]
            .map(e => e.getAttribute('title') + ': ' + e.innerText));
      // a directive that a renderer without MyST shows as a code block (a backtick fence)
      const codeDirectives = cells().map(c => c.model.type !== 'markdown' ? [] :
          [...c.node.querySelectorAll(
              '.jp-InputArea > .jp-MarkdownOutput code[class*="language-{"]')]
            .map(e => (e.className.match(/language-(\{[^ ]*)/) || ['', e.className])[1]));
      // text in code elements: the syntax a chapter may show on purpose, not raw MyST
      const codes = cells().map(c => c.model.type !== 'markdown' || !rendered(c) ? [] :
          [...rendered(c).querySelectorAll('code')].map(e => e.innerText));
      let clicked = 0;
      for (const s of panel.content.node.querySelectorAll('.jp-InputArea summary')) {
        const box = s.parentElement;
        if (box && box.tagName === 'DETAILS' && !box.open) { s.click(); clicked++; }
      }
      const after = await settle();
      return {before, after, unresolved, codeDirectives, codes, clicked, renderedMs,
              ms: Date.now() - start};
    } finally {
      panel.dispose();
    }
  };
  for (const name of %(names)s) {
    try {
      window.attncoreRead[name] = await read(name);
    } catch (e) {
      window.attncoreRead[name] = {error: String(e)};
    }
  }
})().finally(() => { window.attncoreDone = true; window.attncoreWake(); });
"""


def read_notebooks(browser: Chromium, labs: dict[str, JupyterLab],
                   names: dict[str, list[str]], meanwhile=None) -> dict[str, dict[str, dict]]:
    """{kind: {name: what the reader sees, or {"error": why}}}: each server read in a tab of
    its own, the tabs side by side (the browser must not throttle a tab in the background:
    ``Chromium(background_throttling=False)``), all within READ_S seconds a notebook;
    ``names[kind]``: the notebooks read in that server. ``meanwhile()``, if given, is called
    once every tab reads (the tabs read on their own), before the reading is awaited."""
    limit = READ_S * sum(len(names[kind]) for kind in labs)
    deadline = time.monotonic() + limit
    seen = {}
    tabs = {}
    try:
        for kind, lab in labs.items():          # the pages load side by side
            tabs[kind] = browser.open_tab(f"{lab.url}/lab", width=1400, height=TAB_HEIGHT,
                                          new_window=True)
        for kind in labs:
            _, session = tabs[kind]
            browser.evaluate(APP_READY % {"limit_ms": START_S * 1000}, session,
                             await_promise=True)
            browser.evaluate(READ_NOTEBOOKS % {"names": json.dumps(names[kind]),
                                               "limit_ms": NOTEBOOK_S * 1000,
                                               "pause": json.dumps(bool(SCREENSHOTS))},
                             session)
        if meanwhile is not None:
            meanwhile()
        # Wait on each tab's promise; a few seconds at a time where a screenshot may be asked
        # for (the other tab waits for it meanwhile), else at most WAIT_S at a time.
        wait_s = 2 if SCREENSHOTS else WAIT_S
        pending = list(labs)
        while pending and time.monotonic() < deadline:
            for kind in list(pending):
                _, session = tabs[kind]
                ms = int(1000 * max(0.0, min(wait_s, deadline - time.monotonic())))
                done, shown = browser.evaluate(f"window.attncoreWait({ms})", session,
                                               await_promise=True)
                if shown and shown != browser.evaluate("window.attncoreShown", session):
                    shot = browser.call("Page.captureScreenshot", {"format": "png"}, session)
                    path = Path(SCREENSHOTS) / f"{kind}-{Path(shown).stem}.png"
                    path.write_bytes(base64.b64decode(shot["data"]))
                    browser.evaluate(f"window.attncoreShown = {json.dumps(shown)}", session)
                if done:
                    pending.remove(kind)
        for kind, (_, session) in tabs.items():
            seen[kind] = browser.evaluate("window.attncoreRead", session)
    finally:
        for target, _ in tabs.values():
            browser.close_tab(target)
    for kind in labs:
        for name in names[kind]:
            seen[kind].setdefault(name, {"error": f"not read within the test's {limit} s"})
    return seen


# Reads an nbconvert page as READ_NOTEBOOKS reads a notebook: each cell's rendered markdown
# (null for a code cell), before and after a click on every closed <summary>.
READ_PAGE = r"""
(() => {
  const cells = [...document.querySelectorAll('main > .jp-Cell')];
  const rendered = c => c.classList.contains('jp-MarkdownCell')
      ? c.querySelector('.jp-RenderedMarkdown') : null;
  const texts = () => cells.map(c => rendered(c) ? rendered(c).innerText : null);
  const before = texts();
  const codes = cells.map(c => !rendered(c) ? [] :
      [...rendered(c).querySelectorAll('code')].map(e => e.innerText));
  // a directive in a backtick fence: mistune gives its code block the class language-{name}
  const codeDirectives = cells.map(c => !rendered(c) ? [] :
      [...rendered(c).querySelectorAll('code[class*="language-{"], pre[class*="language-{"]')]
        .map(e => (e.className.match(/language-(\{[^ ]*)/) || ['', e.className])[1]));
  let clicked = 0;
  for (const s of document.querySelectorAll('.jp-RenderedMarkdown summary')) {
    const box = s.parentElement;
    if (box && box.tagName === 'DETAILS' && !box.open) { s.click(); clicked++; }
  }
  return {before, after: texts(), codes, codeDirectives, clicked};
})()
"""


def nbconvert_pages(notebooks: dict[str, dict], folder: Path) -> dict[str, Path]:
    """{name: the HTML page ``jupyter nbconvert --to html`` makes of the notebook's markdown
    cells} (see the module's docstring)."""
    import warnings

    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter()
    pages = {}
    for name, nb in notebooks.items():
        nb = markdown_only(nb)
        with warnings.catch_warnings():         # the fixtures' cells have no ids
            warnings.simplefilter("ignore")
            body, _ = exporter.from_notebook_node(nbformat.reads(json.dumps(nb), as_version=4))
        pages[name] = folder / f"{Path(name).stem}.html"
        pages[name].write_text(body)
    return pages


# Settles with the page's address once the page in the tab has loaded (its load event has
# fired), or after %(limit_ms)d ms.
PAGE_LOADED = """
new Promise(resolve => {
  if (document.readyState === 'complete') {
    resolve(location.href);
  } else {
    window.addEventListener('load', () => resolve(location.href));
    setTimeout(() => resolve(location.href), %(limit_ms)d);
  }
})
"""


def read_pages(browser: Chromium, pages: dict[str, Path]) -> dict[str, dict]:
    """{name: what a reader of the nbconvert page sees (as READ_PAGE), or {"error": why}}:
    the pages one after the other in one tab (a page that fails gets a fresh tab), each read
    once loaded, or after READ_S seconds."""
    seen = {}
    tab = None
    try:
        for name, page in pages.items():
            try:
                if tab is None:
                    tab = browser.open_tab(page.as_uri(), width=1400, height=TAB_HEIGHT)
                else:
                    browser.navigate(page.as_uri(), tab[1])
                shown = browser.evaluate(PAGE_LOADED % {"limit_ms": READ_S * 1000}, tab[1],
                                         await_promise=True)
                if shown != page.as_uri():
                    raise BrowserError(f"the tab shows {shown}, not {page.as_uri()}")
                seen[name] = browser.evaluate(READ_PAGE, tab[1])
            except BrowserError as e:
                seen[name] = {"error": str(e)}
                if tab is not None:
                    target, tab = tab[0], None
                    browser.close_tab(target)
    finally:
        if tab is not None:
            browser.close_tab(tab[0])
    return seen


def markdown_only(nb: dict) -> dict:
    """``nb`` with its markdown cells only: what a renderer makes of a markdown cell does not
    depend on the other cells, and code cells with their outputs cost most of the time."""
    return {**nb, "cells": [c for c in nb["cells"] if c["cell_type"] == "markdown"]}


def as_in_notebook(seen: dict, nb: dict) -> dict:
    """What was read of ``markdown_only(nb)``, one entry per cell of ``nb`` (a code cell's:
    None, or no codes, references or directives)."""
    if "error" in seen:
        return seen
    markdown = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"]
    if len(seen["before"]) != len(markdown):
        return {"error": f"{len(seen['before'])} cells shown, the notebook has "
                         f"{len(markdown)} markdown cells"}
    full = {k: v for k, v in seen.items() if not isinstance(v, list)}
    for key, values in seen.items():
        if isinstance(values, list):
            column = [None if key in ("before", "after") else []] * len(nb["cells"])
            for i, value in zip(markdown, values):
                column[i] = value
            full[key] = column
    return full


# --- what the notebook says should be seen -----------------------------------------------------

# A solution: the portable dropdown (scripts/portable_markdown.py), or a {solution} directive
# as the older convention and the broken fixture write it.
SOLUTION = re.compile(r"^(?P<fence>:{3,}|`{3,})(?:\{solution\}|\{dropdown\} Solution)[^\n]*\n"
                      r"(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)


GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)")


def solution_phrases(source: str) -> list[str]:
    """For each ``{solution}`` in a markdown cell's source, the longest run of plain words in
    its body (letters, spaces, commas: text that renders as itself in any renderer), or ""
    where the body has none of at least three words."""
    phrases = []
    for m in SOLUTION.finditer(source):
        body = "\n".join(line for line in m.group("body").splitlines()
                         if not line.startswith((":", "<")))
        runs = [r.strip(" ,") for r in re.findall(r"[A-Za-z][A-Za-z ,]*", body)]
        runs = [r for r in runs if len(r.split()) >= 3]
        phrases.append(max(runs, key=len) if runs else "")
    return phrases


def flat(text: str | None) -> str:
    return " ".join((text or "").split())


def problems(nb: dict, seen: dict, *, kind: str) -> list[str]:
    """What a reader of ``nb`` would meet, given what the browser read (see READ_NOTEBOOKS and
    READ_PAGE) in ``kind``: "myst" (JupyterLab with jupyterlab-myst), "plain" (without it) or
    "nbconvert" (nbconvert's HTML)."""
    if "error" in seen:
        return [seen["error"]]
    found = []
    cells = nb["cells"]
    if len(seen["before"]) != len(cells):
        return [f"{kind} shows {len(seen['before'])} cells, the notebook has {len(cells)}"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        before, after = flat(seen["before"][i]), flat(seen["after"][i])
        where = f"cells[{i}] ({flat(source)[:50]!r}...)"
        prose = after                        # without inline code, where syntax is shown
        for code in sorted(seen["codes"][i], key=len, reverse=True):
            if flat(code):
                prose = prose.replace(flat(code), " ")
        for raw in (RAW if kind == "myst" else RAW_PLAIN):
            if raw in prose:
                at = prose.index(raw)
                found.append(f"{where}: raw {raw!r}: ...{prose[max(0, at - 40):at + 60]}...")
        if kind == "myst":
            for ref in seen["unresolved"][i]:
                found.append(f"{where}: unresolved reference, {flat(ref)}")
            # jupyterlab-myst shows a {glue:text} role as its label, without a warning
            for label in GLUE_ROLE.findall(source):
                if label in after:
                    found.append(f"{where}: shows the glue label {label!r}, not the number")
        else:
            for m in ROLE_PLAIN.finditer(prose):
                found.append(f"{where}: raw role {m.group(0)!r}: "
                             f"...{prose[max(0, m.start() - 40):m.end() + 60]}...")
            for m in TARGET.finditer(seen["after"][i] or ""):
                found.append(f"{where}: raw target line {m.group(0).strip()!r}")
            for m in COMMENT.finditer(seen["after"][i] or ""):
                found.append(f"{where}: raw comment line {m.group(0).strip()!r}")
            for directive in seen["codeDirectives"][i]:
                found.append(f"{where}: the directive {directive} is shown as a code block")
        for phrase in solution_phrases(source):
            if not phrase:
                continue
            if phrase in before:
                found.append(f"{where}: a solution is readable before any click: {phrase!r}")
            elif phrase not in after:
                found.append(f"{where}: a solution is not readable after clicking its box: "
                             f"{phrase!r}")
        numbers = cell.get("metadata", {}).get("attncore", {}).get("numbers", {})
        for label, text in numbers.items():
            if flat(text) not in after:
                found.append(f"{where}: the run's number {label} = {text!r} is not in the text")
    return found


# --- the runs ---------------------------------------------------------------------------------

# What each reading reads: with jupyterlab-myst the chosen chapters, without MyST all of them.
READ = {"myst": [*FIXTURES, *(nb.name for nb in CHAPTERS)],
        "plain": [*FIXTURES, *(nb.name for nb in ALL_CHAPTERS)],
        "nbconvert": [*FIXTURES, *(nb.name for nb in ALL_CHAPTERS)]}


@pytest.fixture(scope="module")
def reading(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """{"myst": {name: seen}, "plain": {name: seen}, "nbconvert": {name: seen}} for the
    chapters and fixtures of READ, from two JupyterLab servers (started together), nbconvert,
    and one browser."""
    if not JUPYTER.exists():
        pytest.fail(f"no {JUPYTER}: create the course environment (./scripts/lab does)")
    root = tmp_path_factory.mktemp("notebooks")
    notebooks = {name: _notebook(name) for name in {*READ["myst"], *READ["plain"]}}
    for name in READ["myst"]:
        (root / name).write_text(json.dumps(notebooks[name]))
    (root / "markdown").mkdir()
    for name in READ["plain"]:
        (root / "markdown" / name).write_text(json.dumps(markdown_only(notebooks[name])))
    with ExitStack() as stack:
        labs = {}
        for kind in ("myst", "plain"):
            lab = JupyterLab(root, tmp_path_factory.mktemp(f"jupyter-{kind}"),
                             myst=kind == "myst")
            stack.callback(lab.stop)
            labs[kind] = lab
        try:
            browser = Chromium(timeout=NOTEBOOK_S + 15, background_throttling=False,
                               virtual_time=False)
        except BrowserError as e:
            pytest.fail(str(e))
        stack.enter_context(browser)
        # (run first on the way out: the servers shut down while the browser closes)
        stack.callback(lambda: [lab.terminate() for lab in labs.values()])
        # nbconvert works while the servers start, and the browser reads its pages while the
        # JupyterLab tabs read on their own
        converting = stack.enter_context(ThreadPoolExecutor(1)).submit(
            nbconvert_pages, {name: notebooks[name] for name in READ["nbconvert"]},
            tmp_path_factory.mktemp("nbconvert"))
        pages = {}
        for lab in labs.values():
            lab.wait_until_up()
        seen = read_notebooks(
            browser, labs, {"myst": READ["myst"],
                            "plain": [f"markdown/{n}" for n in READ["plain"]]},
            meanwhile=lambda: pages.update(read_pages(browser, converting.result())))
        seen["plain"] = {n: as_in_notebook(seen["plain"][f"markdown/{n}"], notebooks[n])
                         for n in READ["plain"]}
        seen["nbconvert"] = {name: as_in_notebook(read, notebooks[name])
                             for name, read in pages.items()}
        # what the servers run once the notebooks are closed: no kernel (none was started)
        for kind, lab in labs.items():
            with urllib.request.urlopen(f"{lab.url}/api/kernels", timeout=10) as answer:
                seen[kind]["kernels"] = json.load(answer)
        return seen


def _notebook(name: str) -> dict:
    if name in FIXTURES:
        return json.loads(json.dumps(FIXTURES[name]()))
    return json.loads((ROOT / "chapters" / name).read_text())


@pytest.mark.browser
@pytest.mark.parametrize("name", [nb.name for nb in CHAPTERS])
def test_chapter_reads_right_with_jupyterlab_myst(reading, name):
    found = problems(_notebook(name), reading["myst"][name], kind="myst")
    assert not found, f"{name} in JupyterLab with jupyterlab-myst:\n" + "\n".join(found)


@pytest.mark.browser
@pytest.mark.parametrize("name", [nb.name for nb in ALL_CHAPTERS])
def test_chapter_hides_solutions_without_myst(reading, name):
    found = problems(_notebook(name), reading["plain"][name], kind="plain")
    assert not found, f"{name} in JupyterLab without MyST:\n" + "\n".join(found)


@pytest.mark.browser
@pytest.mark.parametrize("name", [nb.name for nb in ALL_CHAPTERS])
def test_chapter_hides_solutions_in_nbconvert_html(reading, name):
    found = problems(_notebook(name), reading["nbconvert"][name], kind="nbconvert")
    assert not found, f"{name} in nbconvert's HTML:\n" + "\n".join(found)


def test_chapters_to_read():
    assert set(SUBSET) <= {nb.name for nb in ALL_CHAPTERS}, "a chapter of SUBSET was renamed"
    assert CHAPTERS, f"ATTNCORE_LAB_CHAPTERS={_chosen!r} names no chapter"


@pytest.mark.browser
def test_no_kernel_is_left_running(reading):
    for kind in ("myst", "plain"):
        assert reading[kind]["kernels"] == [], (kind, reading[kind]["kernels"])


@pytest.mark.browser
def test_the_checks_pass_on_a_notebook_that_follows_the_conventions(reading):
    nb = _notebook("conventions.ipynb")
    for kind in ("myst", "plain", "nbconvert"):
        seen = reading[kind]["conventions.ipynb"]
        assert not problems(nb, seen, kind=kind), kind
        # and the solutions were found, hidden, clicked open and read
        assert seen.get("clicked", 0) >= 2, (kind, seen)
        after = " ".join(flat(t) for t in seen["after"] if t)
        for text in notebook_fixtures.SOLUTION_TEXTS:
            assert text in after, (kind, text)


@pytest.mark.browser
def test_the_checks_catch_each_break_of_the_conventions(reading):
    # Guards the tests above against passing vacuously: each break in the broken fixture is
    # reported where a reader would meet it.
    nb = _notebook("broken.ipynb")
    cell = {kind: i for i, kind in enumerate(notebook_fixtures.BROKEN)}
    found = {kind: problems(nb, reading[kind]["broken.ipynb"], kind=kind)
             for kind in ("myst", "plain", "nbconvert")}

    def reported(kind: str, where: str, words: str) -> bool:
        return any(f.startswith(f"cells[{cell[where]}] ") and words in f for f in found[kind])

    def check(kind: str, where: str, words: str) -> None:
        assert reported(kind, where, words), (kind, where, words, "\n".join(found[kind]))

    check("myst", "glue role", "shows the glue label 'fixture-loss'")
    check("myst", "cite role", "Citation Not Found")
    check("myst", "reference to a missing label", "Cross Reference Not Found")
    check("myst", "numref of a figure made by code", "Cross Reference Not Found")
    check("myst", "number missing from its cell", "fixture-loss = '1.84'")
    for kind in ("plain", "nbconvert"):
        # Without MyST a backtick-fenced directive is a code block, the bare solution is
        # readable at once (with MyST both render, the solution as a closed dropdown), and
        # labels, roles, targets and comment lines show as text.
        check(kind, "backtick directive", "{admonition} is shown as a code block")
        check(kind, "solution outside details", "readable before any click")
        check(kind, "glue role", "raw role '{glue:text}'")
        check(kind, "reference to a missing label", "raw role '{prf:ref}'")
        check(kind, "label option", "raw ':label:'")
        check(kind, "target line", "raw target line '(sec-fixture-shown)='")
        check(kind, "solution in comment lines", "raw comment line '%")
        check(kind, "number missing from its cell", "fixture-loss = '1.84'")
    # The older wrapping holds in JupyterLab's own renderer (the browser parses the cell's
    # HTML as one piece) but not in nbconvert's HTML, which closes the <details> at the end
    # of its paragraph: the solution is readable at once.
    check("nbconvert", "solution in comment lines", "readable before any click")
    assert not reported("plain", "solution in comment lines", "readable before any click")


# --- every chapter, from its source -------------------------------------------------------------

def source_problems(nb: dict) -> list[str]:
    """What the conventions forbid and a reader would see (scripts/portable_markdown.py
    --check): a directive in a backtick fence (a code block without MyST), a role (text
    without MyST; jupyterlab-myst leaves {cite} and {glue:text} as labels), an option line, a
    target line, a comment line, a link to a label that no markdown of this notebook defines,
    a solution that is not a dropdown opening with its <details> block."""
    return portable_markdown.notebook_problems(nb)


@pytest.mark.parametrize("name", [nb.name for nb in ALL_CHAPTERS])
def test_every_chapter_is_written_as_the_browser_check_expects(name):
    found = source_problems(_notebook(name))
    assert not found, f"{name}:\n" + "\n".join(found)


def test_the_source_check_agrees_with_the_fixtures():
    assert not source_problems(_notebook("conventions.ipynb"))
    found = source_problems(_notebook("broken.ipynb"))
    cell = {kind: i for i, kind in enumerate(notebook_fixtures.BROKEN)}
    for where, words in (("backtick directive", "backtick fence"),
                         ("glue role", "{glue:text} role"), ("cite role", "{cite} role"),
                         ("numref of a figure made by code", "{numref} role"),
                         ("reference to a missing label", "{prf:ref} role"),
                         ("solution outside details", "a {solution} directive"),
                         ("solution in comment lines", "a MyST comment line"),
                         ("label option", "a :label: option"),
                         ("target line", "(sec-fixture-shown)= target")):
        assert any(f.startswith(f"cells[{cell[where]}]: ") and words in f for f in found), \
            (where, words, found)


@pytest.mark.browser
def test_the_browser_reaches_loopback_and_nothing_else(tmp_path):
    # The JupyterLab checks need Chromium to reach 127.0.0.1; any other address, a literal
    # IP included, must still be refused.
    import functools
    import http.server
    import threading

    (tmp_path / "index.html").write_text("<html><body>served on loopback</body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # (the browser that reads JupyterLab: live pages only, without the compositor flags
        # of pages read in virtual time)
        with Chromium(timeout=30, virtual_time=False) as browser:
            assert not set(headless_chromium.VIRTUAL_TIME_FLAGS) & set(browser._flags)
            with pytest.raises(BrowserError, match="live pages only"):
                browser.open(f"http://127.0.0.1:{server.server_port}/")
            target, session = browser.open_tab(f"http://127.0.0.1:{server.server_port}/")
            for _ in range(100):
                text = browser.evaluate("document.body ? document.body.innerText : ''", session)
                if text:
                    break
                time.sleep(0.1)
            assert text == "served on loopback"
            browser.close_tab(target)
            for url in ("http://example.org/", "http://93.184.215.14/", "http://10.0.0.1/"):
                with pytest.raises(BrowserError, match="ERR_"):
                    browser.open_tab(url)
    finally:
        server.shutdown()
        server.server_close()
