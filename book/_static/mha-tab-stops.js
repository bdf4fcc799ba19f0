/* Tab stops for scrollable blocks, given as each block comes near the screen.

   The theme (pydata-sphinx-theme) gives every code block and cell output that scrolls a tab
   stop, so that a keyboard can scroll it. It measures every such block of the page when the
   page has loaded, and again after every change to the page. Measuring a block lays out the
   page around it, sections far from the screen included (the site lays those out only when
   they come near: content-visibility in mha-site.css), so on a long chapter that one pass held
   a phone's main thread for about two seconds.

   This script runs just before the theme's (both are deferred, so they run in order). It
   takes the theme's pass out as the theme registers it, and gives the same tab stops, by the
   theme's rule, to each block as it comes within a screen of the viewport, to blocks added
   later (hidden code opened, figures drawn) as they come near, and again to the blocks near
   the screen after a resize. `window.mhaTabStops` says which pass runs: "lazy" (this one) or
   "theme" (the theme's own, if a new theme version registers it differently).
*/
(() => {
  "use strict";
  // The blocks the theme gives tab stops to (its selector).
  const SCROLLABLE = [
    "pre",
    ".nboutput > .output_area",
    ".cell_output > .output",
    ".jp-RenderedHTMLCommon",
    ".pst-scrollable-table-container",
  ].join(", ");
  const addListener = window.addEventListener;
  window.mhaTabStops = "theme";

  function restore() {
    window.addEventListener = addListener;
  }

  // The theme's rule: a tab stop where the block's content overflows it.
  function setTabStop(block) {
    const overflows =
      block.scrollWidth > block.clientWidth || block.scrollHeight > block.clientHeight;
    block.tabIndex = overflows ? 0 : -1;
  }

  function lazyTabStops() {
    const main = document.getElementById("main-content");
    if (!main || !("IntersectionObserver" in window)) {
      document.querySelectorAll(SCROLLABLE).forEach(setTabStop);
      return;
    }
    const near = new Set();
    const observer = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (entry.isIntersecting) {
            near.add(entry.target);
            setTabStop(entry.target);
          } else {
            near.delete(entry.target);
          }
        }
      },
      { rootMargin: "100% 0px" },
    );
    const watch = (root) => {
      if (root.matches(SCROLLABLE)) observer.observe(root);
      root.querySelectorAll(SCROLLABLE).forEach((block) => observer.observe(block));
    };
    watch(document.documentElement);
    new MutationObserver((records) => {
      for (const record of records) {
        for (const node of record.addedNodes) {
          if (node.nodeType === Node.ELEMENT_NODE) watch(node);
        }
      }
    }).observe(main, { subtree: true, childList: true });
    let timer = null;
    addListener.call(window, "resize", () => {
      clearTimeout(timer);
      timer = setTimeout(() => near.forEach(setTabStop), 300);
    });
  }

  // The theme registers its pass as a "load" listener that measures scrollWidth.
  window.addEventListener = function (type, listener, options) {
    const isThemePass =
      type === "load" && typeof listener === "function" && /scrollWidth/.test(String(listener));
    if (!isThemePass) return addListener.call(this, type, listener, options);
    restore();
    window.mhaTabStops = "lazy";
    return addListener.call(this, "load", lazyTabStops, options);
  };
  // Deferred scripts have all run by DOMContentLoaded: the theme's registration is past.
  document.addEventListener("DOMContentLoaded", restore, { once: true });
})();
