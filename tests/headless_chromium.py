"""Render pages in one headless Chromium, driven through its DevTools pipe, with no network.

Starting Chromium costs about a second of CPU and the site has over a dozen pages, so one
browser renders them all, each in a tab of its own (or, through :meth:`Chromium.open_each`,
in one of two tabs that navigate from page to page), with the switches a one-page
``chromium --headless --dump-dom --virtual-time-budget=20000`` run gets. For each page
:meth:`Chromium.render` returns

- the DOM that such a run prints: the page runs for 20 s of virtual time (its clock paused
  while files load, its timers fast-forwarded), and MathJax, if the page loads it, has then
  finished typesetting (its startup promise is awaited, not assumed), and
- the errors the page reported: uncaught exceptions (syntax errors included),
  ``console.error`` and ``console.assert`` calls, and the browser's own error entries for
  the page (a file that failed to load, a request refused because the network is off).

Reading the console through the protocol is the point: Chromium's ``--enable-logging`` writes
every console message as ``INFO:CONSOLE``, whatever its level, so a ``console.error`` in the
log cannot be told from a ``console.log``.

The DevTools protocol runs over ``--remote-debugging-pipe``: JSON messages, each ended by a
NUL byte, that Chromium reads on its file descriptor 3 and writes on 4 (no websocket, no
port).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_ext"))
from browser import browser_or_none  # noqa: E402  (the one lookup, shared with the PDF)

# Chromium or Google Chrome: $ATTNCORE_BROWSER, else the usual names and places.
CHROMIUM, NO_BROWSER = browser_or_none()

# No GPU, no network (every host resolves to nothing and any proxy use goes nowhere; only a
# server on this machine's loopback address, such as a JupyterLab a test starts, is reached),
# no background traffic; pages opened from disk may load the site's other files.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
         "--proxy-server=http://127.0.0.1:9",
         "--allow-file-access-from-files"]

# For pages read in virtual time (render, open, open_each): each frame waits until every
# stage of the compositor has run, so that what the page draws keeps up with its clock. A
# browser for live pages only (Chromium(virtual_time=False): JupyterLab, read in real time)
# goes without: jupyterlab-myst then rendered a chapter's cells in bursts seconds apart, and
# the JupyterLab file's reading took 126-152 s with it against 64-69 s without (two runs
# each, on 2 cores).
VIRTUAL_TIME_FLAGS = ["--run-all-compositor-stages-before-draw"]

# What Chromium does to a tab that is not in front, and (Chromium(background_throttling=False))
# does not: timers slowed to once a second and less, the renderer's process given a lower
# priority, a hidden window's rendering paused.
UNTHROTTLED = ["--disable-background-timer-throttling", "--disable-renderer-backgrounding",
               "--disable-backgrounding-occluded-windows"]

# Virtual milliseconds a page runs before it is read, as chromium --virtual-time-budget=20000.
VIRTUAL_TIME_MS = 20000

# The page as --dump-dom prints it.
DOM = """(document.doctype ? new XMLSerializer().serializeToString(document.doctype) + "\\n"
                          : "") + document.documentElement.outerHTML"""

# Settles with "" once MathJax, if the page loads it, has typeset the page (MathJax 3's
# startup promise resolves after the first typesetting), or with why it did not.
TYPESET_DONE = """
new Promise(resolve => {
  const start = Date.now();
  (function wait() {
    const mj = window.MathJax;
    if (!document.querySelector('script[src*="mathjax" i]')) {
      resolve("");                              // no MathJax on this page
    } else if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(() => resolve(""),
                              e => resolve("MathJax failed: " + e));
    } else if (Date.now() - start > %(limit_ms)d) {
      resolve("MathJax did not start within %(limit_ms)d ms");
    } else {
      setTimeout(wait, 20);                     // its script has not run yet
    }
  })();
})
"""


class BrowserError(RuntimeError):
    """Chromium could not be started, did not answer in time, or failed a command."""


class Chromium:
    """One headless Chromium; :meth:`render` loads a page in a fresh tab.

    Use it as a context manager: leaving the block closes the browser, and kills it (with
    every process it started) if it does not close.
    """

    def __init__(self, timeout: float = 120.0, *, background_throttling: bool = True,
                 virtual_time: bool = True):
        """``background_throttling=False``: a tab in the background runs its timers and
        renders at full speed, as the one in front does, so that pages that work on their
        own (JupyterLab) can be driven side by side. ``virtual_time=False``: a browser for
        live pages only (:meth:`open_tab`, :meth:`navigate`), started without
        VIRTUAL_TIME_FLAGS; :meth:`render`, :meth:`open` and :meth:`open_each` then raise
        :class:`BrowserError`."""
        if CHROMIUM is None:
            raise BrowserError(f"{NO_BROWSER} (scripts/test installs Debian's "
                               f"chromium-headless-shell when run as root)")
        self.timeout = timeout
        self.virtual_time = virtual_time
        self._flags = (FLAGS + (VIRTUAL_TIME_FLAGS if virtual_time else [])
                       + ([] if background_throttling else UNTHROTTLED))
        self._proc: subprocess.Popen | None = None
        self._start()

    # --- the process ---------------------------------------------------------------------

    def _start(self) -> None:
        self._profile = tempfile.TemporaryDirectory()
        self._log = tempfile.TemporaryFile()
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        self._pipes = (self._to_browser, self._from_browser)

        def as_fds_3_and_4() -> None:                       # in the child, before exec
            # dup2 leaves the copies inheritable; going through descriptors above 9 keeps a
            # pipe end that is itself 3 or 4 from being closed by the other dup2.
            read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
            os.close(read_end)
            os.close(write_end)

        try:
            self._proc = subprocess.Popen(
                [CHROMIUM, *self._flags, f"--user-data-dir={self._profile.name}",
                 "--remote-debugging-pipe", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                # its own process group, so that the browser and its helpers can be killed
                # together; close_fds=False lets 3 and 4 through to exec (Python opens its
                # own files non-inheritable, so little else does)
                start_new_session=True, preexec_fn=as_fds_3_and_4, close_fds=False,
                env={**os.environ, "HOME": self._profile.name})
        except BaseException:
            self._stop()
            raise
        finally:
            os.close(to_browser_r)
            os.close(from_browser_w)

    def _stop(self) -> None:
        """Ask the browser to close, give it 10 s, then kill what is left of its process
        group; close the pipes and remove the profile. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    self._send("Browser.close")
                except OSError:
                    pass
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)         # helpers left behind, if any
            except ProcessLookupError:
                pass
            if proc.poll() is None:
                proc.wait()
        # (forgotten once closed: a second close could hit a number reused by another file)
        fds, self._pipes = self._pipes, ()
        for fd in fds:
            os.close(fd)
        self._log.close()
        self._profile.cleanup()

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def log(self) -> str:
        """What Chromium wrote to its stdout and stderr."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    # --- the protocol --------------------------------------------------------------------

    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self, deadline: float, waiting_for: str) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"Chromium did not answer {waiting_for} within "
                                   f"{self.timeout:.0f} s")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium exited while we waited for {waiting_for}:\n"
                                       f"{self.log()[-3000:]}")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send a command and return its result (events that arrive meanwhile are kept)."""
        if self._proc is None:
            raise BrowserError("the browser is closed")
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._receive(deadline, method)
            if message.get("id") == wanted:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:                          # an event, not a stale answer
                self._events.append(message)

    def wait_for(self, method: str, session: str) -> dict:
        """The first event ``method`` of ``session``, kept or still to come."""
        deadline = time.monotonic() + self.timeout
        seen = 0
        while True:
            for event in self._events[seen:]:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            seen = len(self._events)
            message = self._receive(deadline, method)
            if "method" in message:
                self._events.append(message)

    # --- pages ---------------------------------------------------------------------------

    def render(self, page: Path, *, width: int | None = None) -> tuple[str, list[str]]:
        """The DOM of ``page`` after its scripts have run, and the errors they reported.

        ``width``: the viewport's width in CSS pixels, as on a phone (mobile emulation:
        the page's viewport meta tag is honoured); by default the browser's own window.

        Raises :class:`BrowserError` if the browser fails or does not answer in time; the
        next call then starts a fresh browser, so one bad page does not fail the others.
        """
        with self.open(page, width=width) as tab:
            return tab.dom(), tab.errors()

    def open(self, page: Path | str, *, width: int | None = None, height: int = 900) -> "Tab":
        """``page`` (a file, or the URL of a server on this machine) settled in a fresh tab
        (as :meth:`render` sees it), left open to be inspected and driven with the keyboard;
        use the tab as a context manager."""
        self._virtual_time_needed()
        if self._proc is None:
            self._start()
        try:
            return self._open(page, width, height)
        except (BrowserError, OSError):
            self._stop()
            raise

    def open_tab(self, url: str, *, width: int = 1400, height: int = 1000,
                 new_window: bool = False) -> tuple[str, str]:
        """Open ``url`` in a new tab with a ``width`` x ``height`` viewport; return the tab's
        target and session ids (for :meth:`evaluate` and :meth:`close_tab`). Unlike
        :meth:`open`, the page's clock runs in real time (a live server's page, JupyterLab,
        keeps working): wait for what the page does with :meth:`evaluate`.

        ``new_window``: the tab in a window of its own, where it stays in front (visible)
        when another tab opens: a page hidden behind another gets no animation frames,
        which JupyterLab waits for to draw. (See also ``background_throttling``.)"""
        if self._proc is None:
            self._start()
        target = self.call("Target.createTarget",
                           {"url": "about:blank", **({"newWindow": True} if new_window else {})}
                           )["targetId"]
        session = self.call("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        self.call("Runtime.enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session)
        navigation = self.call("Page.navigate", {"url": url}, session)
        if navigation.get("errorText"):
            raise BrowserError(f"{url}: {navigation['errorText']}")
        return target, session

    def navigate(self, url: str, session: str) -> None:
        """Load ``url`` in the tab of ``session`` (from :meth:`open_tab`), in place of its
        page: cheaper than a fresh tab, which starts a renderer. The clock runs in real time,
        as in :meth:`open_tab`; raises :class:`BrowserError` where the page cannot load."""
        navigation = self.call("Page.navigate", {"url": url}, session)
        if navigation.get("errorText"):
            raise BrowserError(f"{url}: {navigation['errorText']}")

    def close_tab(self, target: str) -> None:
        self.call("Target.closeTarget", {"targetId": target})

    def evaluate(self, expression: str, session: str, *, await_promise: bool = False) -> Any:
        """The value of the JavaScript ``expression`` in the tab of ``session`` (a promise
        awaited if ``await_promise``); an exception in the page is a BrowserError."""
        return self._evaluate(expression, session, await_promise=await_promise)

    def _evaluate(self, expression: str, session: str, *, await_promise: bool = False) -> Any:
        answer = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": await_promise}, session)
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            raise BrowserError(details.get("exception", {}).get("description")
                               or details.get("text", "the page's script failed"))
        return answer["result"].get("value")

    def open_each(self, pages: Iterable[Path], *, width: int | None = None, height: int = 900,
                  at_once: int = 2) -> Iterator[tuple[Path, "Tab | BrowserError"]]:
        """Each of ``pages`` settled in a tab, as :meth:`open` gives it, in their order:
        yields ``(page, tab)``, the tab's page there until the next page is asked for.

        Up to ``at_once`` pages load at a time, each in a tab of its own: while the caller
        inspects one tab, the next pages already load and typeset in the others (each tab's
        renderer is a process of its own, so they use the other cores while Python waits).
        The ``at_once`` tabs are opened once and each page is navigated to in one of them,
        in place of the page before it, which costs the browser less than a fresh tab per
        page (measured on 2026-11-29 on 2 cores: five of the site's pages, 33-34 s of
        Chromium's CPU in fresh tabs, 28 s in two tabs reused; tests/test_site_browser.py
        whole, 240 s and 174 s). The page's errors
        are those reported after it was navigated to (:meth:`_begin`). A page the browser
        fails on is yielded with the :class:`BrowserError` in place of its tab; the browser
        is then started afresh for the pages after it, which are loaded again.
        """
        self._virtual_time_needed()
        queue = list(pages)
        free: list[tuple[str, str]] = []                 # (target, session) of idle tabs
        started: list[tuple[Path, str, str]] = []       # (page, target, session), in order
        failed: dict[Path, BrowserError] = {}           # pages to report in their turn
        try:
            while queue or started:
                page = tab = None
                try:
                    if self._proc is None:
                        self._start()
                        free.clear()
                    while queue and len(started) < at_once and queue[0] not in failed:
                        page = queue[0]
                        reuse = free.pop(0) if free else None
                        started.append((page, *self._begin(page, width, height, window=True,
                                                           tab=reuse)))
                        queue.pop(0)
                    if started:
                        page, target, session = started[0]
                        tab = self._finish(target, session)
                        started.pop(0)
                except (BrowserError, OSError) as e:
                    self._stop()
                    if page is None:                # the browser did not start
                        raise
                    # reported in its turn; the pages begun before it are loaded again
                    failed[page] = e if isinstance(e, BrowserError) else BrowserError(str(e))
                    queue[:0] = [p for p, _, _ in started]
                    started.clear()
                    continue
                if tab is None:                     # the next page is one that failed
                    page = queue.pop(0)
                    yield page, failed.pop(page)
                    continue
                try:
                    yield page, tab
                finally:
                    if self._proc is not None:
                        free.append((target, session))      # the next page goes there
                    else:       # the caller's probe failed and stopped the browser
                        queue[:0] = [p for p, _, _ in started]
                        started.clear()
        finally:        # done, or the caller stopped early: close the tabs
            try:
                if self._proc is not None:
                    for target in [t for t, _ in free] + [t for _, t, _ in started]:
                        self.close_tab(target)
            except (BrowserError, OSError):
                self._stop()                # the next call starts a fresh browser

    def _virtual_time_needed(self) -> None:
        if not self.virtual_time:
            raise BrowserError("this browser reads live pages only (Chromium(virtual_time="
                               "False)): open them with open_tab")

    def _open(self, page: Path | str, width: int | None, height: int) -> "Tab":
        self._events.clear()            # events of tabs closed earlier are of no interest
        return self._finish(*self._begin(page, width, height))

    def _begin(self, page: Path | str, width: int | None, height: int, *,
               window: bool = False, tab: tuple[str, str] | None = None) -> tuple[str, str]:
        """A tab with ``page`` navigated to and its virtual time running: the tab's target
        and session ids. ``window``: a fresh tab in a window of its own, so that it stays
        visible beside others (a tab behind another is hidden: no animation frames).
        ``tab``: the (target, session) of a tab that :meth:`_begin` opened before, where
        ``page`` replaces the page that was there; what that page reported is dropped."""
        if tab is None:
            target = self.call("Target.createTarget", {"url": "about:blank",
                                                       "newWindow": window})["targetId"]
            session = self.call("Target.attachToTarget",
                                {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable", session=session)
            if width is not None:
                self.call("Emulation.setDeviceMetricsOverride",
                          {"width": width, "height": height, "deviceScaleFactor": 1,
                           "mobile": True}, session)
        else:
            target, session = tab
        self._events = [e for e in self._events if e.get("sessionId") != session]
        # What --virtual-time-budget does for --dump-dom: the page's clock stands still
        # while files load, and its timers are fast-forwarded through VIRTUAL_TIME_MS, so
        # the page settles (banners revealed, deferred work and its errors done) in far
        # less real time. The budget starts once the page, not about:blank, is in the tab.
        self.call("Emulation.setVirtualTimePolicy", {"policy": "pause"}, session)
        url = page if isinstance(page, str) else page.as_uri()
        navigation = self.call("Page.navigate", {"url": url}, session)
        if navigation.get("errorText"):
            raise BrowserError(f"{page}: {navigation['errorText']}")
        committed = self.wait_for("Page.frameNavigated", session)
        # What the tab's previous page reported while it was being replaced is not this
        # page's: only the events from the new page's commit on are kept.
        mark = self._events.index(committed)
        self._events = [e for i, e in enumerate(self._events)
                        if i >= mark or e.get("sessionId") != session]
        self.call("Emulation.setVirtualTimePolicy",
                  {"policy": "pauseIfNetworkFetchesPending", "budget": VIRTUAL_TIME_MS},
                  session)
        return target, session

    def _finish(self, target: str, session: str) -> "Tab":
        """The tab of :meth:`_begin` once its budget of virtual time is spent and MathJax,
        if the page loads it, has typeset it."""
        self.wait_for("Emulation.virtualTimeBudgetExpired", session)
        # Then, with the clock running again, make sure MathJax has finished typesetting
        # rather than trusting that the budget was enough.
        self.call("Emulation.setVirtualTimePolicy", {"policy": "advance"}, session)
        limit_ms = int(self.timeout * 1000 / 2)
        problem = self._evaluate(TYPESET_DONE % {"limit_ms": limit_ms}, session,
                                 await_promise=True)
        return Tab(self, target, session, problem)


# Key events as a keyboard sends them (the DevTools protocol's names and key codes).
KEYS = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowUp": 38, "ArrowDown": 40, " ": 32,
        "Tab": 9, "Enter": 13, "Home": 36, "End": 35}


class Tab:
    """One settled page in the browser (from :meth:`Chromium.open`)."""

    def __init__(self, browser: Chromium, target: str, session: str, problem: str):
        self._browser, self._target, self._session = browser, target, session
        self._problem = problem

    def evaluate(self, expression: str, *, await_promise: bool = False) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited if asked)."""
        try:
            return self._browser._evaluate(expression, self._session,
                                           await_promise=await_promise)
        except (BrowserError, OSError):
            self._browser._stop()
            raise

    def dom(self) -> str:
        return self.evaluate(DOM)

    def press(self, key: str) -> None:
        """Press and release ``key`` on the focused element, as a real keyboard does (the
        browser's default actions follow: a range input moves, a checkbox toggles)."""
        code = {" ": "Space"}.get(key, key)
        event = {"key": key, "code": code, "windowsVirtualKeyCode": KEYS[key],
                 "nativeVirtualKeyCode": KEYS[key]}
        text = {"text": key} if key == " " else {}
        self._browser.call("Input.dispatchKeyEvent", {"type": "keyDown", **event, **text},
                           self._session)
        self._browser.call("Input.dispatchKeyEvent", {"type": "keyUp", **event},
                           self._session)

    def errors(self) -> list[str]:
        """What the page reported so far: exceptions, console errors, failed loads."""
        errors = [_error_text(e) for e in self._browser._events
                  if e.get("sessionId") == self._session and _is_error(e)]
        if self._problem:
            errors.append(self._problem)
        return errors

    def close(self) -> None:
        if self._browser._proc is not None:
            self._browser.call("Target.closeTarget", {"targetId": self._target})

    def __enter__(self) -> "Tab":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_error(event: dict) -> bool:
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        return True
    if method == "Runtime.consoleAPICalled":
        return params.get("type") in ("error", "assert")
    if method == "Log.entryAdded":
        return params.get("entry", {}).get("level") == "error"
    return False


def _error_text(event: dict) -> str:
    params = event["params"]
    if event["method"] == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        exception = details.get("exception", {})
        text = exception.get("description") or details.get("text", "")
        return f"{text} ({details.get('url', '')}:{details.get('lineNumber', '')})"
    if event["method"] == "Runtime.consoleAPICalled":
        words = " ".join(str(a.get("value", a.get("description", a.get("type", ""))))
                         for a in params.get("args", []))
        return f"console.{params.get('type')}: {words}"
    entry = params["entry"]
    return f"{entry.get('source')}: {entry.get('text')} ({entry.get('url', '')})"
