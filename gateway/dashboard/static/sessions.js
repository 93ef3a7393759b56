// mixroute sessions: fetches /dashboard/api/sessions and lists them, most expensive first.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s ?? "–").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const usd = (v) => v == null ? "–" : "$" + (Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3));
  const pct = (v) => v == null ? "–" : (100 * v).toFixed(1) + "%";

  async function load() {
    const status = $("status");
    status.textContent = "Loading…";
    const resp = await fetch("/dashboard/api/sessions?since=" + encodeURIComponent($("range").value), { credentials: "same-origin" });
    if (resp.status === 401) { window.location = "/dashboard/login"; return; }
    const data = await resp.json();
    if (!resp.ok) { status.textContent = data.error ? data.error.message : "Error " + resp.status; return; }
    const t = data.totals;
    $("kpis").innerHTML = [["sessions", t.sessions], ["turns", t.turns], ["cost per session", usd(t.cost_per_session_usd)],
      ["median switches", t.switches_median ?? "–"], ["cached share of input", pct(t.cached_share)]]
      .map(([k, v]) => `<div class="kpi"><div class="l">${esc(k)}</div><div class="v">${esc(v)}</div></div>`).join("");
    $("sessions").querySelector("tbody").innerHTML = data.sessions.map((s) => `<tr><td>${esc(s.id)}</td><td>${esc(s.tenant)}</td>
      <td>${esc(s.route)}</td><td class="n">${s.turns}</td><td class="n">${s.switches}</td><td class="n">${s.escalations}</td>
      <td>${esc(s.backends.join(", "))}</td><td class="n">${pct(s.cached_share)}</td><td class="n">${usd(s.cost_usd)}</td>
      <td>${esc(s.last)}</td></tr>`).join("");
    status.textContent = data.truncated ? "Only the first rows of this range were read." : "";
    status.hidden = !data.truncated;
  }

  $("controls").addEventListener("submit", (e) => { e.preventDefault(); load(); });
  load();
})();
