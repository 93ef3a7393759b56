// mixroute dashboard: fetches /dashboard/api/summary and draws it with the bundled Chart.js.
// No prompt or completion text ever reaches this page: the API returns aggregates only.
"use strict";
(function () {
  const COLORS = ["#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d", "#9ca3af"];
  const charts = {};
  const state = { data: null };
  window.mixroute = { charts, state };  // for browser tests

  const $ = (id) => document.getElementById(id);
  const usd = (v) => v == null ? "–" : (Math.abs(v) >= 100 ? "$" + v.toFixed(0) : Math.abs(v) >= 1 ? "$" + v.toFixed(2) : "$" + v.toPrecision(3));
  const pct = (v) => v == null ? "–" : v.toFixed(1) + "%";
  const ms = (v) => v == null ? null : +(v * 1000).toFixed(2);
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

  function query() {
    const p = new URLSearchParams();
    const range = $("range").value;
    if (range === "custom") {
      if ($("since").value) p.set("since", $("since").value);
      if ($("until").value) p.set("until", $("until").value);
    } else {
      p.set("since", range);
    }
    if ($("reference").value) p.set("reference", $("reference").value);
    return p.toString();
  }

  async function load() {
    const status = $("status");
    status.className = "notice";
    status.textContent = "Loading…";
    let resp;
    try {
      resp = await fetch("/dashboard/api/summary?" + query(), { credentials: "same-origin" });
    } catch (e) {
      return fail("The gateway did not answer: " + e.message);
    }
    if (resp.status === 401) { window.location = "/dashboard/login"; return; }
    const body = await resp.json();
    if (!resp.ok) return fail((body.error && body.error.message) || ("HTTP " + resp.status));
    state.data = body;
    render(body);
    adapters();
  }

  async function adapters() {
    let resp;
    try {
      resp = await fetch("/dashboard/api/events", { credentials: "same-origin" });
    } catch (e) {
      return;
    }
    if (!resp.ok) return;
    const d = await resp.json();
    $("adapters-active").textContent = "live: " + d.active + (d.shadow ? " · shadow: " + d.shadow : "");
    $("adapter-events").innerHTML = '<tr><th>When (UTC)</th><th>Event</th><th>From</th><th>To</th><th>By</th><th>Why</th></tr>' +
      d.events.map((e) => "<tr><td>" + esc(e.at) + "</td><td>" + esc(e.event) + "</td><td>" + esc(e.from) + "</td><td>" +
        esc(e.version) + "</td><td>" + esc(e.by) + "</td><td>" + esc(e.reason || "") + "</td></tr>").join("");
  }

  function fail(message) {
    const status = $("status");
    status.className = "notice err";
    status.textContent = message;
  }

  function render(d) {
    $("viewer").textContent = d.viewer.tenant ? "tenant: " + d.viewer.tenant : "all tenants";
    fillReference(d);
    ops(d);
    const status = $("status");
    if (d.empty) {
      status.textContent = d.viewer.tenant
        ? "No requests from tenant " + d.viewer.tenant + " in this time range."
        : "No requests in this time range. Send traffic through the gateway, or widen the range.";
      $("kpis").innerHTML = "";
      $("charts").hidden = true;
      for (const k of Object.keys(charts)) { charts[k].destroy(); delete charts[k]; }
      return;
    }
    status.textContent = d.truncated ? "Showing the newest 200,000 requests of this range only." : "";
    $("charts").hidden = false;
    kpis(d);
    spend(d);
    mix(d);
    savings(d);
    quality(d);
    prefix(d);
    latency(d, "ttft", "chart-ttft");
    latency(d, "itl", "chart-itl");
    table("top-tenants", d.top_tenants);
    table("top-routes", d.top_routes);
  }

  function fillReference(d) {
    const sel = $("reference");
    if (sel.options.length) return;
    for (const b of d.backends) sel.add(new Option(b, b, false, b === d.savings.reference));
  }

  function kpis(d) {
    const t = d.totals, s = d.savings, q = d.quality;
    const items = [
      ["Spend", usd(t.spend_usd), t.spend_usd],
      ["Requests", t.requests.toLocaleString() + ((t.errors || t.rejected) ? " (" + [t.errors ? t.errors + " errors" : "", t.rejected ? t.rejected + " rejected" : ""].filter(Boolean).join(", ") + ")" : "")],
      ["Saved vs strongest model", usd(s.saved_vs_strongest_usd) + " · " + pct(s.saved_vs_strongest_pct), s.saved_vs_strongest_usd],
      ["Saved vs " + (s.reference || "reference"), usd(s.saved_vs_reference_usd) + " · " + pct(s.saved_vs_reference_pct)],
      ["Prefix-cache hit rate", d.prefix_cache.overall == null ? "–" : pct(100 * d.prefix_cache.overall)],
      ["Good answers (feedback)", q && q.good_rate != null ? pct(100 * q.good_rate) + " of " + q.feedback : "no feedback"],
    ];
    $("kpis").innerHTML = items.map(([l, v, raw]) =>
      '<div class="kpi"><div class="v" data-kpi="' + esc(l) + '"' + (raw == null ? "" : ' data-value="' + raw + '"') + ">" +
      esc(v) + '</div><div class="l">' + esc(l) + "</div></div>").join("");
  }

  function draw(id, config) {
    const canvas = $(id);
    const box = canvas.parentElement;
    box.querySelectorAll(".empty-chart").forEach((e) => e.remove());
    canvas.hidden = false;
    if (charts[id]) charts[id].destroy();
    config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false }, config.options || {});
    charts[id] = new Chart(canvas, config);
    // Drawn points, for browser tests: values that are not null across every dataset.
    canvas.dataset.points = config.data.datasets.reduce((n, ds) => n + ds.data.filter((v) => v != null).length, 0);
  }

  function empty(id, message) {
    const canvas = $(id);
    if (charts[id]) { charts[id].destroy(); delete charts[id]; }
    canvas.hidden = true;
    canvas.dataset.points = 0;
    const box = canvas.parentElement;
    box.querySelectorAll(".empty-chart").forEach((e) => e.remove());
    const div = document.createElement("div");
    div.className = "empty-chart";
    div.textContent = message;
    box.appendChild(div);
  }

  function spend(d) {
    const dim = $("spend-dim").value;
    const series = d.spend[dim];
    const labels = d.spend.buckets.map((b) => {
      const t = new Date(b);
      return d.window.bucket_s >= 86400 ? t.toISOString().slice(0, 10) : t.toISOString().slice(5, 16).replace("T", " ");
    });
    draw("chart-spend", {
      type: "bar",
      data: { labels, datasets: Object.keys(series).map((k, i) => ({ label: k, data: series[k], backgroundColor: COLORS[i % COLORS.length] })) },
      options: { scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: "USD" } } } },
    });
  }

  function mix(d) {
    const names = Object.keys(d.mix.overall);
    draw("chart-mix", {
      type: "doughnut",
      data: { labels: names, datasets: [{ data: names.map((n) => d.mix.overall[n]), backgroundColor: names.map((_, i) => COLORS[i % COLORS.length]) }] },
      options: { plugins: { legend: { position: "right" } } },
    });
    const rows = Object.entries(d.mix.by_route).map(([route, counts]) => {
      const total = Object.values(counts).reduce((a, b) => a + b, 0);
      const parts = Object.entries(counts).map(([b, n]) => esc(b) + " " + (100 * n / total).toFixed(0) + "%").join(", ");
      return "<tr><td>" + esc(route) + "</td><td>" + parts + "</td></tr>";
    });
    $("mix-table").innerHTML = "<tr><th>Route</th><th>Backends</th></tr>" + rows.join("");
  }

  function savings(d) {
    const s = d.savings;
    if (!s.requests) return empty("chart-savings", "No priced requests in this range.");
    const labels = ["actual", "always strongest"];
    const data = [s.actual_usd, s.strongest_usd];
    if (s.reference) { labels.push("always " + s.reference); data.push(s.reference_usd); }
    draw("chart-savings", {
      type: "bar",
      data: { labels, datasets: [{ label: "USD", data, backgroundColor: [COLORS[1], COLORS[3], COLORS[2]] }] },
      options: { plugins: { legend: { display: false } } },
    });
  }

  function quality(d) {
    const q = d.quality;
    const note = $("quality-note");
    if (!q) { note.textContent = ""; return empty("chart-quality", "This store has no feedback table yet."); }
    const routes = Object.keys(q.routes);
    if (!routes.length) { note.textContent = ""; return empty("chart-quality", "No feedback for requests in this range."); }
    draw("chart-quality", {
      type: "bar",
      data: {
        labels: routes,
        datasets: [
          { label: "good-answer rate", data: routes.map((r) => q.routes[r].good_rate), backgroundColor: COLORS[1] },
          { label: "quality bar", data: routes.map((r) => q.routes[r].bar), backgroundColor: COLORS[8] },
        ],
      },
      options: { scales: { y: { min: 0, max: 1 } } },
    });
    note.innerHTML = routes.map((r) => {
      const x = q.routes[r];
      const ok = x.complies == null ? "" : x.complies ? ' <span class="good">meets bar</span>' : ' <span class="bad">below bar</span>';
      return esc(r) + ": " + x.feedback + " ratings, " + x.misses + " misses" + ok;
    }).join(" · ");
  }

  function prefix(d) {
    const by = d.prefix_cache.by_backend;
    const names = Object.keys(by).filter((b) => by[b] != null);
    if (!names.length) return empty("chart-prefix", "No input tokens in this range.");
    draw("chart-prefix", {
      type: "bar",
      data: { labels: names, datasets: [{ label: "cached / input tokens", data: names.map((b) => by[b]), backgroundColor: COLORS[5] }] },
      options: { scales: { y: { min: 0, max: 1 } }, plugins: { legend: { display: false } } },
    });
  }

  function latency(d, kind, id) {
    const names = Object.keys(d.latency).filter((b) => d.latency[b][kind + "_p50"] != null);
    if (!names.length) return empty(id, kind === "itl" ? "No streamed responses in this range (ITL is measured on streams)." : "No successful requests in this range.");
    draw(id, {
      type: "bar",
      data: {
        labels: names,
        datasets: [
          { label: "p50", data: names.map((b) => ms(d.latency[b][kind + "_p50"])), backgroundColor: COLORS[0] },
          { label: "p99", data: names.map((b) => ms(d.latency[b][kind + "_p99"])), backgroundColor: COLORS[4] },
        ],
      },
      options: { scales: { y: { title: { display: true, text: "ms" } } } },
    });
  }

  function ops(d) {
    $("budgets").innerHTML = '<tr><th>Tenant</th><th>Period</th><th class="n">Budget</th><th class="n">Spent</th><th class="n">Left</th></tr>' +
      (d.budgets || []).map((b) => "<tr><td>" + esc(b.tenant) + "</td><td>" + esc(b.period) + '</td><td class="n">' + usd(b.budget_usd) +
        '</td><td class="n">' + usd(b.spent_usd) + '</td><td class="n">' + usd(b.left_usd) + "</td></tr>").join("");
    $("runaway").innerHTML = '<tr><th>When (UTC)</th><th>Scope</th><th>Name</th><th class="n">USD/min</th><th class="n">Baseline</th><th>Action</th></tr>' +
      (d.runaway || []).map((e) => "<tr><td>" + esc(e.at) + "</td><td>" + esc(e.scope) + "</td><td>" + esc(e.name) + '</td><td class="n">' +
        usd(e.rate_usd_per_min) + '</td><td class="n">' + usd(e.baseline_usd_per_min) + "</td><td>" + esc(e.action) + "</td></tr>").join("");
  }

  function table(id, rows) {
    $(id).innerHTML = '<tr><th>Name</th><th class="n">Requests</th><th class="n">Spend</th></tr>' +
      rows.map((r) => "<tr><td>" + esc(r.name) + '</td><td class="n">' + r.requests + '</td><td class="n">' + usd(r.spend_usd) + "</td></tr>").join("");
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("range").addEventListener("change", () => { $("custom").hidden = $("range").value !== "custom"; if ($("range").value !== "custom") load(); });
    $("reference").addEventListener("change", load);
    $("spend-dim").addEventListener("change", () => state.data && !state.data.empty && spend(state.data));
    $("controls").addEventListener("submit", (e) => { e.preventDefault(); load(); });
    load();
  });
})();
