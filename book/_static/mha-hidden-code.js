// Show a hidden code cell's source when its toggle is first opened (no network: the code
// comes from the page's own JSON file in _static/hidden-code, written by mha_site.py).
//
// A chapter's hidden inputs (the code behind a figure or a computed paragraph) are closed
// until the reader opens them, so the page leaves their code out and loads it on demand:
// the page is smaller, and its first paint comes sooner. Before printing, every hidden cell
// is filled, so that an opened one prints its code.
(function () {
  "use strict";

  var lists = {}; // JSON url -> promise of the list of code blocks

  function codes(url) {
    if (!lists[url]) {
      lists[url] = fetch(url).then(function (response) {
        if (!response.ok) {
          throw new Error(response.status + " " + response.statusText);
        }
        return response.json();
      });
    }
    return lists[url];
  }

  function fill(slot) {
    if (!slot || slot.dataset.mhaFilled) {
      return;
    }
    slot.dataset.mhaFilled = "1";
    codes(slot.dataset.mhaCode)
      .then(function (list) {
        slot.innerHTML = list[Number(slot.dataset.mhaIndex)];
      })
      .catch(function (error) {
        delete slot.dataset.mhaFilled;
        lists[slot.dataset.mhaCode] = null;
        slot.textContent = "The code of this cell could not be loaded (" + error.message + ").";
      });
  }

  // "toggle" does not bubble: listen while it is captured on its way to the <details>.
  document.addEventListener(
    "toggle",
    function (event) {
      var details = event.target;
      if (details.tagName === "DETAILS" && details.open) {
        fill(details.querySelector("[data-mha-code]"));
      }
    },
    true
  );
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("[data-mha-code]").forEach(fill);
  });
})();
