  // Requests of lane `l` in view: from the first whose reach is in view to the last arrived.
  function visible(l) {
    return [lowerBound(l.reach, view.t0), upperBound(l.a, view.t1)];
  }

  function withdrawnInView(l) {
    if (!l.xa || l.xa.length === 0) return 0;
    let m = 0;
    for (let j = 0, hi = upperBound(l.xa, view.t1); j < hi; j++) if (l.xe[j] >= view.t0) m++;
    return m;
  }
  // Withdrawn requests: queued (grey) from arrival to withdrawal, where a tick marks it.
  function drawWithdrawn(l, y, rowH, thin, xmin, xmax) {
    if (!l.xa || l.xa.length === 0) return;
    const hi = upperBound(l.xa, view.t1);
    ctx.beginPath();
    let any = false;
    for (let j = 0; j < hi; j++) {
      if (l.xe[j] < view.t0) continue;
      const xa = Math.max(xmin, xOf(l.xa[j])), xe = Math.min(xmax, xOf(l.xe[j]));
      const ry = y + 2 + rowH * (((l.nd + j) % l.rows) + 0.5);
      ctx.fillStyle = QUEUED; ctx.fillRect(xa, ry - thin / 2, Math.max(xe - xa, 1), thin);
      ctx.rect(xe - 0.75, ry - rowH * 0.45, 1.5, rowH * 0.9);
      any = true;
    }
    if (any) { ctx.fillStyle = WITHDRAWN; ctx.fill(); }
  }

  function drawLane(l, y) {
    drawLabel(l, y);
    const [lo, hi] = visible(l), m = Math.max(0, hi - lo);
    drawn.requests += m + withdrawnInView(l);
    drawnByLane[cur][l.name] = m;
    ctx.fillStyle = '#fafafa'; ctx.fillRect(LABEL_W, y, plotW, REQ_H);
    if (m <= DETAIL_MAX) {
      drawn.individual += m;
      const rowH = (REQ_H - 4) / l.rows, thin = Math.max(1, Math.min(2, rowH * 0.3)), thick = Math.max(1.5, rowH * 0.8);
      const xmin = LABEL_W - 5, xmax = LABEL_W + plotW + 5;
      // Waiting first, by tint, then service, by colour: one path a colour.
      for (let c = -1; c <= K; c++) {
        ctx.beginPath();
        let any = false;
        for (let i = lo; i < hi; i++) {
          const k = i < l.nd ? l.cls[i] : -1;
          if (k !== c) continue;
          const xa = Math.max(xmin, xOf(l.a[i])), xd = Math.min(xmax, xOf(i < l.nd ? l.d[i] : END));
          if (xd < xmin || xa > xmax) continue;
          const ry = y + 2 + rowH * ((i % l.rows) + 0.5);
          ctx.rect(xa, ry - thin / 2, Math.max(xd - xa, 1), thin);
          any = true;
        }
        if (any) { ctx.fillStyle = tint(c); ctx.fill(); }
      }
      for (let c = 0; c <= K; c++) {
        ctx.beginPath();
        let any = false;
        for (let i = lo; i < Math.min(hi, l.nd); i++) {
          if (l.cls[i] !== c) continue;
          const xd = Math.max(xmin, xOf(l.d[i])), xe = Math.min(xmax, xOf(l.endT[i]));
          if (xe < xmin || xd > xmax) continue;
          const ry = y + 2 + rowH * ((i % l.rows) + 0.5);
          ctx.rect(xd, ry - thick / 2, Math.max(xe - xd, 1.5), thick);
          any = true;
        }
        if (any) { ctx.fillStyle = colour(c); ctx.fill(); }
      }
      drawWithdrawn(l, y, rowH, thin, xmin, xmax);
      return;
    }
    drawn.aggregated += m;
    // Per device pixel column, time-averaged: requests waiting by the class they went out under
    // (grey: still queued), scaled to the lane's longest queue; and in a strip at the bottom,
    // each class's share of the requests in service.
    const n = Math.round(plotW * dpr), rowN = n + 1, cats = K + 2, buf = bins(n, 2 * cats + 2);
    const diffW = new Float64Array(buf.buffer, buf.byteOffset + (2 * cats) * rowN * 8, rowN);
    const scale = n / (view.t1 - view.t0);
    for (let c = 0; c < cats; c++) {
      // One category at a time keeps one difference row.
      diffW.fill(0);
      const wOff = c * rowN;
      for (let i = lo; i < hi; i++) {
        const k = i < l.nd ? l.cls[i] : -1;
        if (k + 1 !== c) continue;
        cover(buf, wOff, diffW, n, (l.a[i] - view.t0) * scale, ((i < l.nd ? l.d[i] : END) - view.t0) * scale);
      }
      let run = 0;
      for (let b = 0; b < n; b++) { run += diffW[b]; buf[wOff + b] += run; }
    }
    for (let c = 0; c <= K; c++) {
      diffW.fill(0);
      const sOff = (cats + c) * rowN;
      for (let i = lo; i < Math.min(hi, l.nd); i++) {
        if (l.cls[i] !== c) continue;
        cover(buf, sOff, diffW, n, (l.d[i] - view.t0) * scale, (l.endT[i] - view.t0) * scale);
      }
      let run = 0;
      for (let b = 0; b < n; b++) { run += diffW[b]; buf[sOff + b] += run; }
    }
    const h = Math.round(REQ_H * dpr), strip = Math.round(STRIP_H * dpr), area = h - strip - Math.round(3 * dpr);
    const img = ctx.createImageData(n, h), px = new Uint32Array(img.data.buffer);
    px.fill(PIX_BG);
    for (let b = 0; b < n; b++) {
      let row = h - strip - 1;
      for (let c = 0; c < cats; c++) {
        const v = buf[c * rowN + b];
        if (v <= 0) continue;
        const top = Math.max(0, Math.round(row - area * v / l.maxQueue)), col = PIX_TINT[c];
        for (let r = top; r < row; r++) px[r * n + b] = col;
        row = top;
      }
      let total = 0;
      for (let c = 0; c <= K; c++) total += buf[(cats + c) * rowN + b];
      if (total <= 0) continue;
      row = h;
      for (let c = 0; c <= K; c++) {
        const v = buf[(cats + c) * rowN + b];
        if (v <= 0) continue;
        const top = Math.round(row - strip * v / total), col = PIX_COLOUR[c];
        for (let r = top; r < row; r++) px[r * n + b] = col;
        row = top;
      }
    }
    // putImageData ignores the clip: keep the part below the fixed top rows.
    const yd = Math.round(y * dpr), skip = Math.max(0, Math.round(FIX_H * dpr) - yd);
    if (skip < h) ctx.putImageData(img, Math.round(LABEL_W * dpr), yd, 0, skip, n, h - skip);
    ctx.font = '10px system-ui, Helvetica, Arial, sans-serif'; ctx.textAlign = 'right';
    const note = `${m} requests, aggregated: queue depth (peak ${l.maxQueue}) by class; strip: class mix in service`;
    ctx.fillStyle = 'rgba(255,255,255,0.8)';
    ctx.fillRect(LABEL_W + plotW - 8 - ctx.measureText(note).width, y + 1, ctx.measureText(note).width + 8, 13);
    ctx.fillStyle = '#555';
    ctx.fillText(note, LABEL_W + plotW - 4, y + 11);
  }

  // A held bucket's balance at time t (microseconds) from its sample s (< 0: none yet, full).
  function refilled(l, h, s, t) {
    const cap = l.cap[h];
    if (s < 0) return cap;
    const v = l.b[h][s] / 1e6 + l.rate[h] * (t - l.bt[s]) / 1e6;
    return v < cap ? v : cap;
  }

  function drawBalances(l, y) {
    ctx.fillStyle = '#fff'; ctx.strokeStyle = '#eee'; ctx.lineWidth = 1;
    ctx.fillRect(LABEL_W, y, plotW, BAL_H); ctx.strokeRect(LABEL_W + 0.5, y + 0.5, plotW - 1, BAL_H - 1);
    ctx.font = '10px system-ui, Helvetica, Arial, sans-serif'; ctx.fillStyle = '#777'; ctx.textAlign = 'right';
    if (!l.held.length) {
      ctx.textAlign = 'left';
      ctx.fillText(runs[cur].balances ? 'no buckets: the plan holds no metered class'
        : 'balances: not recorded in a capture', LABEL_W + 6, y + 21);
      return;
    }
    const top = y + 3, height = BAL_H - 6, yOf = (b) => top + height * (l.hi - b) / (l.hi - l.lo);
    ctx.fillText(num(l.hi, 3), LABEL_W - 4, top + 8);
    ctx.fillText(num(l.lo, 3), LABEL_W - 4, top + height);
    ctx.fillText('balances', LABEL_W - 40, top + 18);
    ctx.save();
    ctx.beginPath(); ctx.rect(LABEL_W, y, plotW, BAL_H); ctx.clip();
    ctx.strokeStyle = '#c00'; ctx.setLineDash([3, 2]); ctx.beginPath();
    ctx.moveTo(LABEL_W, Math.round(yOf(1)) + 0.5); ctx.lineTo(LABEL_W + plotW, Math.round(yOf(1)) + 0.5); ctx.stroke();
    ctx.setLineDash([]);
    if (l.lo < 0) {
      ctx.strokeStyle = '#ccc'; ctx.beginPath();
      ctx.moveTo(LABEL_W, Math.round(yOf(0)) + 0.5); ctx.lineTo(LABEL_W + plotW, Math.round(yOf(0)) + 0.5); ctx.stroke();
    }
    // Samples in view, and one past it on the right for the line to leave the plot.
    const last = Math.min(l.bt.length, lowerBound(l.bt, view.t1) + 1);
    const m = last - Math.max(0, upperBound(l.bt, view.t0) - 1);
    for (let h = 0; h < l.held.length; h++) {
      const rate = l.rate[h] / 1e6, cap = l.cap[h];
      ctx.strokeStyle = ctx.fillStyle = colour(l.held[h]);
      ctx.lineWidth = 1.3;
      if (m <= plotW) {
        // Exact: the refill between samples, its corner where the bucket is full, each step.
        const s0 = upperBound(l.bt, view.t0) - 1;
        let pt = s0 < 0 ? 0 : l.bt[s0], pb = s0 < 0 ? cap : l.b[h][s0] / 1e6;
        let t = Math.max(view.t0, pt);
        ctx.beginPath();
        ctx.moveTo(xOf(t), yOf(Math.min(cap, pb + rate * (t - pt))));
        const refillTo = (t2) => {
          if (pb < cap && rate > 0) {
            const full = pt + (cap - pb) / rate;
            if (full < t2 && full > t) ctx.lineTo(xOf(full), yOf(cap));
          }
          ctx.lineTo(xOf(t2), yOf(Math.min(cap, pb + rate * (t2 - pt))));
        };
        for (let i = s0 + 1; i < last; i++) {
          refillTo(l.bt[i]);
          pb = l.b[h][i] / 1e6; pt = t = l.bt[i];
          ctx.lineTo(xOf(pt), yOf(pb));
        }
        if (last >= l.bt.length) refillTo(Math.min(view.t1, END));
        ctx.stroke();
      } else {
        // Per pixel column, the range the balance covers there: one filled band.
        const n = Math.ceil(plotW), mn = new Float64Array(n), mx = new Float64Array(n);
        const dt = (view.t1 - view.t0) / n;
        const s0 = upperBound(l.bt, view.t0) - 1;
        let i = s0 + 1, pt = s0 < 0 ? 0 : l.bt[s0], pb = s0 < 0 ? cap : l.b[h][s0] / 1e6;
        let b0 = 0;
        for (let b = 0; b < n; b++) {
          const t0 = view.t0 + b * dt, t1 = t0 + dt;
          let lo = Math.min(cap, pb + rate * (Math.max(t0, pt) - pt)), hi = lo;
          while (i < last && l.bt[i] < t1) {
            const before = Math.min(cap, pb + rate * (l.bt[i] - pt));
            pb = l.b[h][i] / 1e6; pt = l.bt[i]; i++;
            if (before < lo) lo = before; if (before > hi) hi = before;
            if (pb < lo) lo = pb; if (pb > hi) hi = pb;
          }
          const after = Math.min(cap, pb + rate * (t1 - pt));
          if (after < lo) lo = after; if (after > hi) hi = after;
          mn[b] = lo; mx[b] = hi;
          if (t0 > END) break;
          b0 = b;
        }
        ctx.beginPath();
        ctx.moveTo(LABEL_W, yOf(mx[0]));
        for (let b = 0; b <= b0; b++) ctx.lineTo(LABEL_W + b + 1, yOf(mx[b]));
        for (let b = b0; b >= 0; b--) ctx.lineTo(LABEL_W + b + 1, yOf(mn[b]) + 1);
        ctx.lineTo(LABEL_W, yOf(mn[0]) + 1);
        ctx.fill();
      }
    }
    ctx.restore();
  }
