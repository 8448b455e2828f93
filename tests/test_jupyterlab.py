"""The chapters read right in JupyterLab, with jupyterlab-myst and with its plain renderer.

The test starts JupyterLab from the course environment (``.venv/bin/jupyter lab``, as
``./scripts/lab`` does) on a free loopback port with no token, opens chapters in headless
Chromium (tests/headless_chromium.py, allowed to reach 127.0.0.1 and nothing else) and reads
what the reader sees: the text of each rendered markdown cell (the CodeMirror editor that holds
the cell's source is hidden and not read), before and after a click on every collapsed box.

With jupyterlab-myst (what ./scripts/lab and Binder give):

- no directive or role is left as raw text (``:::{``, ``{prf:``, ``:label:`` ...);
- no reference is unresolved (jupyterlab-myst shows one as its label behind a warning icon,
  a ``span.text-yellow-600`` titled "Cross Reference Not Found" or "Citation Not Found");
- every solution is hidden until its box is clicked, and readable after the click;
- every number that a markdown cell's metadata ``attncore.numbers`` says comes from the run
  is in the cell's rendered text.

With jupyterlab-myst disabled (JupyterLab's own CommonMark renderer, what Colab, VS Code and
plain Jupyter show), every solution is still hidden until its ``<summary>`` is clicked.

Each check is also run on two small notebooks from notebook_fixtures.py: one that follows the
conventions (every check passes) and one that breaks each of them (every break is reported).

The two JupyterLab servers run from a temporary configuration of their own (no change to the
shared environment): a JUPYTER_CONFIG_DIR with the notebook's windowing mode "none" (so that
JupyterLab renders every cell, not only those in view), for the plain one a page_config.json
that disables jupyterlab-myst (JUPYTER_PREFER_ENV_PATH=0 gives that directory precedence over
the environment's own page_config.json, which locks the extension on), and no kernel: the
notebooks are read, not run, so no kernel is started. The notebooks are copies in a temporary
folder, so JupyterLab writes nothing into the repository.
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

import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

import notebook_fixtures
from headless_chromium import BrowserError, Chromium

ROOT = Path(__file__).resolve().parents[1]
JUPYTER = ROOT / ".venv" / "bin" / "jupyter"
ALL_CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# Reading a chapter costs Chromium 1.5-6 s of CPU with jupyterlab-myst and 1-3 s without
# (measured on a 2-core machine), about 90 s for all eleven with both servers; so the suite
# reads the first chapter (what "how to use this book" promises) and chapter 2, which has
# every kind of content (proofs, figures, exercises with code and prose solutions, numbers
# from the run, citations), and test_every_chapter_is_written_as_the_browser_check_expects
# checks the source of every chapter for what the browser would show wrong.
# ATTNCORE_LAB_CHAPTERS=all reads every chapter (or a comma-separated list of notebook
# names, those); do that before trusting a change to how chapters are written.
SUBSET = ("00_how_to_use.ipynb", "02_why_sqrt_dk.ipynb")
# A folder (existing) for a screenshot of each notebook as first rendered, in each JupyterLab
# (myst-NAME.png, plain-NAME.png): what a person looks at before trusting the checks.
SCREENSHOTS = os.environ.get("ATTNCORE_LAB_SCREENSHOTS", "")
_chosen = os.environ.get("ATTNCORE_LAB_CHAPTERS", "")
CHAPTERS = [nb for nb in ALL_CHAPTERS
            if (_chosen == "all" or nb.name in (_chosen.split(",") if _chosen else SUBSET))]
FIXTURES = {"conventions.ipynb": notebook_fixtures.conventions_notebook,
            "broken.ipynb": notebook_fixtures.broken_notebook}

# What a reader must never see in a rendered markdown cell: MyST syntax left as text.
RAW = (":::{", "```{", "{prf:", "{glue", "{cite", "{numref", "{doc}", "{ref}", "{eq}",
       ":label:", ":class:")

# Time limits, seconds: the server's start, one notebook's rendering, and all the reading:
# READ_S for each notebook a server shows (about 2 to 15 s each on a busy 2-core machine).
START_S, NOTEBOOK_S, READ_S = 60, 120, 40


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
                json.dumps({"disabledExtensions": {"jupyterlab-myst": True}}))
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

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down, were there any), 15 s, then kill
        its process group (the server's own, not yet reaped, so the id is still its)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
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
READ_NOTEBOOKS = r"""
window.attncoreRead = {};
window.attncoreDone = false;
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
      const start = Date.now();
      let last = null;
      while (Date.now() - start < %(limit_ms)d) {
        dismiss();
        const now = texts();
        // rendered: a node with text for every markdown cell that has a source
        const done = now.every((t, i) => cells()[i].model.type !== 'markdown' ||
            (t !== null && (t.trim() !== '' ||
                            cells()[i].model.sharedModel.source.trim() === '')));
        const key = JSON.stringify(now);
        if (done && key === last) return now;
        last = done ? key : null;
        await sleep(250);
      }
      throw new Error('the notebook did not finish rendering within %(limit_ms)d ms');
    };
    try {
      const before = await settle();
      const renderedMs = Date.now() - start;
      if (%(pause)s) {                  // let the test take a screenshot first
        window.attncoreShow = path;
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
})().finally(() => { window.attncoreDone = true; });
"""


def read_notebooks(browser: Chromium, labs: dict[str, JupyterLab],
                   names: list[str]) -> dict[str, dict[str, dict]]:
    """{kind: {name: what the reader sees, or {"error": why}}}: each server read in a tab of
    its own, one after the other (a tab in the background is throttled), all within READ_S
    seconds a notebook."""
    limit = READ_S * len(names) * len(labs)
    deadline = time.monotonic() + limit
    seen = {}
    for kind, lab in labs.items():
        target, session = browser.open_tab(f"{lab.url}/lab", width=1400, height=4000)
        try:
            browser.evaluate(APP_READY % {"limit_ms": START_S * 1000}, session,
                             await_promise=True)
            browser.evaluate(READ_NOTEBOOKS % {"names": json.dumps(names),
                                               "limit_ms": NOTEBOOK_S * 1000,
                                               "pause": json.dumps(bool(SCREENSHOTS))},
                             session)
            while (not browser.evaluate("window.attncoreDone", session)
                   and time.monotonic() < deadline):
                shown = SCREENSHOTS and browser.evaluate("window.attncoreShow", session)
                if shown and shown != browser.evaluate("window.attncoreShown", session):
                    shot = browser.call("Page.captureScreenshot", {"format": "png"}, session)
                    path = Path(SCREENSHOTS) / f"{kind}-{Path(shown).stem}.png"
                    path.write_bytes(base64.b64decode(shot["data"]))
                    browser.evaluate(f"window.attncoreShown = {json.dumps(shown)}", session)
                time.sleep(0.25)
            seen[kind] = browser.evaluate("window.attncoreRead", session)
        finally:
            browser.close_tab(target)
        for name in names:
            seen[kind].setdefault(name, {"error": f"not read within the test's {limit} s"})
    return seen


# --- what the notebook says should be seen -----------------------------------------------------

SOLUTION = re.compile(r"^(?P<fence>:{3,}|`{3,})\{solution\}[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$",
                      re.M | re.S)


GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)")


def solution_phrases(source: str) -> list[str]:
    """For each ``{solution}`` in a markdown cell's source, the longest run of plain words in
    its body (letters, spaces, commas: text that renders as itself in any renderer), or ""
    where the body has none of at least three words."""
    phrases = []
    for m in SOLUTION.finditer(source):
        body = "\n".join(line for line in m.group("body").splitlines()
                         if not line.startswith(":"))
        runs = [r.strip(" ,") for r in re.findall(r"[A-Za-z][A-Za-z ,]*", body)]
        runs = [r for r in runs if len(r.split()) >= 3]
        phrases.append(max(runs, key=len) if runs else "")
    return phrases


def flat(text: str | None) -> str:
    return " ".join((text or "").split())


def problems(nb: dict, seen: dict, *, myst: bool) -> list[str]:
    """What a reader of ``nb`` would meet, given what the browser read (see READ_NOTEBOOKS)."""
    if "error" in seen:
        return [seen["error"]]
    found = []
    cells = nb["cells"]
    if len(seen["before"]) != len(cells):
        return [f"JupyterLab shows {len(seen['before'])} cells, the notebook has {len(cells)}"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        before, after = flat(seen["before"][i]), flat(seen["after"][i])
        where = f"cells[{i}] ({flat(source)[:50]!r}...)"
        if myst:
            prose = after                    # without inline code, where syntax is shown
            for code in sorted(seen["codes"][i], key=len, reverse=True):
                if flat(code):
                    prose = prose.replace(flat(code), " ")
            for raw in RAW:
                if raw in prose:
                    at = prose.index(raw)
                    found.append(f"{where}: raw {raw!r}: ...{prose[max(0, at - 40):at + 60]}...")
            for ref in seen["unresolved"][i]:
                found.append(f"{where}: unresolved reference, {flat(ref)}")
            # jupyterlab-myst shows a {glue:text} role as its label, without a warning
            for label in GLUE_ROLE.findall(source):
                if label in after:
                    found.append(f"{where}: shows the glue label {label!r}, not the number")
        else:
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

@pytest.fixture(scope="module")
def reading(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """{"myst": {name: seen}, "plain": {name: seen}} for every chapter and fixture, from two
    JupyterLab servers (started together) and one browser."""
    if not JUPYTER.exists():
        pytest.fail(f"no {JUPYTER}: create the course environment (./scripts/lab does)")
    root = tmp_path_factory.mktemp("notebooks")
    for nb in CHAPTERS:
        shutil.copy(nb, root / nb.name)
    for name, make in FIXTURES.items():
        notebook_fixtures.write(make(), root / name)
    names = [*FIXTURES, *(nb.name for nb in CHAPTERS)]
    with ExitStack() as stack:
        labs = {}
        for kind in ("myst", "plain"):
            lab = JupyterLab(root, tmp_path_factory.mktemp(f"jupyter-{kind}"),
                             myst=kind == "myst")
            stack.callback(lab.stop)
            labs[kind] = lab
        try:
            browser = Chromium(timeout=NOTEBOOK_S + 15)
        except BrowserError as e:
            pytest.fail(str(e))
        stack.enter_context(browser)
        for lab in labs.values():
            lab.wait_until_up()
        seen = read_notebooks(browser, labs, names)
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
    found = problems(_notebook(name), reading["myst"][name], myst=True)
    assert not found, f"{name} in JupyterLab with jupyterlab-myst:\n" + "\n".join(found)


@pytest.mark.browser
@pytest.mark.parametrize("name", [nb.name for nb in CHAPTERS])
def test_chapter_hides_solutions_without_myst(reading, name):
    found = problems(_notebook(name), reading["plain"][name], myst=False)
    assert not found, f"{name} in JupyterLab without MyST:\n" + "\n".join(found)


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
    for kind in ("myst", "plain"):
        seen = reading[kind]["conventions.ipynb"]
        assert not problems(nb, seen, myst=kind == "myst"), kind
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
    found = problems(nb, reading["myst"]["broken.ipynb"], myst=True)
    report = "\n".join(found)
    cell = {kind: i for i, kind in enumerate(notebook_fixtures.BROKEN)}

    def reported(kind: str, words: str) -> bool:
        return any(f.startswith(f"cells[{cell[kind]}] ") and words in f for f in found)

    assert reported("glue role", "shows the glue label 'fixture-loss'"), report
    assert reported("cite role", "Citation Not Found"), report
    assert reported("reference to a missing label", "Cross Reference Not Found"), report
    assert reported("numref of a figure made by code", "Cross Reference Not Found"), report
    assert reported("number missing from its cell", "fixture-loss = '1.84'"), report
    # Without MyST a backtick-fenced directive is a code block, and the bare solution is
    # readable at once (with MyST both render, the solution as a closed dropdown).
    plain = problems(nb, reading["plain"]["broken.ipynb"], myst=False)
    assert any(f.startswith(f"cells[{cell['backtick directive']}] ")
               and "{admonition} is shown as a code block" in f for f in plain), plain
    assert any(f.startswith(f"cells[{cell['solution outside details']}] ")
               and "readable before any click" in f for f in plain), plain


# --- every chapter, from its source -------------------------------------------------------------

DIRECTIVE_FENCE = re.compile(r"^`{3,}\{", re.M)
ROLES = re.compile(r"\{(cite(?::\w+)?|glue(?::\w+)?|doc)\}`")
# (a figure made by a code cell is labelled in the cell's metadata, not in markdown: a
# {numref} to it is a reference jupyterlab-myst cannot resolve, as one into another document)
REFERENCE = re.compile(r"\{(?:prf:ref|ref|numref)\}`(?:[^`<]*<)?([^`<>]+)>?`")
LABEL = re.compile(r"^:label:[ \t]*(\S+)|^\((\S+)\)=[ \t]*$|^:name:[ \t]*(\S+)", re.M)
WRAPPED = re.compile(r"^% <details><summary>Solution</summary>\n\n(?P<fence>:{3,})\{solution\}"
                     r"[^\n]*\n.*?^(?P=fence)\n\n% </details>$", re.M | re.S)


def source_problems(nb: dict) -> list[str]:
    """What the conventions forbid and a reader would see: a directive in a backtick fence
    (a code block without MyST), a role that jupyterlab-myst leaves as a label ({cite},
    {glue:text}, {doc}, a {ref}, {prf:ref} or {numref} to a label that no markdown of this
    notebook defines: another document's, or a figure's), a solution outside its <details>
    wrapper."""
    found = []
    labels = {next(g for g in m.groups() if g)
              for cell in nb["cells"] if cell["cell_type"] == "markdown"
              for m in LABEL.finditer("".join(cell["source"]))}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        where = f"cells[{i}] ({flat(source)[:50]!r}...)"
        for m in REFERENCE.finditer(source):
            if m.group(1) not in labels:
                found.append(f"{where}: a reference to {m.group(1)!r}, which is not "
                             "labelled in this notebook (jupyterlab-myst cannot resolve it)")
        for m in DIRECTIVE_FENCE.finditer(source):
            found.append(f"{where}: a directive in a backtick fence: "
                         f"{source[m.start():source.find(chr(10), m.start())]!r}")
        for m in ROLES.finditer(source):
            found.append(f"{where}: a {{{m.group(1)}}} role")
        n_solutions = len(SOLUTION.findall(source))
        n_wrapped = len(WRAPPED.findall(source))
        if n_wrapped < n_solutions:
            found.append(f"{where}: {n_solutions - n_wrapped} solution(s) not wrapped in "
                         "% <details><summary>Solution</summary> ... % </details>")
    return found


@pytest.mark.parametrize("name", [nb.name for nb in ALL_CHAPTERS])
def test_every_chapter_is_written_as_the_browser_check_expects(name):
    found = source_problems(_notebook(name))
    assert not found, f"{name}:\n" + "\n".join(found)


def test_the_source_check_agrees_with_the_fixtures():
    assert not source_problems(_notebook("conventions.ipynb"))
    found = "\n".join(source_problems(_notebook("broken.ipynb")))
    for words in ("backtick fence", "{glue:text} role", "{cite} role",
                  "'fig-fixture-made-by-code', which is not",
                  "1 solution(s) not wrapped", "'thm-fixture-nowhere', which is not"):
        assert words in found, (words, found)


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
        with Chromium(timeout=30) as browser:
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
