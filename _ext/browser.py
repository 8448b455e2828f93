"""Which Chromium-family browser the course drives: one lookup for the tests and the PDF.

The site checks (tests/headless_chromium.py) and the book's PDF (_ext/book_pdf.py) drive a
headless Chromium-family browser: Chromium, Google Chrome, or the headless shell of either.
:func:`find_browser` looks, in this order, at

1. the environment variable ``ATTNCORE_BROWSER``: the path of the browser's program (or a
   name on ``PATH``); when it is set, nothing else is tried, and a value that names no file,
   or a program that does not say it is Chromium or Chrome when asked for its version, is an
   error naming the variable and what was found;
2. the headless shells ``chromium-headless-shell`` and ``chrome-headless-shell`` on ``PATH``
   (Debian's package; Google's Chrome for Testing build): the same Blink that renders a
   page in Chromium, without the browser's windows and user interface, which neither the
   checks nor the print use; it costs less (measured on 2026-11-29 on 2 cores, five of the
   site's pages at a phone's width: 17-21 s of the machine's CPU in Debian's shell, 26-31 s
   in Debian's ``chromium --headless``, 3-4 s of that in a renderer for the address bar's
   pop-up, which no page shows);
3. ``chromium``, ``chromium-browser``, ``google-chrome`` and ``google-chrome-stable`` on
   ``PATH`` (Debian's package, Ubuntu's and Fedora's names, Google's package; GitHub's
   Ubuntu runners have ``google-chrome``);
4. the usual macOS applications: Google Chrome, then Chromium, in ``/Applications``.

Nothing here downloads a browser. The standard library only: Sphinx's extensions and the
tests import it, and ``_ext/book_pdf.py`` runs it as a script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["BrowserNotFound", "ENV", "SHELLS", "NAMES", "MACOS", "find_browser",
           "browser_or_none"]

ENV = "ATTNCORE_BROWSER"
SHELLS = ("chromium-headless-shell", "chrome-headless-shell")
NAMES = (*SHELLS, "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MACOS = ("/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
         "/Applications/Chromium.app/Contents/MacOS/Chromium")
# What `--version` prints: "Chromium 156.0.8078.108 built on Debian ...",
# "Google Chrome 131.0.6778.85", "Chromium 130.0.6723.116 snap".
FAMILY = ("Chromium", "Google Chrome", "Chrome for Testing")
VERSION_TIMEOUT_S = 20.0


class BrowserNotFound(RuntimeError):
    """No Chromium-family browser was found, or ``ATTNCORE_BROWSER`` names none."""


def _version(program: str) -> str:
    """What ``program --version`` prints, or an error that says why it could not be read
    (never a hang: a program that does not answer in time is stopped)."""
    try:
        done = subprocess.run([program, "--version"], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BrowserNotFound(f"{ENV}={program!r}: `{program} --version` did not answer in "
                              f"{VERSION_TIMEOUT_S:.0f} s; expected a Chromium-family browser "
                              f"(Chromium or Google Chrome)") from None
    except OSError as err:
        raise BrowserNotFound(f"{ENV}={program!r}: cannot run it ({err.strerror or err}); "
                              f"expected the path of a Chromium-family browser's program "
                              f"(Chromium or Google Chrome)") from None
    return (done.stdout or done.stderr).strip()


def _from_env(value: str) -> str:
    path = Path(value).expanduser()
    program = str(path) if path.is_file() else shutil.which(value)
    if program is None:
        what = "a folder" if path.is_dir() else "no such file" if not path.exists() \
            else "not a regular file"
        raise BrowserNotFound(f"{ENV}={value!r}: {what}; expected the path of a "
                              f"Chromium-family browser's program (Chromium or Google "
                              f"Chrome), e.g. {ENV}=/usr/bin/chromium")
    if not os.access(program, os.X_OK):
        raise BrowserNotFound(f"{ENV}={value!r}: {program} is not executable; expected the "
                              f"path of a Chromium-family browser's program")
    version = _version(program)
    if not any(version.startswith(name) or f" {name} " in f" {version} " for name in FAMILY):
        shown = version.splitlines()[0][:120] if version else "nothing"
        raise BrowserNotFound(f"{ENV}={value!r}: `{program} --version` printed {shown!r}, "
                              f"not a Chromium-family browser (Chromium or Google Chrome)")
    return program


def find_browser() -> str:
    """The program of the Chromium-family browser to drive (see the module's description).

    Returns
    -------
    str : the program's path.

    Raises
    ------
    BrowserNotFound
        ``ATTNCORE_BROWSER`` names no program, or one that is not Chromium or Chrome; or,
        without it, none of the names and paths tried exists (the message lists them and
        says how to set the variable).
    """
    value = os.environ.get(ENV, "").strip()
    if value:
        return _from_env(value)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    for app in MACOS:
        if Path(app).is_file():
            return app
    raise BrowserNotFound(
        f"no Chromium-family browser found: tried {', '.join(NAMES)} on PATH and "
        f"{' and '.join(MACOS)}; install Chromium's headless shell or Chromium (Debian: "
        f"`apt-get install chromium-headless-shell`) or Google Chrome, or set {ENV} to the "
        f"browser's program, e.g. "
        f"{ENV}=/usr/bin/chromium")


def browser_or_none() -> tuple[str | None, str]:
    """``(program, "")``, or ``(None, why)`` where :func:`find_browser` raises."""
    try:
        return find_browser(), ""
    except BrowserNotFound as err:
        return None, str(err)


if __name__ == "__main__":            # prints the browser's program, or why there is none
    import sys

    program, why = browser_or_none()
    print(program or why, file=sys.stdout if program else sys.stderr)
    sys.exit(0 if program else 1)
