// Show a hidden code cell's source when its toggle is first opened (no network: the code
// comes from the page's own script in _static/hidden-code, written by
// book/_ext/mha_site/hidden_code.py).
//
// A chapter's hidden inputs (the code behind a figure or a computed paragraph) are closed
// until the reader opens them, so the page leaves their code out and loads it on demand:
// the page is smaller, and its first paint comes sooner. The code gets the copy button that
// sphinx-copybutton gives the page's other code (a copy of one of them, pointed at this code;
// its clipboard handler listens on the whole document). Before printing, every hidden cell
// is filled, so that an opened one prints its code.
(function () {
  "use strict";

  var lists = {}; // script url -> {promise of the list of code blocks, its resolve}

  // The page's code script calls this with the url the page names it by (a script, not JSON
  // fetched, loads from file:// too).
  window.mhaHiddenCode = function (url, list) {
    if (lists[url]) {
      lists[url].resolve(list);
    }
  };

  function codes(url) {
    if (!lists[url]) {
      var entry = {};
      entry.promise = new Promise(function (resolve, reject) {
        entry.resolve = resolve;
        var tag = document.createElement("script");
        tag.src = url;
        tag.addEventListener("error", function () {
          tag.remove();
          reject(new Error("no response from " + url));
        });
        document.head.appendChild(tag);
      });
      lists[url] = entry;
    }
    return lists[url].promise;
  }

  function addCopyButtons(slot) {
    var model = document.querySelector("button.copybtn[data-clipboard-target]");
    if (!model) {
      return;
    }
    slot.querySelectorAll("div.highlight pre").forEach(function (pre, index) {
      var next = pre.nextElementSibling;
      if (next && next.classList.contains("copybtn")) {
        return;
      }
      pre.id = pre.id || "mha-hidden-" + slot.dataset.mhaIndex + "-" + index;
      var button = model.cloneNode(true);
      button.setAttribute("data-clipboard-target", "#" + pre.id);
      pre.insertAdjacentElement("afterend", button);
    });
  }

  function fill(slot) {
    if (!slot || slot.dataset.mhaFilled) {
      return;
    }
    slot.dataset.mhaFilled = "1";
    codes(slot.dataset.mhaCode)
      .then(function (list) {
        slot.innerHTML = list[Number(slot.dataset.mhaIndex)];
        // A code block may scroll sideways: reachable by keyboard at once (the theme sets the
        // tab stops of the page's code only 300 ms after the page last changed).
        slot.querySelectorAll("pre").forEach(function (pre) {
          pre.tabIndex = 0;
        });
        addCopyButtons(slot);
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
