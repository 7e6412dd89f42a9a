  // ---- hover: passes and requests
  function passAt(x) {
    if (!P.n) return -1;
    if (P.w) {  // live: the tick whose interval holds x
      const t = tOf(x), i = lowerBound(P.t, t);
      return i < P.n && P.t0[i] <= t ? lowerBound(P.t, P.t[i]) : -1;
    }
    const t = tOf(x), tol = 4 * (view.t1 - view.t0) / plotW;
    const i = lowerBound(P.t, t);
    let best = -1, bestD = Infinity;
    for (const j of [i - 1, i]) {
      if (j < 0 || j >= P.n) continue;
      const d = Math.abs(P.t[j] - t);
      if (d <= tol && d < bestD) { best = j; bestD = d; }
    }
    // Several passes can share an instant: take the first of them.
    if (best >= 0) best = lowerBound(P.t, P.t[best]);
    return best;
  }
  function requestAt(x, y) {
    const w = where(y);
    if (!w || w.kind !== 'lane') return null;
    use(w.r);
    const l = lanes[w.j], top = w.top;
    if (y - top > REQ_H) return null;
    const [lo, hi] = visible(l);
    if (hi - lo > DETAIL_MAX) return { lane: l, aggregated: hi - lo };
    const row = Math.floor((y - top - 2) / ((REQ_H - 4) / l.rows)), t = tOf(x), tol = 2 * (view.t1 - view.t0) / plotW;
    for (let i = lo; i < hi; i++) {
      if (i % l.rows !== row) continue;
      if (l.a[i] - tol <= t && t <= l.endT[i] + tol) return { lane: l, i };
    }
    return null;
  }
  function showTip(html, ev) {
    tip.innerHTML = html; tip.hidden = false;
    const r = tip.getBoundingClientRect();
    let x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - 14;
    if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - r.height - 14);
    tip.style.left = x + 'px'; tip.style.top = y + 'px';
  }
  function hover(ev) {
    const rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    let hp = -1, hr = -1;
    const w = where(y);
    if (w && w.kind === 'pass' && x >= LABEL_W) {
      use(w.r);
      hp = passAt(x);
      if (hp >= 0) {
        hr = w.r;
        const same = upperBound(P.t, P.t[hp]) - hp;
        if (LIVE) {
          let html = '';
          for (let q = hp; q < P.n && P.t[q] === P.t[hp]; q++) html += passHtml(q);
          showTip(html + '<div class="muted">click: the cursor here; this pauses the live view</div>', ev);
        } else showTip(passHtml(hp) + (same > 1 ? `<div class="muted">${same} passes at this instant: click, then &rarr; to step through them</div>` : ''), ev);
      } else tip.hidden = true;
    } else if (w && w.kind === 'lane' && x >= LABEL_W) {
      const r = requestAt(x, y);
      if (r && r.i !== undefined) {
        const l = r.lane, i = r.i, sent = i < l.nd;
        showTip(`<b>${esc(l.name)}</b>, request ${l.req[i]}<br>arrived ${sec(l.a[i])}` +
          (sent ? `<br>dispatched ${sec(l.d[i])} as ${sw(l.cls[i])}<b>${esc(CLASSES[l.cls[i]])}</b> after waiting ${sec(l.d[i] - l.a[i])}` +
            (l.c[i] >= 0 ? `<br>completed ${sec(l.c[i])}` : '<br>in service when the run stopped') +
            (l.cost ? `<br>cost ${num(l.cost[i])} credits` : '')
            : '<br>still queued when the run stopped'), ev);
      } else if (r && r.aggregated) {
        showTip(`<b>${esc(r.lane.name)}</b>: ${r.aggregated} requests in view, drawn aggregated; zoom in to see each`, ev);
      } else tip.hidden = true;
    } else tip.hidden = true;
    use(cursor.run);
    if (hp !== hoverPass || hr !== hoverRun) { hoverPass = hp; hoverRun = hr; request(); }
  }
