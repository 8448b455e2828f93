// Inline math wider than the line it sits in gets its own horizontal scroll box (see
// attncore-site.css); the rest keeps its baseline. Runs once MathJax has typeset the page,
// and again when the window changes width.
(function () {
  "use strict";
  function markWideMath() {
    document.querySelectorAll("mjx-container:not([display='true'])").forEach(function (m) {
      m.classList.remove("attncore-wide");
      var parent = m.parentElement;
      if (!parent) return;
      var room = parent.getBoundingClientRect().right;
      var viewport = document.documentElement.clientWidth;
      if (m.getBoundingClientRect().right > Math.min(room, viewport) + 1) {
        m.classList.add("attncore-wide");
      }
    });
  }
  function whenTypeset(tries) {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(markWideMath);
    } else if (document.querySelector("script[src*='mathjax' i]") && (tries || 0) < 200) {
      setTimeout(function () { whenTypeset((tries || 0) + 1); }, 50);   // not loaded yet
    } else {
      markWideMath();
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
