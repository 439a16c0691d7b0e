// A workspace's terminal: xterm.js attached over a WebSocket to one exec (terminal_relay.py
// says what the socket carries). The page counts what it has shown (its cursor) and a reconnect
// resumes from there, so nothing is shown twice or lost; a reload starts from 0 and replays the
// exec's output. A page opened to type fits the terminal to its window and resizes the exec's
// pseudo-terminal with it; a page opened to watch takes the exec's size and sends nothing.
// The ticket is in the page's path: the socket gets it in its subprotocol list, never in a URL
// it opens, and each fresh ticket the socket hands over replaces it there (a reload keeps
// working while the page is open).
"use strict";

(() => {
  const writable = document.body.dataset.write === "true";
  const stateLine = document.getElementById("state");
  const term = new Terminal({
    cursorBlink: writable,
    disableStdin: !writable,
    scrollback: 10000,
    fontSize: 14,
    fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace",
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("terminal"));
  // For whoever drives the page (the tests read the screen through it).
  window.terminal = term;

  let cursor = 0;
  let socket = null;
  let ended = false;
  let stopped = false;
  let failures = 0;

  function show(text, kind) {
    stateLine.textContent = text;
    stateLine.className = "state " + kind;
  }

  function ticket() {
    return location.pathname.split("/").pop();
  }

  function socketUrl() {
    const url = new URL("socket", location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    url.search = "?cursor=" + cursor;
    url.hash = "";
    return url.href;
  }

  function send(message) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(message));
    }
  }

  function sendSize() {
    if (writable) {
      send({ type: "resize", rows: term.rows, cols: term.cols });
    }
  }

  function write(bytes) {
    // xterm 4.x takes UTF-8 bytes through writeUtf8 (later versions through write).
    if (typeof term.writeUtf8 === "function") {
      term.writeUtf8(bytes);
    } else {
      term.write(bytes);
    }
  }

  function setOption(name, value) {
    // xterm 4.x sets options through setOption (later versions through `options`).
    if (typeof term.setOption === "function") {
      term.setOption(name, value);
    } else {
      term.options[name] = value;
    }
  }

  function onControl(message) {
    if (message.type === "state") {
      if (message.pty === false) {
        // No terminal behind the exec: its bare line feeds start new lines here.
        setOption("convertEol", true);
      }
      if (message.ended) {
        ended = true;
        const code = message.returncode === null ? message.state : "code " + message.returncode;
        show("ended with " + code, "ended");
      } else if (message.state === "running" || message.state === "starting") {
        show(message.state + (writable ? "" : " · read-only"), "running");
      } else {
        show(message.state, "other");
      }
    } else if (message.type === "size") {
      if (!writable && message.rows > 0 && message.cols > 0) {
        term.resize(message.cols, message.rows);
      }
    } else if (message.type === "ticket") {
      history.replaceState(null, "", new URL(message.ticket, location.href).href);
    } else if (message.type === "error") {
      show(message.message, "failed");
    }
  }

  function connect() {
    const opened = new WebSocket(socketUrl(), ["mwc-terminal", "ticket." + ticket()]);
    opened.binaryType = "arraybuffer";
    socket = opened;
    opened.onopen = () => {
      failures = 0;
      if (writable) {
        fit.fit();
        sendSize();
      }
    };
    opened.onmessage = (event) => {
      if (typeof event.data === "string") {
        onControl(JSON.parse(event.data));
        return;
      }
      const view = new DataView(event.data);
      cursor = Number(view.getBigUint64(0));
      const bytes = new Uint8Array(event.data, 8);
      if (bytes.length > 0) {
        write(bytes);
      }
    };
    opened.onclose = (event) => {
      if (socket !== opened) {
        return;
      }
      socket = null;
      if (ended || stopped) {
        return;
      }
      if (event.code === 1008) {
        stopped = true;
        show(event.reason || "refused", "failed");
        return;
      }
      failures += 1;
      show("reconnecting…", "reconnecting");
      setTimeout(retry, Math.min(500 * 2 ** (failures - 1), 8000));
    };
  }

  async function retry() {
    // A socket refused at its handshake looks like any lost connection: the page's own URL
    // (the same ticket) says whether the link is still good.
    if (failures > 1) {
      try {
        const answer = await fetch(location.href, { cache: "no-store" });
        if (answer.status === 403) {
          stopped = true;
          show("this link has expired: ask for a new one", "failed");
          return;
        }
      } catch (_) {
        // The gateway is unreachable: keep trying.
      }
    }
    connect();
  }

  term.onData((data) => send({ type: "input", data: data }));
  if (typeof term.onBinary === "function") {
    term.onBinary((data) => {
      // Bytes 0-255 as a string (mouse reports): sent as they are, in base64.
      send({ type: "input", data: btoa(data), encoding: "base64" });
    });
  }
  term.onResize(sendSize);
  // Copy with Ctrl+Shift+C (Ctrl+C goes to the program); paste is the browser's own (Ctrl+V,
  // Ctrl+Shift+V or the menu), which xterm turns into input.
  term.attachCustomKeyEventHandler((event) => {
    if (event.type === "keydown" && event.ctrlKey && event.shiftKey && event.code === "KeyC") {
      const selected = term.getSelection();
      if (selected && navigator.clipboard) {
        navigator.clipboard.writeText(selected).catch(() => {});
      }
      return false;
    }
    if (event.type === "keydown" && event.ctrlKey && event.shiftKey && event.code === "KeyV") {
      return false;
    }
    return true;
  });

  let fitting = null;
  window.addEventListener("resize", () => {
    if (!writable) {
      return;
    }
    clearTimeout(fitting);
    fitting = setTimeout(() => fit.fit(), 100);
  });
  if (writable) {
    fit.fit();
  }
  term.focus();
  connect();
})();
