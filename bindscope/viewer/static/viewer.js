// bindscope viewer: plain JS, no library, no network. The data sits in #bindscope-data.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("bindscope-data").textContent);
  const SCALE = 1e6; // weights are stored as integers / 1e6 (bindscope/viewer/encode.py)
  const app = document.getElementById("app");
  const tip = document.getElementById("tooltip");
  const state = { layer: 0, head: 0 };
  const redraws = [];

  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const kid of kids) if (kid != null) node.append(kid);
    return node;
  }
  function svgEl(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }
  function showTip(event, text) {
    tip.textContent = text;
    tip.style.display = "block";
    tip.style.left = event.clientX + 14 + "px";
    tip.style.top = event.clientY + 14 + "px";
  }
  function hideTip() { tip.style.display = "none"; }
  function section(id, title, note) {
    const s = el("section", { id }, el("h2", { text: title }), note ? el("p", { class: "note", text: note }) : null);
    app.append(s);
    document.getElementById("nav").append(el("a", { href: "#" + id, text: title }));
    return s;
  }
  function fmt(x, digits) { return x == null ? "n/a" : Number(x).toFixed(digits); }

  // -- patterns: base64 varints (7 bits a byte), lower triangle, per head ------------------
  function decode(b64) {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const out = [];
    let value = 0, shift = 0;
    for (const b of bytes) {
      value += (b & 127) * Math.pow(2, shift);
      if (b & 128) shift += 7; else { out.push(value); value = 0; shift = 0; }
    }
    return Uint32Array.from(out);
  }
  const M = D.model;
  const n = D.tokens ? D.tokens.length : 0;
  const tri = (n * (n + 1)) / 2;
  function unpack(runs) {
    const heads = M.n_layers * M.n_heads;
    const clean = decode(runs[0].patterns);
    const out = [];
    for (const run of runs) {
      const steps = run === runs[0] ? clean : decode(run.patterns);
      const per = [];
      let next = 0;
      for (let k = 0; k < heads; k++) {
        if (run.same && run.same[k]) per.push(out[0][k]);
        else { per.push(steps.subarray(next * tri, (next + 1) * tri)); next++; }
      }
      out.push(per);
    }
    return out;
  }
  const patterns = D.runs ? unpack(D.runs) : null;
  function weight(run, layer, head, q, k) {
    return k > q ? 0 : patterns[run][layer * M.n_heads + head][(q * (q + 1)) / 2 + k] / SCALE;
  }
  function shade(w) { // square root: small weights stay visible
    const t = Math.sqrt(w);
    return [Math.round(255 - 222 * t), Math.round(255 - 180 * t), Math.round(255 - 90 * t)];
  }
  const spanSet = new Set(D.binding ? D.binding.span : []);
  function bsiOf(layer, head) {
    const b = D.binding && D.binding.bsi[layer] ? D.binding.bsi[layer][head] : null;
    return b == null ? null : b;
  }

  // -- the head grid ------------------------------------------------------------------
  function thumbnail(layer, head) {
    const c = el("canvas", { width: n, height: n });
    const img = c.getContext("2d").createImageData(n, n);
    for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) {
      const [r, g, b] = shade(weight(0, layer, head, q, k)), at = 4 * (q * n + k);
      img.data[at] = r; img.data[at + 1] = g; img.data[at + 2] = b; img.data[at + 3] = 255;
    }
    c.getContext("2d").putImageData(img, 0, 0);
    const bsi = bsiOf(layer, head);
    const label = bsi == null ? "h" + head : "h" + head + " " + fmt(bsi, 2);
    const t = el("div", { class: "thumb", "data-layer": layer, "data-head": head,
      title: `L${layer} H${head}` + (bsi == null ? "" : ` · BSI ${fmt(bsi, 3)}`),
      onclick: () => openHead(layer, head) }, c, el("span", { text: label }));
    if (bsi != null) c.style.borderBottomColor = `rgba(230,97,1,${Math.min(1, Math.abs(bsi) * 3)})`;
    return t;
  }
  function headGrid() {
    const per = M.n_heads / M.n_kv_heads;
    const s = section("heads", "Head grid", `${M.n_layers} layers × ${M.n_heads} heads; a box is one key/value group (${per} query heads share it). Click a head to open its pattern.` +
      (D.binding ? " Under each head: its BSI on the binding prompt (the orange bar's strength)." : ""));
    const grid = el("div", { class: "grid" });
    const top = el("div", { class: "layer-row" }, el("span", { class: "layer-label" }));
    for (let g = 0; g < M.n_kv_heads; g++) {
      const box = el("div", { class: "group", style: "background:none;border-color:transparent" });
      for (let i = 0; i < per; i++) box.append(el("span", { class: "group-head", text: i === 0 ? "kv " + g : "" }));
      top.append(box);
    }
    grid.append(top);
    for (let layer = 0; layer < M.n_layers; layer++) {
      const row = el("div", { class: "layer-row" }, el("span", { class: "layer-label", text: "L" + layer }));
      for (let g = 0; g < M.n_kv_heads; g++) {
        const box = el("div", { class: "group", title: `L${layer} key/value group ${g}` });
        for (let h = g * per; h < (g + 1) * per; h++) box.append(thumbnail(layer, h));
        row.append(box);
      }
      grid.append(row);
    }
    s.append(grid);
  }

  // -- one head's pattern per run, side by side -------------------------------------------
  function patternPanel(run, index) {
    const cell = Math.max(9, Math.min(18, Math.floor(500 / n))); // two runs side by side in 1400 px
    const left = 110, top = 90;
    const c = el("canvas", { id: "pattern-" + index, class: "pattern", width: left + n * cell + 4, height: top + n * cell + 4,
      "data-left": left, "data-top": top, "data-cell": cell });
    const hover = el("div", { class: "hover", id: "hover-" + index, text: "hover a cell: query → key weight" });
    const title = el("h3", { text: run.label });
    function draw() {
      const ctx = c.getContext("2d");
      ctx.clearRect(0, 0, c.width, c.height);
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillStyle = "#ffe08a"; // the span first: a rotated label runs over the next columns
      for (const i of spanSet) {
        ctx.fillRect(0, top + i * cell, left - 4, cell);
        ctx.fillRect(left + i * cell, 0, cell, top - 4);
      }
      for (let i = 0; i < n; i++) {
        ctx.fillStyle = "#222";
        ctx.textAlign = "right"; ctx.textBaseline = "middle";
        ctx.fillText(D.tokens[i].slice(0, 14), left - 6, top + (i + 0.5) * cell);
        ctx.save();
        ctx.translate(left + (i + 0.5) * cell, top - 6); ctx.rotate(-Math.PI / 3);
        ctx.textAlign = "left"; ctx.fillText(D.tokens[i].slice(0, 11), 0, 0);
        ctx.restore();
      }
      for (let q = 0; q < n; q++) for (let k = 0; k <= q; k++) {
        const [r, g, b] = shade(weight(index, state.layer, state.head, q, k));
        ctx.fillStyle = `rgb(${r},${g},${b})`;
        ctx.fillRect(left + k * cell, top + q * cell, cell, cell);
      }
      ctx.strokeStyle = "#ccc"; ctx.strokeRect(left, top, n * cell, n * cell);
      if (spanSet.size) {
        const lo = Math.min(...spanSet), hi = Math.max(...spanSet);
        ctx.strokeStyle = "#e66101"; ctx.lineWidth = 2;
        ctx.strokeRect(left + lo * cell, top, (hi - lo + 1) * cell, n * cell);
        ctx.lineWidth = 1;
      }
      const same = run.same && run.same[state.layer * M.n_heads + state.head];
      title.textContent = run.label + (index > 0 ? (same ? " (this head's pattern unchanged)" : " (changed)") : "");
    }
    c.addEventListener("mousemove", (event) => {
      const box = c.getBoundingClientRect();
      const k = Math.floor((event.clientX - box.left - left) / cell), q = Math.floor((event.clientY - box.top - top) / cell);
      if (q < 0 || k < 0 || q >= n || k >= n) { hideTip(); return; }
      const w = weight(index, state.layer, state.head, q, k);
      const text = `L${state.layer} H${state.head}  query ${q} "${D.tokens[q]}" → key ${k} "${D.tokens[k]}": ${w.toFixed(6)}`;
      hover.textContent = text;
      hover.setAttribute("data-weight", w.toFixed(6));
      showTip(event, text);
    });
    c.addEventListener("mouseleave", hideTip);
    redraws.push(draw);
    const logits = el("table", { class: "top" }, el("tr", {}, el("th", { text: "next token" }), el("th", { text: "p" })));
    for (const [token, p] of run.top) logits.append(el("tr", {}, el("td", { text: token }), el("td", { text: fmt(p, 4) })));
    return el("div", { class: "panel" }, title, c, hover, el("p", { class: "note", text: "Top next tokens (last position):" }), logits);
  }
  function patternSection() {
    const s = section("pattern", "Pattern", "Rows are queries, columns keys; shade: square root of the weight. " +
      (D.binding ? `Orange: the term "${D.binding.term}" (${D.binding.prompt_key}), span tokens ${D.binding.span.join(", ")}.` : ""));
    const heading = el("h3", { id: "pattern-title" });
    redraws.push(() => {
      const bsi = bsiOf(state.layer, state.head);
      heading.textContent = `Layer ${state.layer}, head ${state.head}` + (bsi == null ? "" : ` · BSI ${fmt(bsi, 4)}`);
    });
    const panels = el("div", { class: "panels" });
    D.runs.forEach((run, i) => panels.append(patternPanel(run, i)));
    s.append(heading, panels);
  }
  function openHead(layer, head, scroll) {
    state.layer = layer; state.head = head;
    for (const t of document.querySelectorAll(".thumb")) {
      t.classList.toggle("selected", +t.dataset.layer === layer && +t.dataset.head === head);
    }
    for (const f of redraws) f();
    if (scroll !== false && document.getElementById("pattern")) {
      document.getElementById("pattern").scrollIntoView({ block: "start" });
    }
  }

  // -- head maps (C5, scan, patching) ------------------------------------------------------
  function headMap(map) {
    const rows = map.values.length, cols = map.values[0].length;
    const peak = Math.max(1e-12, ...map.values.flat().filter((v) => v != null).map(Math.abs));
    const marked = new Set(map.marked.map(([l, h]) => l + "." + h));
    const grid = el("div", { class: "map", id: "map-" + map.name, style: `grid-template-columns:24px repeat(${cols},15px)` });
    grid.append(el("span", { class: "map-axis" }));
    const opens = patterns && !map.unit.includes("position"); // position columns open nothing
    const axis = map.columns ? (h) => map.columns[h] : map.unit === "position" ? (h) => "-" + (h + 1) : map.unit === "layer" ? () => "all" : (h) => h;
    for (let h = 0; h < cols; h++) grid.append(el("span", { class: "map-axis", text: axis(h) }));
    for (let l = 0; l < rows; l++) {
      grid.append(el("span", { class: "map-axis", text: "L" + l }));
      for (let h = 0; h < cols; h++) {
        const v = map.values[l][h], t = v == null ? 0 : Math.abs(v) / peak;
        const colour = v == null ? "#f4f4f4" : v >= 0 ? `rgba(178,24,43,${t})` : `rgba(33,102,172,${t})`;
        const where = map.columns ? ` ${axis(h)}` : map.unit === "position" ? ` position ${axis(h)}` : map.unit === "layer" ? "" : ` H${h}`;
        const text = `${map.name} L${l}${where}: ${fmt(v, 4)}` + (marked.has(l + "." + h) ? " (marked)" : "");
        grid.append(el("span", { class: "map-cell" + (marked.has(l + "." + h) ? " marked" : ""), style: "background:" + colour,
          "data-map": map.name, "data-layer": l, "data-head": h,
          onmousemove: (e) => showTip(e, text + (opens ? "\nclick: open the pattern" : "")), onmouseleave: hideTip,
          onclick: () => { if (opens) openHead(l, map.unit === "layer" ? 0 : h); } }));
      }
    }
    return el("div", {}, el("h3", { text: map.title }), el("p", { class: "note", text: `red: positive, blue: negative, ±${fmt(peak, 3)} at full colour` }), grid);
  }
  function mapsSection() {
    const s = section("maps", "Head maps", patterns ? "Click a cell to open that head's pattern." : "No patterns in this page (no text or model given).");
    const box = el("div", { class: "maps" });
    for (const map of D.maps) box.append(headMap(map));
    s.append(box);
  }

  // -- the circuit ---------------------------------------------------------------------------
  const KINDS = {
    embed: { colour: "#7f7f7f", label: "embedding" }, head: { colour: "#e08214", label: "attention head (query in)" },
    kv: { colour: "#8073ac", label: "key/value group" }, mlp: { colour: "#1b7837", label: "MLP" },
    logits: { colour: "#111", label: "logits" },
  };
  function nodeOf(name) {
    if (name === "embed") return { id: name, kind: "embed", row: -1, order: 0, label: "embed" };
    if (name === "logits") return { id: name, kind: "logits", row: 1e9, order: 0, label: "logits" };
    let m = /^a(\d+)\.h(\d+)(<q>)?$/.exec(name);
    if (m) return { id: `a${m[1]}.h${m[2]}`, kind: "head", row: +m[1], order: +m[2], label: `L${m[1]}.H${m[2]}` };
    m = /^a(\d+)\.g(\d+)<([kv])>$/.exec(name);
    if (m) return { id: name, kind: "kv", row: +m[1], order: 1000 + 2 * +m[2] + (m[3] === "v" ? 1 : 0), label: `L${m[1]}.g${m[2]}.${m[3]}` };
    m = /^m(\d+)$/.exec(name);
    return { id: name, kind: "mlp", row: m ? +m[1] + 0.5 : 0, order: 0, label: name.replace(/^m/, "MLP") };
  }
  function drawNode(svg, node) {
    const g = svgEl("g", { class: "node", "data-kind": node.kind, "data-node": node.id });
    const colour = KINDS[node.kind].colour;
    if (node.kind === "head") g.append(svgEl("circle", { cx: node.x, cy: node.y, r: 7, fill: colour }));
    else if (node.kind === "kv") g.append(svgEl("path", { d: `M${node.x} ${node.y - 8}l8 8l-8 8l-8 -8z`, fill: colour }));
    else g.append(svgEl("rect", { x: node.x - 16, y: node.y - 7, width: 32, height: 14, rx: node.kind === "mlp" ? 3 : 0, fill: colour }));
    const text = svgEl("text", { x: node.x, y: node.y + 19, "text-anchor": "middle" });
    text.textContent = node.label;
    g.append(text);
    if (node.kind === "head" && patterns) {
      g.style.cursor = "pointer";
      const [, l, h] = /^a(\d+)\.h(\d+)$/.exec(node.id);
      g.addEventListener("click", () => openHead(+l, +h));
    }
    svg.append(g);
    return g;
  }
  function circuitSection() {
    const C = D.circuit, edges = C.edges;
    const s = section("circuit", "Circuit", `The top ${edges.length} edges by mean score. Width: |score|; blue: positive, red: negative. Hover an edge for its estimate, exact effect (verified edges) and rank; click a head to open its pattern.`);
    const legend = el("div", { class: "legend" });
    for (const kind of Object.values(KINDS)) {
      legend.append(el("span", {}, el("span", { style: `display:inline-block;width:12px;height:12px;background:${kind.colour};margin-right:4px;vertical-align:middle` }), kind.label));
    }
    const nodes = new Map();
    for (const e of edges) for (const name of [e.s, e.r]) { const nd = nodeOf(name); nodes.set(nd.id, nd); }
    const rows = [...new Set([...nodes.values()].map((nd) => nd.row))].sort((a, b) => b - a);
    const byRow = rows.map((r) => [...nodes.values()].filter((nd) => nd.row === r).sort((a, b) => a.order - b.order || a.kind.localeCompare(b.kind)));
    const width = Math.max(500, 90 + 64 * Math.max(...byRow.map((r) => r.length)));
    const height = 40 + 52 * rows.length;
    byRow.forEach((row, i) => row.forEach((nd, j) => { nd.x = 60 + 64 * j + (width - 120 - 64 * (row.length - 1)) / 2; nd.y = 28 + 52 * i; }));
    const svg = svgEl("svg", { id: "circuit-svg", width, height });
    const edgeLayer = svgEl("g", {});
    svg.append(edgeLayer);
    const drawn = new Map();
    for (const nd of nodes.values()) drawn.set(nd.id, drawNode(svg, nd));
    const peak = Math.max(...edges.map((e) => Math.abs(e.score)));
    const slider = el("input", { id: "circuit-slider", type: "range", min: 1, max: edges.length, value: Math.min(20, edges.length) });
    const count = el("span", { id: "circuit-count" });
    const faith = el("p", { class: "note", id: "circuit-faithfulness" });
    function update() {
      const shown = +slider.value;
      edgeLayer.replaceChildren();
      const used = new Set();
      edges.slice(0, shown).forEach((e, rank) => {
        const a = nodes.get(nodeOf(e.s).id), b = nodes.get(nodeOf(e.r).id);
        used.add(a.id); used.add(b.id);
        const path = svgEl("path", { class: "edge", d: `M${a.x} ${a.y}C${a.x} ${(a.y + b.y) / 2},${b.x} ${(a.y + b.y) / 2},${b.x} ${b.y}`,
          fill: "none", stroke: e.score >= 0 ? "#2166ac" : "#b2182b", "stroke-opacity": 0.75, "stroke-width": 0.8 + 7 * Math.abs(e.score) / peak });
        const text = `${a.label} → ${b.label}${e.r.endsWith(">") ? " (" + {q: "query", k: "key", v: "value"}[e.r.slice(-2, -1)] + ")" : ""}  rank ${rank + 1}\nedge ${e.s} -> ${e.r}\nscore (estimate): ${fmt(e.score, 5)}` +
          (e.exact != null ? `\nverified: estimate ${fmt(e.estimate, 5)}, exact effect ${fmt(e.exact, 5)}` : "\nexact effect: not verified");
        path.addEventListener("mousemove", (ev) => showTip(ev, text));
        path.addEventListener("mouseleave", hideTip);
        edgeLayer.append(path);
      });
      for (const [id, g] of drawn) g.style.opacity = used.has(id) ? 1 : 0.25;
      count.textContent = ` top ${shown} of ${edges.length} edges`;
      const size = (C.sizes || []).find((z) => z.n_edges === shown);
      faith.textContent = size ? `Faithfulness of the top ${shown}: keeps ${fmt(size.share, 3)} of the metric (95% CI ${fmt(size.low, 3)} to ${fmt(size.high, 3)}).` : "";
    }
    slider.addEventListener("input", update);
    const sizes = el("table", {}, el("tr", {}, el("th", { text: "edges" }), el("th", { text: "share kept" }), el("th", { text: "95% CI" })));
    for (const z of C.sizes || []) sizes.append(el("tr", {}, el("td", { text: z.n_edges }), el("td", { text: fmt(z.share, 3) }), el("td", { text: `${fmt(z.low, 3)} to ${fmt(z.high, 3)}` })));
    s.append(legend, el("div", {}, slider, count), faith, svg, el("p", { class: "note", text: "Faithfulness per circuit size (from the records):" }), sizes);
    update();
  }

  // -- the logit lens --------------------------------------------------------------------------
  function lensSection() {
    const s = section("lens", "Logit lens", "Each layer's residual stream through the final norm and unembedding: the top token at each position (shade: its probability; hover for the top " + D.lens.k + ").");
    const table = el("table", { class: "lens" });
    const head = el("tr", {}, el("th", { text: "" }));
    D.tokens.forEach((t, i) => head.append(el("th", { text: t, title: "position " + i, style: spanSet.has(i) ? "background:#ffe08a" : "" })));
    table.append(head);
    D.lens.top.forEach((row, layer) => {
      const tr = el("tr", {}, el("th", { text: "L" + layer }));
      row.forEach((top, i) => {
        const text = `L${layer} position ${i} "${D.tokens[i]}"\n` + top.map(([t, p]) => `${JSON.stringify(t)} ${fmt(p, 3)}`).join("\n");
        tr.append(el("td", { text: top[0][0], style: `background:rgba(33,102,172,${(0.7 * top[0][1]).toFixed(3)})`,
          onmousemove: (e) => showTip(e, text), onmouseleave: hideTip }));
      });
      table.append(tr);
    });
    s.append(el("div", { class: "lens-wrap" }, table));
  }

  if (patterns) { headGrid(); patternSection(); }
  if (D.maps.length) mapsSection();
  if (D.circuit) circuitSection();
  if (D.lens) lensSection();
  if (patterns) openHead(0, 0, false);
  document.body.setAttribute("data-ready", "1");
})();
