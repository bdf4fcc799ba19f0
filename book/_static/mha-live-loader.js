// The live model's files, loaded when the reader asks for them: ONNX Runtime Web, the
// model's tokenizer.json and its ONNX graph, from _static/live-minilm/ beside this script.
//
// window.mhaLiveLoader.load(base) loads them once (over http(s) as files, from file:// as the
// scripts the build writes beside them), sets the runtime up (one thread, its wasm from the
// site) and resolves to {manifest, tokenizer (the parsed tokenizer.json), modelBytes,
// session (an ort.InferenceSession)}. Nothing is loaded before load() is called. The build
// (scripts/build_live_model.py) writes the files and their manifest.json; the page that uses
// them is mha-live-minilm.js.
(function () {
  "use strict";

  // The files' folder: live-minilm/ beside this script on the site (.../_static/live-minilm/),
  // or the folder a page names (load(base): a notebook's output, whose scripts are inline).
  var self = document.currentScript;
  var siteBase = self && self.src ? new URL("live-minilm/", self.src).href : null;
  var base = siteBase;

  // Over http(s): the files as they are (the wasm is fetched by the runtime itself).
  function loadOverHttp() {
    return fetchJson(base + "manifest.json").then(function (manifest) {
      return Promise.all([
        loadRuntime(manifest.runtime),
        fetchJson(base + manifest.tokenizer),
        fetchBytes(base + manifest.model),
      ]).then(function (parts) {
        return { manifest: manifest, tokenizer: parts[1], model: parts[2], wasmPaths: base };
      });
    });
  }

  // From a file: a page opened from disk may not fetch() nor import() its neighbours, but it
  // may run classic scripts. The build writes each file also as a script, file/NAME.js, that
  // hands its contents (base64 for binaries) to window.mhaLivePayload; the runtime's module
  // is imported from a blob: URL and its wasm given as bytes.
  var payloads = {};

  window.mhaLivePayload = function (name, data) {
    if (payloads[name]) payloads[name].resolve(data);
  };

  function loadPayload(name) {
    var entry = payloads[name];
    if (!entry) {
      entry = payloads[name] = {};
      entry.promise = new Promise(function (resolve, reject) {
        entry.resolve = resolve;
        var tag = document.createElement("script");
        tag.src = base + "file/" + name + ".js";
        tag.onload = function () {
          tag.remove(); // the data now lives in the promise only
        };
        tag.onerror = function () {
          reject(new Error("could not load " + tag.src));
        };
        document.head.appendChild(tag);
      });
    }
    return entry.promise;
  }

  function fromBase64(text) {
    var binary = atob(text);
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  function loadFromScripts() {
    return loadPayload("manifest.json").then(function (manifest) {
      return Promise.all([
        loadRuntime(manifest.runtime),
        loadPayload(manifest.tokenizer),
        loadPayload(manifest.model),
        loadPayload(manifest.wasm_module),
        loadPayload(manifest.wasm),
      ]).then(function (parts) {
        var module = new Blob([parts[3]], { type: "text/javascript" });
        return {
          manifest: manifest,
          tokenizer: parts[1],
          model: fromBase64(parts[2]),
          wasmPaths: { mjs: URL.createObjectURL(module) },
          wasmBinary: fromBase64(parts[4]),
        };
      });
    });
  }

  function fetchBytes(url) {
    return fetch(url).then(function (response) {
      if (!response.ok) throw new Error("could not load " + url + " (" + response.status + ")");
      return response.arrayBuffer().then(function (buffer) {
        return new Uint8Array(buffer);
      });
    });
  }

  function fetchJson(url) {
    return fetch(url).then(function (response) {
      if (!response.ok) throw new Error("could not load " + url + " (" + response.status + ")");
      return response.json();
    });
  }

  function loadRuntime(name) {
    if (window.ort) return Promise.resolve();
    return new Promise(function (resolve, reject) {
      var tag = document.createElement("script");
      tag.src = base + name;
      tag.onload = resolve;
      tag.onerror = function () {
        reject(new Error("could not load " + tag.src));
      };
      document.head.appendChild(tag);
    });
  }

  // The files, then the runtime set up and the model's session created.
  function load(folder) {
    base = folder ? new URL(folder, location.href).href : siteBase;
    if (!base) return Promise.reject(new Error("no folder of the live model's files was given"));
    var fromFile = location.protocol === "file:";
    return (fromFile ? loadFromScripts() : loadOverHttp()).then(function (parts) {
      var ort = window.ort;
      ort.env.wasm.numThreads = 1; // no cross-origin isolation on a static host
      ort.env.wasm.wasmPaths = parts.wasmPaths;
      if (parts.wasmBinary) ort.env.wasm.wasmBinary = parts.wasmBinary;
      var modelBytes = parts.model.byteLength; // before the runtime takes the bytes
      return ort.InferenceSession.create(parts.model, { executionProviders: ["wasm"] }).then(
        function (session) {
          return {
            manifest: parts.manifest,
            tokenizer: parts.tokenizer,
            modelBytes: modelBytes,
            session: session,
          };
        }
      );
    });
  }

  window.mhaLiveLoader = { load: load };
})();
