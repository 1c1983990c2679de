"use strict";
// The labelling page: one prompt at a time, labelled with the keyboard.
// Prompt text is only ever set as text (textContent), never as HTML.
(function () {
  const $ = (id) => document.getElementById(id);
  let state = null;
  let busy = false;
  let seq = 0;
  let byKey = {};

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  const fmt = (x) => x.toFixed(2);

  function render(st) {
    state = st;
    byKey = {};
    for (const c of st.classes) if (c.key) byKey[c.key] = c.name;
    const item = st.item;
    $("labelled").textContent = st.labelled;
    $("unsure").textContent = st.unsure;
    $("left").textContent = st.left;
    $("total").textContent = st.total;
    $("skipped").textContent = st.skipped ? " · " + st.skipped + " skipped for now" : "";
    const doneShare = st.total ? (st.total - st.left) / st.total : 0;
    $("bar").style.width = (100 * doneShare).toFixed(1) + "%";
    $("card").hidden = !item;
    $("done").hidden = !!item;
    $("out").textContent = st.out;
    const suggested = new Set();
    if (item) {
      const d = item.decision || {};
      let line = "Gateway: " + (d.route ? "route " + d.route : "default pool") + (d.pool ? " (pool " + d.pool + ")" : "");
      if (d.tier) line += " · " + d.class + " " + fmt(d.score) + " at tier " + d.tier;
      if (d.reason) line += " · " + d.reason;
      if (item.route_classes && item.route_classes.length) line += " · right if: " + item.route_classes.join(", ");
      $("decision").textContent = line;
      $("text").textContent = item.text + (item.truncated ? " …" : "");
      const sg = $("suggest");
      sg.replaceChildren();
      if (item.suggestions && item.suggestions.length) {
        sg.append(el("span", "Tier " + item.suggestions[0].tier + " suggests: "));
        item.suggestions.forEach((s, i) => {
          suggested.add(s.class);
          const key = (st.classes.find((c) => c.name === s.class) || {}).key;
          sg.append(el("span", s.class + " " + fmt(s.score) + (i === 0 ? " ⏎" : key ? " [" + key + "]" : ""), i === 0 ? "chip first" : "chip"));
        });
      }
    }
    const nav = $("classes");
    nav.replaceChildren();
    for (const c of st.classes) {
      const b = el("button", c.name + " ", suggested.has(c.name) ? "suggested" : "");
      b.type = "button";
      b.dataset.class = c.name;
      if (c.key) b.append(el("kbd", c.key));
      b.disabled = !item;
      b.addEventListener("click", () => act("label", c.name));
      nav.append(b);
    }
    $("unsureBtn").disabled = $("skipBtn").disabled = !item;
    $("undoBtn").disabled = !st.can_undo;
    const p = st.precision;
    if (p.routed) {
      $("precision").textContent = fmt(p.estimate) + " (95%: " + fmt(p.low) + "–" + fmt(p.high) + ") on " + p.routed +
        " label" + (p.routed === 1 ? "" : "s") + " the gateway sent to a class route, " + p.right + " right.";
    } else {
      $("precision").textContent = "No label yet on a prompt the gateway sent to a class route.";
    }
    if (!p.routed_rate) $("hint").textContent = "No prompt of this sample went to a class route.";
    else if (p.more > st.left) $("hint").textContent = "This sample is too small to narrow it to ±" + p.margin + ": about " + p.more + " more labels would (" + p.needed_routed + " on class routes); sample more.";
    else if (p.more > 0) $("hint").textContent = "About " + p.more + " more label" + (p.more === 1 ? "" : "s") + " narrow it to ±" + p.margin + " (" + p.needed_routed + " on class routes needed).";
    else if (p.routed >= p.needed_routed) $("hint").textContent = "Enough: the interval is within ±" + p.margin + ". You can stop here.";
    const tbl = $("perclass");
    tbl.replaceChildren();
    const most = Math.max(1, ...st.classes.map((c) => c.count));
    for (const c of st.classes) {
      const tr = el("tr");
      tr.append(el("td", c.name), el("td", String(c.count), "n"));
      const bar = el("td", undefined, "bar");
      const fill = el("div");
      fill.style.width = (100 * c.count / most).toFixed(0) + "%";
      bar.append(fill);
      tr.append(bar);
      tbl.append(tr);
    }
    document.body.dataset.item = item ? item.id : "";
    document.body.dataset.seq = String(++seq);
  }

  function status(msg) { $("status").textContent = msg || ""; }

  async function act(action, label) {
    if (busy || !state) return;
    if (action !== "undo" && !state.item) return;
    busy = true;
    try {
      const r = await fetch("/api/act", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ action: action, id: state.item ? state.item.id : "", label: label || "" }),
      });
      const st = await r.json();
      render(st);
      status(st.error ? (r.status === 409 ? "That prompt had changed (another tab?): showing the current one." : "Not saved: " + st.error) : "");
    } catch (e) {
      status("Not saved: " + e);
    } finally {
      busy = false;
    }
  }

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || !state) return;
    const k = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    let handled = true;
    if (k === "u" || k === "Backspace") act("undo");
    else if (k === "s" || k === "ArrowRight") act("skip");
    else if (k === "n" || k === "?") act("unsure");
    else if (k === "Enter" && state.item && state.item.suggestions && state.item.suggestions.length) act("label", state.item.suggestions[0].class);
    else if (byKey[k]) act("label", byKey[k]);
    else handled = false;
    if (handled) e.preventDefault();
  });
  $("unsureBtn").addEventListener("click", () => act("unsure"));
  $("skipBtn").addEventListener("click", () => act("skip"));
  $("undoBtn").addEventListener("click", () => act("undo"));

  fetch("/api/state").then((r) => r.json()).then(render, (e) => status("Could not load: " + e));
})();
