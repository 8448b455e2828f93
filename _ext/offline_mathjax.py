"""Serve MathJax 3 from the built site itself, so that math renders with no network.

Sphinx's default ``mathjax_path`` points at a CDN. This extension copies the parts of MathJax
that the CHTML/TeX renderer needs (the combined ``tex-chtml.js``, its fonts, the TeX
extensions it may autoload, and the menu/accessibility modules it loads on demand) from the
``django-static-mathjax`` wheel into ``_static/mathjax/`` and points ``mathjax_path`` there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

# Relative to MathJax's es5/ directory.
_PARTS = ["tex-chtml.js", "output/chtml", "input/tex", "ui", "a11y"]
_TARGET = "mathjax"


def mathjax_es5_dir() -> Path:
    """The es5/ directory of the installed MathJax 3 distribution."""
    try:
        import mathjax  # provided by django-static-mathjax
    except ImportError as exc:
        raise ExtensionError("offline_mathjax: MathJax is not installed; "
                             "pip install -r requirements.txt") from exc
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / "tex-chtml.js").is_file():
        raise ExtensionError(f"offline_mathjax: no tex-chtml.js under {es5}")
    return es5


def _point_to_local_copy(app: Sphinx, config) -> None:
    mathjax_es5_dir()  # fail early, before a long build, if MathJax is missing
    # A relative mathjax_path is resolved against _static/ on every page.
    config.mathjax_path = f"{_TARGET}/tex-chtml.js"


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    es5 = mathjax_es5_dir()
    dest = Path(app.outdir) / "_static" / _TARGET
    for part in _PARTS:
        src = es5 / part
        if src.is_dir():
            shutil.copytree(src, dest / part, dirs_exist_ok=True)
        else:
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / part)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _point_to_local_copy)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
