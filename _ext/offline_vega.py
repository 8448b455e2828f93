"""Draw the chapters' interactive Vega-Lite figures with scripts the site serves itself.

The chapters' interactive figures (``attncore.lab.interactive``) are notebook outputs of MIME
type ``application/vnd.vegalite.v5+json``: JupyterLab draws them with its own Vega renderer.
myst-nb has no renderer for that type, so this extension

* registers one with myst-nb: the specification goes into the page as JSON inside
  ``<script type="application/json">`` in a ``<div class="attncore-vega">`` (nothing runs
  from the page's text), and the output's ``embed_options`` go beside it;
* writes ``_static/vega/attncore-vega.js``: Vega, Vega-Lite and vega-embed, bundled by the
  ``vl-convert-python`` wheel (the Vega project's own converter, which carries these
  libraries), wrapped in a function so that nothing but ``vegaEmbed`` and its two libraries
  reaches the page's global scope, followed by the few lines that draw every such div;
* adds that script only to the pages that have a figure.

No file is fetched from anywhere: the bundle is made from the installed wheel at build time.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

VEGALITE_MIME = "application/vnd.vegalite.v5+json"
# The Vega-Lite release the bundle carries. The figures' specifications name no version
# ($schema): each renderer compiles them with its own Vega-Lite (JupyterLab 4 with Vega-Lite
# 5); here Vega-Lite 6, which compiles to Vega 6, the version of the bundle's Vega, so that
# vega-embed finds the versions agree and logs no warning.
VEGALITE_VERSION = "6.4"
SCRIPT = "vega/attncore-vega.js"
_MARK = 'class="attncore-vega"'

# Draws every figure of the page once the page has been parsed, in the page's colours: the
# book theme's dark mode (html[data-theme="dark"]) gets Vega's dark theme, and a switch of
# the mode draws the figures again, with the controls where the reader left them.
_DRAW = """
function attncoreTheme() {
  return document.documentElement.dataset.theme === "dark" ? "dark" : "light";
}
function attncoreDraw(box) {
  var theme = attncoreTheme();
  if (box.dataset.drawn === theme) return;
  var kept = {};
  if (box.attncoreView) {
    (box.attncoreControls || []).forEach(function (name) {
      kept[name] = box.attncoreView.signal(name);
    });
    box.attncoreView.finalize();
  }
  box.dataset.drawn = theme;
  var spec = JSON.parse(box.querySelector("script.attncore-vega-spec").textContent);
  // as wide as the column, whatever the screen (the stored width suits JupyterLab, which
  // draws an output before it is on the page and would measure a container as 0 wide)
  var narrow = false;
  [spec].concat(spec.vconcat || []).forEach(function (view) {
    if (typeof view.width === "number") {
      narrow = narrow || box.clientWidth < view.width;
      view.width = "container";
    }
  });
  // on a phone a long title breaks into lines where the figure says, not off the chart
  // (an expression that returns an array of strings makes a title of several lines)
  var title = spec.title, meta = spec.usermeta || {};
  if (narrow && meta.narrowTitleBreak && title && title.text && title.text.expr)
    title.text = {expr: "split(" + title.text.expr + ", " +
                        JSON.stringify(meta.narrowTitleBreak) + ")"};
  box.attncoreControls = (spec.params || []).filter(function (p) { return p.bind; })
    .map(function (p) { return p.name; });
  var options = Object.assign({mode: "vega-lite"},
                              JSON.parse(box.dataset.embedOptions || "{}"));
  if (theme === "dark") options.theme = "dark";
  var old = box.querySelector("div.attncore-vega-view");
  if (old) old.remove();
  var target = document.createElement("div");
  target.className = "attncore-vega-view";
  box.appendChild(target);
  window.vegaEmbed(target, spec, options).then(function (result) {
    box.attncoreView = result.view;
    Object.keys(kept).forEach(function (name) { result.view.signal(name, kept[name]); });
    return result.view.runAsync();
  }).catch(function (error) { console.error("interactive figure: " + error); });
}
function attncoreDrawFigures() {
  document.querySelectorAll("div.attncore-vega").forEach(attncoreDraw);
}
if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", attncoreDrawFigures);
} else {
  attncoreDrawFigures();
}
new MutationObserver(attncoreDrawFigures).observe(document.documentElement,
                                                  {attributes: true,
                                                   attributeFilter: ["data-theme"]});
"""


def _vl_convert():
    try:
        import vl_convert
    except ImportError as exc:
        raise ExtensionError("offline_vega: vl-convert-python is not installed; "
                             "pip install -r requirements.txt") from exc
    return vl_convert


def _bundle() -> str:
    libraries = _vl_convert().javascript_bundle(vl_version=VEGALITE_VERSION)
    # The bundle declares top-level consts; inside a function they stay private, and only
    # what it assigns to window (vegaEmbed, vega, vegaLite) is global.
    return f"(function () {{\n{libraries}\n}})();\n{_DRAW}"


class VegaLiteRenderer:
    """A myst-nb MIME renderer plugin for Vega-Lite 5 outputs (see the module's docstring)."""

    # before the still picture (image/png, 50) that the output carries for other frontends
    mime_priority_overrides = [(builder, VEGALITE_MIME, 5) for builder in ("html", "singlehtml")]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if data.mime_type != VEGALITE_MIME or inline:
            return None
        spec = data.content if isinstance(data.content, dict) else json.loads(data.content)
        options = (data.output_metadata or {}).get(VEGALITE_MIME, {}).get("embed_options", {})
        # "</" cannot end the script element early once written as "<\/".
        text = json.dumps(spec, ensure_ascii=False, sort_keys=True).replace("</", "<\\/")
        markup = (f'<div {_MARK} data-embed-options="{html.escape(json.dumps(options))}">'
                  f'<script type="application/json" class="attncore-vega-spec">{text}'
                  f"</script></div>")
        return [nodes.raw("", markup, format="html", classes=["output", "vega-lite"])]


def _register(app: Sphinx, config) -> None:
    _vl_convert()                                # fail early, before a long build
    from myst_nb.core import render

    plugins = render.load_mime_renders()         # myst-nb caches this list; add ours to it
    if VegaLiteRenderer not in plugins:
        plugins.append(VegaLiteRenderer)


def _add_script(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if _MARK in context.get("body", ""):
        app.add_js_file(SCRIPT)


def _write_bundle(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    dest = Path(app.outdir) / "_static" / SCRIPT
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(_bundle(), encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _register)
    app.connect("html-page-context", _add_script)
    app.connect("build-finished", _write_bundle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
