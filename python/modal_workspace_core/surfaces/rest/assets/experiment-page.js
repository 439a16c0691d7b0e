// An experiment's page, kept current while its run goes: every few seconds it reads run.json
// beside the page (the same ticket, no token, no cookie) and places what it says as text, never
// as markup (every value may be the workspace's); the plot is fetched again when what it draws
// may have changed. Once the run has ended, or the ticket is refused, it stops.
"use strict";

(() => {
  const body = document.body;
  const page = location.pathname.replace(/\/+$/, "");
  const every = 1000 * Number(body.dataset.refreshSeconds || "3");
  let version = body.dataset.version;
  let drawn = 0;

  const byId = (id) => document.getElementById(id);

  function element(tag, text) {
    const made = document.createElement(tag);
    made.textContent = text;
    return made;
  }

  function show(run) {
    byId("name").textContent = run.name;
    document.title = run.name + " · experiment";
    const state = byId("state");
    state.textContent = run.state;
    state.className = "state " + run.state;
    byId("facts").replaceChildren(
      ...run.facts.flatMap(([term, value]) => [element("dt", term), element("dd", value)]),
    );
    byId("metrics").replaceChildren(
      ...run.metrics.map((cells) => {
        const row = document.createElement("tr");
        row.append(...cells.map((cell) => element("td", cell)));
        return row;
      }),
    );
    byId("no-metrics").hidden = run.metrics.length > 0;
    if (run.version !== version) {
      version = run.version;
      drawn += 1;
      byId("plot").src = page + "/plot.png?drawn=" + drawn;
    }
    body.dataset.state = run.state;
    body.dataset.live = String(run.live);
  }

  async function refresh() {
    let answer;
    try {
      answer = await fetch(page + "/run.json", { cache: "no-store", credentials: "omit" });
    } catch {
      setTimeout(refresh, every); // the network went away for a moment
      return;
    }
    if (answer.status === 403 || answer.status === 404) {
      byId("status").textContent =
        answer.status === 403
          ? "This link has expired: ask for a new one to keep following the run."
          : "This run is no longer available.";
      return;
    }
    if (!answer.ok) {
      setTimeout(refresh, every);
      return;
    }
    const run = await answer.json();
    show(run);
    if (run.live) {
      byId("status").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
      setTimeout(refresh, every);
    } else {
      byId("status").textContent = "The run has ended.";
    }
  }

  if (body.dataset.live === "true") {
    setTimeout(refresh, every);
  }
})();
