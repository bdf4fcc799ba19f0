/* Links land on their target, also on a page whose sections are laid out only when near.

   A chapter's sections are laid out and painted only when they come near the screen
   (content-visibility: auto, in mha-site.css). Until then each one counts as its placeholder
   height, so the browser scrolls to where a link's target would be if every section above it
   were that high: thousands of pixels short on a long chapter, and further off as the sections
   between are drawn.

   Before the browser scrolls to a target of this page, this script lays out the sections
   above it and the one that holds it (class mha-laid-out), so that the target's place is the
   one it keeps: on a click on a link to this page (before the browser follows it), when the
   page is opened at an address with a #target (then it scrolls to the target itself, as the
   browser did before the sections were laid out), and when the #target of the address
   changes. Sections below the target are still laid out only when near: the page stays as
   light to open as before. Something above the target may still grow once it is drawn (a
   figure whose data is loaded when near): until the reader scrolls, touches or types, or for
   KEEP_MS, the page follows the target where it lands, as browsers with scroll anchoring do. */
(() => {
  "use strict";
  const SECTIONS = "article.bd-article > section > section";
  const LAID_OUT = "mha-laid-out";
  const BELOW = Node.DOCUMENT_POSITION_FOLLOWING; // the target comes after the section's start

  // The element an address's #fragment names on this page (an id, or an <a name>).
  function targetOf(hash) {
    if (!hash || hash.length < 2) {
      return null;
    }
    let id = hash.slice(1);
    try {
      id = decodeURIComponent(id);
    } catch (error) {
      // a malformed escape: look the fragment up as it is written
    }
    return document.getElementById(id) || document.getElementsByName(id)[0] || null;
  }

  // Lay out every section that starts before the target (those above it and the one that
  // holds it). Returns whether a section was not laid out yet.
  function layOutUpTo(target) {
    let changed = false;
    for (const section of document.querySelectorAll(SECTIONS)) {
      if (section !== target && !(section.compareDocumentPosition(target) & BELOW)) {
        break; // sections come in document order: this one and the rest are below
      }
      if (!section.classList.contains(LAID_OUT)) {
        section.classList.add(LAID_OUT);
        changed = true;
      }
    }
    return changed;
  }

  const KEEP_MS = 8000;
  const READER_ACTS = ["wheel", "touchstart", "keydown", "pointerdown"];
  let release = null;

  // Keep the landed target where it is on the screen while the page above it changes height.
  function keepInPlace(target) {
    if (release) {
      release();
    }
    const article = document.querySelector("article.bd-article");
    if (!article || !("ResizeObserver" in window)) {
      return;
    }
    // where the target landed on the screen; it moves when something above it changes height
    const top = target.getBoundingClientRect().top;
    const follow = new ResizeObserver(() => {
      const moved = target.getBoundingClientRect().top - top;
      if (Math.abs(moved) >= 1) {
        window.scrollBy(0, moved);
      }
    });
    const timer = setTimeout(() => release(), KEEP_MS);
    release = () => {
      follow.disconnect();
      clearTimeout(timer);
      READER_ACTS.forEach((name) => window.removeEventListener(name, release, true));
      release = null;
    };
    READER_ACTS.forEach((name) => window.addEventListener(name, release, true));
    follow.observe(article);
  }

  function withoutFragment(url) {
    return url.split("#")[0];
  }

  // A click on a link to a target of this page: lay out before the browser follows it.
  document.addEventListener(
    "click",
    (event) => {
      const link = event.target instanceof Element && event.target.closest("a[href]");
      if (!link || !link.hash || withoutFragment(link.href) !== withoutFragment(location.href)) {
        return;
      }
      const target = targetOf(link.hash);
      if (release) {
        release(); // the reader goes elsewhere
      }
      if (target) {
        layOutUpTo(target);
        requestAnimationFrame(() => keepInPlace(target)); // once the browser has followed it
      }
    },
    true,
  );

  // The address's #target changed without a click on a link (typed, set by a script): the
  // browser has scrolled already, so scroll again once the sections above are laid out.
  window.addEventListener("hashchange", () => {
    const target = targetOf(location.hash);
    if (target && layOutUpTo(target)) {
      target.scrollIntoView();
    }
    if (target) {
      keepInPlace(target);
    }
  });

  // Opened at an address with a #target. On a reload or a step back through the history the
  // browser restores the reader's own place: then the sections are laid out as they were
  // when the place was kept, and this does not scroll.
  const target = targetOf(location.hash);
  if (target && layOutUpTo(target)) {
    const visit = performance.getEntriesByType("navigation")[0];
    if (!visit || visit.type === "navigate") {
      target.scrollIntoView();
      keepInPlace(target);
    }
  }
})();
