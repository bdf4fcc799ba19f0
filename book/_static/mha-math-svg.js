/* Draw each formula of the page as it comes near the screen.

   The site typesets every formula when it is built (MathJax's SVG). The formulas of a page's
   first screen are drawn in the page; every other formula is in the page too, with its
   assistive MathML (what screen readers read) and an empty <svg> of the
   drawing's size (so nothing moves when it is drawn), marked `data-mha-svg` with its index.
   The drawings and the glyph shapes they use are in the page's own script
   (_static/math/<page>.js, deferred before this one: it sets `window.mhaMathSvg`, and loads
   from file:// too). This script puts each drawing back when its formula comes within a
   screen of the viewport, and every drawing before the page is printed.
*/
(() => {
  "use strict";
  const data = window.mhaMathSvg;
  const waiting = () => document.querySelectorAll("svg[data-mha-svg]");
  if (!data || !waiting().length) return;
  let glyphsAdded = false;

  function addGlyphs() {
    if (glyphsAdded) return;
    glyphsAdded = true;
    let cache = document.getElementById("MJX-SVG-global-cache");
    if (!cache) {
      document.body.insertAdjacentHTML(
        "beforeend",
        '<svg style="display: none;" id="MJX-SVG-global-cache"><defs></defs></svg>',
      );
      cache = document.getElementById("MJX-SVG-global-cache");
    }
    cache.querySelector("defs").insertAdjacentHTML("beforeend", data.glyphs);
  }

  function draw(svg) {
    if (!svg.hasAttribute("data-mha-svg")) return;
    addGlyphs();
    svg.innerHTML = data.drawings[Number(svg.getAttribute("data-mha-svg"))];
    svg.removeAttribute("data-mha-svg");
  }

  function drawAll() {
    waiting().forEach(draw);
  }

  if ("IntersectionObserver" in window) {
    const observer = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (entry.isIntersecting) {
            draw(entry.target);
            observer.unobserve(entry.target);
          }
        }
      },
      { rootMargin: "100% 0px" },
    );
    waiting().forEach((svg) => observer.observe(svg));
  } else {
    drawAll();
  }
  window.addEventListener("beforeprint", drawAll);
  if (window.matchMedia) {
    window.matchMedia("print").addEventListener("change", (query) => query.matches && drawAll());
  }
})();
