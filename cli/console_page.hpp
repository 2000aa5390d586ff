// `outbox console`: the page, its script and its style, served from the binary (no network
// resource, no library from the internet). The script builds every element with textContent, never
// HTML from data, and the Content-Security-Policy allows scripts and styles from the console only.
// Placeholders {{...}} are filled, HTML-escaped, by cli/console.cpp.
#pragma once

namespace outbox::cli {

inline const char *const kLoginHtml = R"HTML(<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>outbox console: sign in</title>
    <link rel="stylesheet" href="/console.css">
  </head>
  <body class="login">
    <main>
      <h1>outbox console</h1>
      <form method="post" action="/login" id="login">
        <label for="token">Token</label>
        <input type="password" name="token" id="token" autocomplete="current-password" required autofocus>
        <button type="submit" id="sign-in">Sign in</button>
        <p class="error" id="login-error">{{MESSAGE}}</p>
      </form>
      <p class="hint">The token is a line of the console's token file (read: view; operator: view and act).</p>
    </main>
  </body>
</html>
)HTML";

inline const char *const kConsoleHtml = R"HTML(<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="csrf" content="{{CSRF}}">
    <meta name="role" content="{{ROLE}}">
    <title>outbox console</title>
    <link rel="stylesheet" href="/console.css">
    <script src="/console.js" defer></script>
  </head>
  <body>
    <header>
      <h1>outbox console</h1>
      <span class="db" title="PostgreSQL (password hidden)">{{DATABASE}}</span>
      <span class="who" id="who">{{USER}} ({{ROLE}})</span>
      <button id="logout" class="plain">Sign out</button>
    </header>
    <p id="status" class="status" role="status"></p>
    <section>
      <h2>Relay</h2>
      <div class="cards" id="relay-cards"></div>
      <div class="plot-row"><span>Relay lag, last hour</span><span id="relay-plot"></span></div>
      <p><button id="retry-all" class="act">Retry every failed event</button></p>
    </section>
    <section>
      <h2>Subscribers</h2>
      <p class="hint">Lag: how far the newest event the subscriber processed is behind the newest event
        published, in the events' time, and at least the age of the oldest aggregate it holds back
        (retrying, redriving or parked); 0 when it is caught up and holds none.</p>
      <table id="subscribers">
        <thead><tr><th>Subscriber</th><th>Lag</th><th>Parked</th><th>Retrying</th><th>Oldest parked</th>
          <th>Lag, last hour</th><th></th></tr></thead>
        <tbody></tbody>
      </table>
    </section>
    <section>
      <h2>Parked aggregates</h2>
      <table id="parked">
        <thead><tr><th>Where</th><th>Aggregate</th><th>State</th><th>Attempts</th><th>Head event</th>
          <th>Waiting</th><th>First failed</th><th>Last error</th><th></th></tr></thead>
        <tbody></tbody>
      </table>
      <p id="parked-empty" class="hint">No parked or retrying aggregates.</p>
    </section>
    <footer id="sampled"></footer>
    <dialog id="confirm">
      <form method="dialog" id="confirm-form">
        <h3 id="confirm-title"></h3>
        <p id="confirm-text"></p>
        <label id="confirm-reason-label" for="confirm-reason">Reason (recorded with your name)
          <textarea id="confirm-reason" rows="3" maxlength="2000"></textarea></label>
        <menu>
          <button type="button" id="confirm-cancel" class="plain">Cancel</button>
          <button type="button" id="confirm-ok" class="danger">Confirm</button>
        </menu>
      </form>
    </dialog>
  </body>
</html>
)HTML";

inline const char *const kConsoleCss = R"CSS(
  * { box-sizing: border-box; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2228; background: #f5f6f8; }
  header { display: flex; gap: 1em; align-items: baseline; padding: .6em 1.2em; background: #1d2a3a; color: #fff; }
  header h1 { font-size: 1.2em; margin: 0; }
  header .db { font-family: monospace; opacity: .8; flex: 1; }
  section { margin: 1em 1.2em; padding: .6em 1em; background: #fff; border: 1px solid #dde1e6; border-radius: 6px; }
  h2 { font-size: 1.05em; margin: .2em 0 .6em; }
  .cards { display: flex; gap: .8em; flex-wrap: wrap; }
  .card { min-width: 9em; padding: .5em .8em; border: 1px solid #dde1e6; border-radius: 6px; }
  .card b { display: block; font-size: 1.5em; }
  .card.bad b { color: #b3261e; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .35em .5em; border-bottom: 1px solid #eceff2; vertical-align: top; }
  th { font-weight: 600; color: #4a5560; }
  td.err { font-family: monospace; white-space: pre-wrap; max-width: 32em; word-break: break-word; color: #7a1d16; }
  td.mono, .mono { font-family: monospace; }
  td.actions { white-space: nowrap; }
  .state-parked { color: #b3261e; font-weight: 600; }
  .state-retrying, .state-redriving { color: #8a5a00; }
  button { font: inherit; padding: .25em .7em; border-radius: 4px; border: 1px solid #1d2a3a; background: #1d2a3a;
    color: #fff; cursor: pointer; margin-right: .3em; }
  button.plain { background: #fff; color: #1d2a3a; }
  button.danger { background: #b3261e; border-color: #b3261e; }
  button:disabled { opacity: .4; cursor: not-allowed; }
  .hint { color: #5d6873; font-size: .92em; }
  .status { margin: .6em 1.2em 0; min-height: 1.4em; }
  .status.ok { color: #1b6e2d; }
  .status.err { color: #b3261e; }
  .plot-row { display: flex; gap: 1em; align-items: center; margin: .6em 0; }
  svg.plot { background: #fafbfc; border: 1px solid #e4e7eb; }
  svg.plot polyline { fill: none; stroke: #2563eb; stroke-width: 1.5; }
  svg.plot text { font-size: 9px; fill: #5d6873; }
  svg.plot line { stroke: #e4e7eb; }
  dialog { border: 1px solid #aab2bb; border-radius: 8px; min-width: 28em; }
  dialog textarea { width: 100%; display: block; margin-top: .3em; }
  dialog menu { display: flex; justify-content: flex-end; gap: .5em; padding: 0; }
  footer { margin: 0 1.2em 1em; color: #5d6873; font-size: .9em; }
  body.login main { max-width: 24em; margin: 12vh auto; background: #fff; padding: 1.5em; border-radius: 8px;
    border: 1px solid #dde1e6; }
  body.login input { width: 100%; margin: .4em 0 .8em; padding: .4em; font: inherit; }
  .error { color: #b3261e; min-height: 1.2em; }
)CSS";

inline const char *const kConsoleJs = R"JS(
  "use strict";
  (function () {
    const csrf = document.querySelector('meta[name="csrf"]').content;
    const canAct = document.querySelector('meta[name="role"]').content === "operator";
    const SVG = "http://www.w3.org/2000/svg";
    let state = null;
    let dialogOpen = false;

    function el(tag, props, ...children) {
      const e = document.createElement(tag);
      Object.entries(props || {}).forEach(([k, v]) => {
        if (k === "className") e.className = v;
        else if (k === "onclick") e.addEventListener("click", v);
        else e.setAttribute(k, v);
      });
      children.forEach((c) => e.append(c instanceof Node ? c : document.createTextNode(String(c))));
      return e;
    }

    function svgEl(tag, attrs) {
      const e = document.createElementNS(SVG, tag);
      Object.entries(attrs).forEach(([k, v]) => e.setAttribute(k, String(v)));
      return e;
    }

    function age(s) {
      if (s === null || s === undefined) return "-";
      s = Math.max(0, Math.round(s));
      if (s < 120) return s + " s";
      if (s < 7200) return Math.round(s / 60) + " min";
      if (s < 172800) return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
      return Math.round(s / 86400) + " d";
    }

    function say(text, ok) {
      const p = document.getElementById("status");
      p.textContent = text;
      p.className = "status " + (ok ? "ok" : "err");
    }

    // A plot of the last hour (or of the samples since the console started, when that is less):
    // x from its left edge to now, y from 0 to the largest value.
    function plot(times, values, now) {
      const w = 300, h = 56, top = 10, bottom = 12;
      const left = Math.min(now - 1, Math.max(now - 3600, times.length ? times[0] : now - 3600));
      const s = svgEl("svg", { class: "plot", width: w, height: h, viewBox: "0 0 " + w + " " + h });
      s.setAttribute("role", "img");
      const pts = [];
      let max = 1;
      values.forEach((v) => { if (v !== null && v > max) max = v; });
      times.forEach((t, i) => {
        if (values[i] === null || t < left) return;
        const x = ((t - left) / (now - left)) * w;
        const y = top + (1 - values[i] / max) * (h - top - bottom);
        pts.push(x.toFixed(1) + "," + y.toFixed(1));
      });
      s.append(svgEl("line", { x1: 0, x2: w, y1: h - bottom, y2: h - bottom }));
      const poly = svgEl("polyline", { points: pts.join(" ") });
      s.append(poly);
      const label = (x, y, text, anchor) => {
        const t = svgEl("text", { x: x, y: y, "text-anchor": anchor });
        t.textContent = text;
        s.append(t);
      };
      label(2, 9, "max " + age(max), "start");
      label(2, h - 2, "-" + age(now - left), "start");
      label(w - 2, h - 2, "now", "end");
      const title = document.createElementNS(SVG, "title");
      title.textContent = "last value " + age(values.length ? values[values.length - 1] : null);
      s.append(title);
      return s;
    }

    async function post(path, body) {
      const r = await fetch(path, {
        method: "POST", credentials: "same-origin", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      });
      const j = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(j.error || "HTTP " + r.status);
      return j;
    }

    // The confirmation step of every action: resolves to the reason typed (or "") or null.
    function ask(title, text, needReason) {
      const d = document.getElementById("confirm");
      document.getElementById("confirm-title").textContent = title;
      document.getElementById("confirm-text").textContent = text;
      const reason = document.getElementById("confirm-reason");
      reason.value = "";
      document.getElementById("confirm-reason-label").hidden = !needReason;
      dialogOpen = true;
      d.showModal();
      return new Promise((resolve) => {
        const ok = document.getElementById("confirm-ok");
        const cancel = document.getElementById("confirm-cancel");
        const done = (value) => {
          ok.onclick = cancel.onclick = d.oncancel = null;
          d.close();
          dialogOpen = false;
          resolve(value);
        };
        ok.onclick = () => {
          if (needReason && !reason.value.trim()) { reason.focus(); return; }
          done(reason.value.trim());
        };
        cancel.onclick = () => done(null);
        d.oncancel = () => done(null);
      });
    }

    async function act(title, text, needReason, path, body, describe) {
      const reason = await ask(title, text, needReason);
      if (reason === null) return;
      if (needReason) body.reason = reason;
      say(title + " ...", true);
      try {
        const r = await post(path, body);
        say(describe(r), true);
      } catch (e) {
        say(title + " failed: " + e.message, false);
      }
      await load();
    }

    function aggregateOf(row) {
      return row.aggregate_type + "/" + row.aggregate_id;
    }

    function card(name, value, bad) {
      return el("div", { className: "card" + (bad ? " bad" : "") }, name, el("b", {}, value));
    }

    function renderRelay() {
      const s = state.stats || {};
      const box = document.getElementById("relay-cards");
      box.replaceChildren(
        card("pending", s.pending ?? "-"),
        card("failed", s.failed ?? "-", s.failed > 0),
        card("parked aggregates", s.parked_aggregates ?? "-", s.parked_aggregates > 0),
        card("retrying aggregates", s.retrying_aggregates ?? "-"),
        card("lag", age(s.lag_s), s.relay_health === "lagging"),
        card("oldest pending", age(s.oldest_pending_age_s)),
        card("published, last minute", s.published_last_minute ?? "-"),
        card("relay", s.relay_health ?? "-", s.relay_health === "lagging"));
      const h = state.history;
      document.getElementById("relay-plot").replaceChildren(plot(h.t, h.relay, state.now));
      document.getElementById("retry-all").disabled = !canAct;
    }

    function renderSubscribers() {
      const body = document.querySelector("#subscribers tbody");
      const h = state.history;
      body.replaceChildren(...state.subscribers.map((s) => {
        const series = h.subscribers[s.name] || [];
        const button = el("button", {
          className: "act act-redrive-all",
          onclick: () => act("Redrive every parked aggregate of " + s.name,
            "Each parked aggregate of " + s.name + " goes through its handler again, head first, in order.",
            false, "/api/redrive-all", { consumer: s.name },
            (r) => "Redrive of " + s.name + ": " + r.redriven + " aggregate(s)"),
        }, "Redrive all");
        button.disabled = !canAct || s.parked === 0;
        return el("tr", { "data-subscriber": s.name },
          el("td", { className: "mono" }, s.name), el("td", { className: "lag" }, age(s.lag_s)),
          el("td", {}, s.parked), el("td", {}, s.retrying), el("td", {}, age(s.oldest_parked_age_s)),
          el("td", {}, plot(h.t, series, state.now)), el("td", {}, button));
      }));
    }

    function rowActions(row) {
      const cell = el("td", { className: "actions" });
      const add = (cls, label, handler) => {
        const b = el("button", { className: "act " + cls, onclick: handler }, label);
        b.disabled = !canAct;
        cell.append(b);
      };
      const agg = aggregateOf(row);
      if (row.consumer === null) {
        add("act-retry", "Retry", () => act("Retry " + agg + " at the relay",
          "The relay's parked events of " + agg + " are due again now, in order.", false, "/api/retry",
          { aggregate_type: row.aggregate_type, aggregate_id: row.aggregate_id },
          (r) => "Retry of " + agg + ": " + (r.redriven ? "due again" : "was not parked")));
        if (row.state === "parked") {
          add("act-skip", "Skip", () => act("Skip the head of " + agg + " at the relay",
            "Event " + row.head_event_id + " (" + row.head_event_type + ", seq " + row.head_seq + ") is recorded as " +
            "skipped and never published; the aggregate's next event is due now.", true, "/api/skip",
            { event_id: row.head_event_id, aggregate_type: row.aggregate_type, aggregate_id: row.aggregate_id },
            (r) => "Skipped " + r.skipped + " of " + agg + " at the relay"));
        }
        return cell;
      }
      const target = { consumer: row.consumer, aggregate_type: row.aggregate_type, aggregate_id: row.aggregate_id };
      add("act-redrive", "Redrive", () => act("Redrive " + agg + " for " + row.consumer,
        "Its " + (row.waiting + 1) + " held event(s) go through the handler again, head first, in order.",
        false, "/api/redrive", target,
        (r) => "Redrive of " + agg + ": " + (r.redriven ? "under way" : "was not held")));
      add("act-skip", "Skip", () => act("Skip the head of " + agg + " for " + row.consumer,
        "Event " + row.head_event_id + " (" + row.head_event_type + ", seq " + row.head_seq + ") is recorded as " +
        "skipped and never applied; the aggregate's next event is due now.", true, "/api/skip",
        Object.assign({ event_id: row.head_event_id }, target),
        (r) => "Skipped " + r.skipped + " of " + agg));
      return cell;
    }

    function renderParked() {
      const body = document.querySelector("#parked tbody");
      body.replaceChildren(...state.parked.map((row) => el("tr", {
        className: "row-parked", "data-consumer": row.consumer === null ? "" : row.consumer,
        "data-aggregate": aggregateOf(row),
      },
        el("td", { className: "mono" }, row.consumer === null ? "relay" : row.consumer),
        el("td", { className: "mono" }, aggregateOf(row)),
        el("td", { className: "state-" + row.state }, row.state),
        el("td", {}, row.attempts),
        el("td", { className: "mono", title: row.head_event_id || "" },
          (row.head_event_type || "-") + " #" + (row.head_seq ?? "-")),
        el("td", {}, row.waiting),
        el("td", { title: row.first_failed_at || "" }, age(row.parked_age_s) + " ago"),
        el("td", { className: "err" }, row.last_error || ""),
        rowActions(row))));
      document.getElementById("parked-empty").hidden = state.parked.length > 0;
    }

    function render() {
      renderRelay();
      renderSubscribers();
      renderParked();
      const when = new Date(state.sampled_at * 1000).toLocaleTimeString();
      document.getElementById("sampled").textContent = state.sample_error
        ? "Sampling failed: " + state.sample_error + " (showing the sample of " + when + ")"
        : "Sampled at " + when + ", every " + state.history.interval_s + " s.";
    }

    async function load() {
      try {
        const r = await fetch("/api/state", { credentials: "same-origin" });
        if (r.status === 401) { location.reload(); return; }
        state = await r.json();
        if (!dialogOpen) render();
      } catch (e) {
        say("Cannot reach the console: " + e.message, false);
      }
    }

    document.getElementById("retry-all").addEventListener("click", () => act("Retry every failed event",
      "Every FAILED event at the relay goes back to PENDING, due now.", false, "/api/retry", {},
      (r) => "Retry: " + r.moved + " failed event(s) due again"));
    document.getElementById("logout").addEventListener("click", async () => {
      await fetch("/logout", { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf } });
      location.reload();
    });
    load();
    setInterval(load, 5000);
  })();
)JS";

} // namespace outbox::cli
