// Make every sidebar button work: the visible ones open the site navigation and the page's
// contents on a phone, and fold the navigation away on a desktop (no network).
//
// The theme puts two buttons of each kind in the page: a hidden one in its top bar, then the
// one the reader sees in the article's header. Its scripts wire only the first of each kind
// (pydata-sphinx-theme opens the sidebar's dialog from it, sphinx-book-theme folds the
// navigation from it on a wide screen), so a tap on the visible button did nothing: on a
// phone neither the navigation nor the contents could be opened. A click on any later
// button of a kind is handed to the first, which does what the theme meant at every width.
// A link followed from an open sidebar (a phone's contents) closes it: the reader sees the
// place the link leads to, not the sidebar still over it.
(function () {
  "use strict";

  if (window.mhaSidebarToggles) {
    return; // wired once, however many times the script is added
  }
  window.mhaSidebarToggles = true;

  function handOn(kind) {
    var buttons = document.querySelectorAll("." + kind);
    var wired = buttons[0];
    for (var i = 1; i < buttons.length; i++) {
      buttons[i].addEventListener("click", function (event) {
        event.preventDefault();
        event.stopPropagation();
        wired.click();
      });
    }
  }

  function closeOnLink(dialog) {
    if (dialog) {
      dialog.addEventListener("click", function (event) {
        if (dialog.open && event.target.closest && event.target.closest("a[href]")) {
          dialog.close();
        }
      });
    }
  }

  function start() {
    handOn("primary-toggle");
    handOn("secondary-toggle");
    closeOnLink(document.getElementById("pst-primary-sidebar-modal"));
    closeOnLink(document.getElementById("pst-secondary-sidebar-modal"));
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
