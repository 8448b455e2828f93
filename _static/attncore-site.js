// Inline math wider than the line it sits in gets its own horizontal scroll box (see
// attncore-site.css); the rest keeps its baseline. Runs once MathJax has typeset the page,
// and again when the window changes width. And punctuation right after inline math stays on
// the formula's line: a browser may break a line after MathJax's inline box and start the
// next one with ". The width" or ": the first"; the formula and the marks that follow it go
// into one span.attncore-nowrap, inside which no line breaks.
(function () {
  "use strict";
  var PUNCTUATION = /^[.,;:!?)\]\u2019\u201d]+/;
  function keepPunctuationWithMath() {
    document.querySelectorAll("mjx-container:not([display='true'])").forEach(function (m) {
      var next = m.nextSibling;
      var parent = m.parentNode;
      if (!parent || !next || next.nodeType !== Node.TEXT_NODE) return;
      if (parent.classList && parent.classList.contains("attncore-nowrap")) return;
      var marks = PUNCTUATION.exec(next.nodeValue);
      if (!marks) return;
      var glued = document.createElement("span");
      glued.className = "attncore-nowrap";
      parent.insertBefore(glued, m);
      glued.appendChild(m);
      glued.appendChild(document.createTextNode(marks[0]));
      next.nodeValue = next.nodeValue.slice(marks[0].length);
    });
  }
  function markWideMath() {
    document.querySelectorAll("mjx-container:not([display='true'])").forEach(function (m) {
      m.classList.remove("attncore-wide");
      var parent = m.parentElement;
      var glued = parent && parent.classList.contains("attncore-nowrap") ? parent : null;
      if (glued) {
        glued.classList.remove("attncore-nowrap-off");
        parent = glued.parentElement;
      }
      if (!parent) return;
      var room = parent.getBoundingClientRect().right;
      var viewport = document.documentElement.clientWidth;
      var limit = Math.min(room, viewport) + 1;
      if (m.getBoundingClientRect().right > limit) {
        m.classList.add("attncore-wide");
      }
      // A formula that fills its line pushes the marks after it past the edge: there they
      // may wrap after all, rather than widen the page.
      if (glued && glued.getBoundingClientRect().right > limit) {
        glued.classList.add("attncore-nowrap-off");
      }
    });
  }
  function afterTypeset() {
    keepPunctuationWithMath();
    markWideMath();
  }
  function whenTypeset(tries) {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(afterTypeset);
    } else if (document.querySelector("script[src*='mathjax' i]") && (tries || 0) < 200) {
      setTimeout(function () { whenTypeset((tries || 0) + 1); }, 50);   // not loaded yet
    } else {
      afterTypeset();
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { whenTypeset(0); });
  } else {
    whenTypeset(0);
  }
  var timer = null;
  window.addEventListener("resize", function () {
    clearTimeout(timer);
    timer = setTimeout(markWideMath, 100);
  });
})();


// Search results: Sphinx shows a snippet of each page's text, taken from the page's HTML
// before MathJax has run, so a formula would show as its TeX source (\(QK^\top\)). The
// snippet gets each formula as plain text instead (QKᵀ). Sphinx's Search object is defined
// by searchtools.js, which loads after this file: wrap it once the page is parsed.
(function () {
  "use strict";
  var SYMBOLS = {
    top: "\u1d40", times: "\u00d7", cdot: "\u00b7", le: "\u2264", leq: "\u2264",
    ge: "\u2265", geq: "\u2265", ne: "\u2260", neq: "\u2260", approx: "\u2248",
    sim: "\u223c", in: "\u2208", to: "\u2192", rightarrow: "\u2192", infty: "\u221e",
    sum: "\u2211", prod: "\u220f", partial: "\u2202", nabla: "\u2207", dots: "\u2026",
    ldots: "\u2026", cdots: "\u22ef", quad: " ", qquad: "  ", ell: "\u2113",
    alpha: "\u03b1", beta: "\u03b2", gamma: "\u03b3", delta: "\u03b4", epsilon: "\u03b5",
    varepsilon: "\u03b5", theta: "\u03b8", lambda: "\u03bb", mu: "\u03bc", sigma: "\u03c3",
    tau: "\u03c4", phi: "\u03c6", omega: "\u03c9", pi: "\u03c0", rho: "\u03c1",
    Sigma: "\u03a3", Delta: "\u0394", Omega: "\u03a9", log: "log", exp: "exp",
    max: "max", min: "min", left: "", right: "", big: "", Big: "", mid: "|",
    langle: "\u27e8", rangle: "\u27e9", lVert: "\u2016", rVert: "\u2016", "|": "\u2016",
    ",": " ", ";": " ", "!": "", "{": "{", "}": "}"
  };
  var BLACKBOARD = {R: "\u211d", N: "\u2115", Z: "\u2124", E: "\ud835\udd3c", P: "\u2119"};
  function texToText(tex) {
    var t = tex.replace(/^\s*(\\\(|\\\[|\$\$?)/, "").replace(/(\\\)|\\\]|\$\$?)\s*$/, "");
    t = t.replace(/\\mathbb\{(\w)\}/g, function (m, c) { return BLACKBOARD[c] || c; });
    t = t.replace(/\\(?:operatorname|mathrm|mathbf|mathit|text|textbf|boldsymbol)\{([^{}]*)\}/g,
                  "$1");
    t = t.replace(/\\sqrt\{([^{}]*)\}/g, "\u221a$1");
    t = t.replace(/\\frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)");
    t = t.replace(/\\begin\{\w+\*?\}|\\end\{\w+\*?\}|&|\\\\/g, " ");
    t = t.replace(/\\([A-Za-z]+|[|,;!{}])/g, function (m, name) {
      return Object.prototype.hasOwnProperty.call(SYMBOLS, name) ? SYMBOLS[name] : name;
    });
    t = t.replace(/\^\{?\u1d40\}?/g, "\u1d40").replace(/[{}]/g, "");
    return t.replace(/\s+/g, " ").trim();
  }
  window.attncoreTexToText = texToText;
  function wrapSearch() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.attncoreWrapped) return;
    var original = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      var doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".math").forEach(function (el) {
        el.textContent = texToText(el.textContent);
      });
      return original(doc.documentElement.outerHTML, anchor);
    };
    Search.attncoreWrapped = true;
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", wrapSearch);
  } else {
    wrapSearch();
  }
})();
