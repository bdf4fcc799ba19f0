// Typeset a page's formulas when they come near the screen, a few at a time (no network).
//
// Only where formulas were not typeset at build time (book/_ext/mha_site/math_typeset.py
// removes this script from pages whose formulas scripts/node/render_math.mjs has typeset):
// pages built without Node, and the PDF's single page.
//
// On the site, MathJax is not in the page: this script's data-mathjax names it, and it is
// loaded when the first formula comes within a screen of the viewport (a page whose formulas
// are further down does not download and run MathJax before the reader gets there). Where
// the page has MathJax itself (the PDF's single page), it is used as it is.
// MathJax (configured with startup.typeset = false in _config.yml) typesets nothing by itself.
// Each formula (.math) of the text is typeset when it comes within a screen of the viewport
// (formulas elsewhere, as in the page's contents, at once); formulas that arrive together are
// typeset in tasks of at most BUDGET_MS each, so that the page keeps responding to the reader
// while a screen of mathematics is drawn. Before printing, every formula left is typeset;
// printing with Ctrl/Cmd+P before MathJax was loaded loads it, typesets everything and prints.
(function () {
  "use strict";

  var script = document.currentScript;
  var MATHJAX_URL = script ? script.getAttribute("data-mathjax") : null;
  var requested = false;

  var NEAR = "100% 0px"; // one screen above and below the viewport
  // Typesetting time per task before the page may respond again: a phone is several times
  // slower than a desktop, and a task over 50 ms there delays the reader.
  var BUDGET_MS = 8;
  var SELECTOR = ".math";

  function isTypeset(el) {
    return !!el.querySelector("mjx-container");
  }

  // MathJax's script is deferred before this one, and sets up MathJax.startup as it runs.
  function whenLoaded(then, tries) {
    var mathjax = window.MathJax;
    if (mathjax && mathjax.startup && mathjax.startup.promise) {
      then(mathjax);
    } else if (tries > 0) {
      setTimeout(whenLoaded, 50, then, tries - 1);
    }
  }

  // A link whose only text is a formula (a heading made of math, in the page's contents) is
  // named by a plain reading of its TeX: the typeset SVG gives assistive technology no name.
  function plainTeX(tex) {
    return tex.replace(/^\\\(|\\\)$/g, "")
      .replace(/\\(mathrm|mathbf|mathit|mathcal|operatorname|boldsymbol|text)\b/g, "")
      .replace(/\\[,;:! ]/g, " ")
      .replace(/\\([A-Za-z]+)/g, " $1 ")
      .replace(/[{}\\]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }

  function nameMathLinks() {
    [].forEach.call(document.querySelectorAll("a"), function (link) {
      var maths = link.querySelectorAll(SELECTOR);
      if (!maths.length || link.hasAttribute("aria-label")) {
        return;
      }
      var words = link.textContent;
      [].forEach.call(maths, function (math) {
        words = words.replace(math.textContent, "");
      });
      if (!words.trim()) {
        link.setAttribute("aria-label", plainTeX(link.textContent));
      }
    });
  }

  // MathJax, loaded now if the page does not have it; then(MathJax) once it has started.
  function withMathJax(then) {
    if (MATHJAX_URL && !requested) {
      requested = true;
      var tag = document.createElement("script");
      tag.src = MATHJAX_URL;
      tag.async = true;
      tag.addEventListener("error", function () {
        console.error("MathJax could not be loaded from " + MATHJAX_URL);
      });
      document.head.appendChild(tag);
    }
    whenLoaded(then, 1200);
  }

  function typesetAll(mathjax, formulas) {
    var left = formulas.filter(function (el) {
      return !isTypeset(el);
    });
    if (left.length) {
      try {
        mathjax.typeset(left);
      } catch (error) {
        console.error(error);
      }
    }
  }

  // Every formula not yet typeset, in the promise form: printing waits for it, and a formula
  // that needs a TeX extension loaded first is typeset too (the synchronous form stops there).
  function typesetLeft(mathjax, formulas) {
    return mathjax.typesetPromise(formulas.filter(function (el) {
      return !isTypeset(el);
    }));
  }

  function start() {
    nameMathLinks();
    var formulas = [].slice.call(document.querySelectorAll(SELECTOR));
    if (!formulas.length) {
      return;
    }
    var begin = function () {
      withMathJax(function (mathjax) {
        typesetNear(mathjax, formulas);
      });
    };
    if (!MATHJAX_URL || !("IntersectionObserver" in window)) {
      begin();
      return;
    }
    // Printing before any formula came near: Ctrl/Cmd+P loads MathJax, typesets and prints.
    document.addEventListener("keydown", function (event) {
      var mathjax = window.MathJax;
      var ready = mathjax && mathjax.startup && mathjax.startup.promise;
      if ((event.ctrlKey || event.metaKey) && event.key === "p" && !ready) {
        event.preventDefault();
        withMathJax(function (loaded) {
          loaded.startup.promise
            .then(function () {
              return typesetLeft(loaded, formulas);
            })
            .catch(function (error) {
              console.error(error);
            })
            .then(function () {
              window.print();
            });
        });
      }
    });
    var near = new IntersectionObserver(
      function (entries) {
        if (entries.some(function (entry) { return entry.isIntersecting; })) {
          near.disconnect();
          begin();
        }
      },
      { rootMargin: NEAR }
    );
    formulas.forEach(function (el) {
      near.observe(el);
    });
  }

  function typesetNear(mathjax, formulas) {
    var queue = [];
    var running = false;

    function next() {
      var began = performance.now();
      function step() {
        while (queue.length && isTypeset(queue[0])) {
          queue.shift();
        }
        if (!queue.length) {
          running = false;
          return undefined;
        }
        if (performance.now() - began > BUDGET_MS) {
          setTimeout(next, 0);
          return undefined;
        }
        return mathjax.typesetPromise([queue.shift()]).then(step, function (error) {
          console.error(error);
          return step();
        });
      }
      return step();
    }

    function run() {
      if (!running && queue.length) {
        running = true;
        setTimeout(next, 0);
      }
    }

    mathjax.startup.promise.then(function () {
      var observer = new IntersectionObserver(function (entries) {
        entries.forEach(function (entry) {
          if (entry.isIntersecting) {
            observer.unobserve(entry.target);
            if (!isTypeset(entry.target)) {
              queue.push(entry.target);
            }
          }
        });
        run();
      }, { rootMargin: NEAR });
      formulas.forEach(function (el) {
        if (isTypeset(el)) {
          return;
        }
        // Formulas outside the chapter's text (headings in the page's contents, which show
        // only when expanded) are few: typeset them now.
        if (el.closest("article")) {
          observer.observe(el);
        } else {
          queue.push(el);
        }
      });
      run();
      window.addEventListener("beforeprint", function () {
        typesetAll(mathjax, formulas);
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
