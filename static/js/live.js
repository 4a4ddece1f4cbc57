// A websocket that reconnects with backoff and says whether the page is live or stale.
// live(path, onMessage, onStatus) -> {close()}; onStatus gets "live", "stale" or "closed".
(function () {
  "use strict";
  const FORBIDDEN = 4403;

  window.crawlhubLive = function live(path, onMessage, onStatus) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    let socket = null, delay = 500, stopped = false, timer = null;
    const status = onStatus || function () {};

    function connect() {
      socket = new WebSocket(scheme + location.host + path);
      socket.onopen = function () { delay = 500; status("live"); };
      socket.onmessage = function (event) { onMessage(JSON.parse(event.data)); };
      socket.onclose = function (event) {
        if (stopped || event.code === FORBIDDEN) { status("closed"); return; }
        status("stale");
        timer = setTimeout(connect, delay);
        delay = Math.min(delay * 2, 15000);
      };
    }
    connect();
    return { close: function () { stopped = true; clearTimeout(timer); if (socket) socket.close(); } };
  };
})();
