"""Give each page every inline script once.

sphinx-thebe and sphinx-togglebutton register inline configuration scripts (``const
THEBE_JS_URL = ...``) while the HTML builder already exists; Sphinx 7.4 then records them
twice (once with filename ``None``, once with ``''``), and a page that declares a ``const``
twice throws a SyntaxError in the browser. This extension drops the second copy of any script
with the same source and attributes.
"""

from __future__ import annotations

from sphinx.application import Sphinx


def _dedupe(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        attributes = dict(getattr(js, "attributes", {}))
        # An inline script is recorded once with filename None and once with '': same script.
        key = (getattr(js, "filename", js) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def setup(app: Sphinx) -> dict:
    # Late priority: run after the extensions that add scripts in html-page-context.
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
