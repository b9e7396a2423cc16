// Put first in every HTML page the service proxies from a job's TensorBoard. The page runs in an
// opaque origin (Content-Security-Policy: sandbox, without allow-same-origin), where storage and
// document.cookie throw and a worker cannot load a script of the service's origin. TensorBoard needs
// none of them to show its data: storage is kept in memory for the page's life, the cookie is
// empty, and without OffscreenCanvas TensorBoard draws its charts on the page instead of a worker.
(function () {
  function memoryStorage() {
    var m = new Map();
    return {
      get length() { return m.size; },
      key: function (i) { var k = Array.from(m.keys())[i]; return k === undefined ? null : k; },
      getItem: function (k) { k = String(k); return m.has(k) ? m.get(k) : null; },
      setItem: function (k, v) { m.set(String(k), String(v)); },
      removeItem: function (k) { m.delete(String(k)); },
      clear: function () { m.clear(); }
    };
  }
  ["localStorage", "sessionStorage"].forEach(function (name) {
    try { void window[name]; } catch (e) {
      Object.defineProperty(window, name, { value: memoryStorage(), configurable: true });
    }
  });
  try { void document.cookie; } catch (e) {
    Object.defineProperty(document, "cookie", { get: function () { return ""; }, set: function () {}, configurable: true });
  }
  try { delete window.OffscreenCanvas; } catch (e) {}
})();
