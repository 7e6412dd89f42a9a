  // ---- drawing
  const rgba = (hex) => {  // '#rrggbb' -> a pixel as ImageData's Uint32 view holds it
    const v = parseInt(hex.slice(1), 16);
    return (0xff << 24 | (v & 0xff) << 16 | (v & 0xff00) | (v >> 16 & 0xff)) >>> 0;
  };
  let PIX_COLOUR = [], PIX_TINT = [];  // set with the classes
  function setClasses() {
    PIX_COLOUR = Array.from({ length: K + 1 }, (_, c) => rgba(colour(c)));
    PIX_TINT = Array.from({ length: K + 2 }, (_, c) => rgba(tint(c - 1)));  // index cls + 1
    legend();
  }
  const PIX_BG = rgba('#fafafa');
  let scratch = null;
  function bins(n, count) {  // count zeroed rows of n + 1 floats, reused between frames
    const need = (n + 1) * count;
    if (!scratch || scratch.length < need) scratch = new Float64Array(need * 2);
    scratch.fill(0, 0, need);
    return scratch;
  }
  // Adds the length of [s, e) (in bin units) falling in each bin of row `off` of `buf`: partial
  // bins directly, whole bins through a difference array in the row's spare cell onward.
  function cover(buf, off, diff, n, s, e) {
    if (s < 0) s = 0; if (e > n) e = n;
    if (!(e > s)) return;
    const bs = Math.floor(s), be = Math.floor(e);
    if (bs === be) { buf[off + bs] += e - s; return; }
    buf[off + bs] += bs + 1 - s;
    diff[bs + 1] += 1; diff[be] -= 1;
    if (be < n) buf[off + be] += e - be;
  }

  function draw() {
    offY = scrollOffset();
    for (const key in drawn) drawn[key] = 0;
    drawnRuns = runs.map(() => ({ lanes: 0, requests: 0, passes: 0 }));
    drawnByLane = runs.map(() => ({}));
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#fff';
    ctx.fillRect(0, 0, W, H);
    ctx.font = '12px system-ui, Helvetica, Arial, sans-serif';
    ctx.textBaseline = 'alphabetic';
    const step = niceStep(view.t1 - view.t0, Math.max(2, Math.floor(plotW / 90)));
    // Lanes first, clipped below the fixed top rows.
    ctx.save();
    ctx.beginPath(); ctx.rect(0, FIX_H, W, H - FIX_H); ctx.clip();
    ctx.strokeStyle = '#eee'; ctx.lineWidth = 1; ctx.beginPath();
    for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      const x = Math.round(xOf(t)) + 0.5; ctx.moveTo(x, FIX_H); ctx.lineTo(x, H);
    }
    ctx.stroke();
    for (let r = 0; r < runs.length; r++) {
      use(r);
      const before = drawn.requests;
      const place = sections[r];
      if (PAIR) drawSection(r, place.headY - offY, place.passY - offY);
      for (let j = 0; j < lanes.length; j++) {
        const y = place.lanesY + j * LANE_H - offY;
        if (y + LANE_H < FIX_H || y > H) continue;
        drawLane(lanes[j], y);
        drawBalances(lanes[j], y + REQ_H + 2);
        drawn.lanes++;
        drawnRuns[r].lanes++;
      }
      drawnRuns[r].requests = drawn.requests - before;
    }
    use(cursor.run);
    ctx.restore();
    drawRuler(step);
    if (!PAIR) drawPasses(RULER_H + 2);
    // The cursor, across everything.
    const xc = xOf(cursor.t);
    if (xc >= LABEL_W - 1 && xc <= LABEL_W + plotW + 1) {
      ctx.strokeStyle = '#c0392b'; ctx.lineWidth = 1.5; ctx.beginPath();
      ctx.moveTo(xc, 0); ctx.lineTo(xc, H); ctx.stroke();
      ctx.fillStyle = '#c0392b'; ctx.beginPath();
      ctx.moveTo(xc - 6, 0); ctx.lineTo(xc + 6, 0); ctx.lineTo(xc, 8); ctx.fill();
    }
  }

  function drawRuler(step) {
    ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, RULER_H);
    ctx.fillStyle = '#444'; ctx.strokeStyle = '#888'; ctx.lineWidth = 1;
    ctx.textAlign = 'center'; ctx.font = '11px system-ui, Helvetica, Arial, sans-serif';
    ctx.beginPath(); ctx.moveTo(LABEL_W, RULER_H - 0.5); ctx.lineTo(LABEL_W + plotW, RULER_H - 0.5);
    for (let t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      const x = Math.round(xOf(t)) + 0.5;
      ctx.moveTo(x, RULER_H - 5); ctx.lineTo(x, RULER_H);
      ctx.fillText(tickLabel(t, step), x, RULER_H - 8);
    }
    ctx.stroke();
    ctx.textAlign = 'left'; ctx.fillStyle = '#666';
    ctx.fillText('time (drag: cursor)', 8, RULER_H - 8);
    ctx.fillStyle = '#fff'; ctx.fillRect(0, RULER_H, LABEL_W - 2, FIX_H - RULER_H);
  }

  // A run's header band (which run it is) and its pass strip, scrolled with its lanes.
  function drawSection(r, headY, passY) {
    if (headY + HEAD_H > FIX_H && headY < H) {
      ctx.fillStyle = r === 0 ? '#eef3f8' : '#f6f0e6';
      ctx.fillRect(0, headY, W, HEAD_H - 2);
      ctx.font = 'bold 12px system-ui, Helvetica, Arial, sans-serif'; ctx.fillStyle = '#222'; ctx.textAlign = 'left';
      ctx.fillText(`${r === 0 ? 'top' : 'below'}: ${runs[r].label}`, 8, headY + 15);
    }
    if (passY + PASS_H > FIX_H && passY < H) {
      drawPasses(passY);
      drawnRuns[r].passes = drawn.passes;
      if (P.n === 0) {
        ctx.font = '11px system-ui, Helvetica, Arial, sans-serif'; ctx.fillStyle = '#777'; ctx.textAlign = 'left';
        ctx.fillText('no passes recorded in this run', LABEL_W + 6, passY + 17);
      }
    }
  }

  function drawPasses(y) {
    ctx.font = 'bold 12px system-ui, Helvetica, Arial, sans-serif'; ctx.fillStyle = '#222'; ctx.textAlign = 'left';
    ctx.fillText('passes', 8, y + 17);
    ctx.fillStyle = '#fafafa'; ctx.fillRect(LABEL_W, y, plotW, PASS_H);
    const lo = lowerBound(P.t, view.t0), hi = upperBound(P.t, view.t1), m = hi - lo;
    drawn.passes = m;
    if (P.w) {
      // Live: per tick, a bar over its interval split by each class's share of its passes.
      const left = LABEL_W, right = LABEL_W + plotW;
      for (let p = lo; p < Math.min(P.n, hi + 1 + K);) {
        let q = p, total = 0;
        while (q < P.n && P.t[q] === P.t[p]) total += P.w[q++];
        const x0 = Math.max(left, xOf(P.t0[p])), x1 = Math.min(right, xOf(P.t[p]));
        let bottom = y + PASS_H - 2;
        if (x1 > x0) {
          for (let k = p; k < q; k++) {
            const h = (PASS_H - 4) * P.w[k] / total;
            ctx.fillStyle = colour(P.c[k]);
            ctx.fillRect(x0, bottom - h, Math.max(1, x1 - x0 - 0.5), h);
            bottom -= h;
          }
          drawn.passMarks++;
        }
        p = q;
      }
    } else if (m <= plotW / 3) {
      for (let p = lo; p < hi; p++) {
        ctx.fillStyle = colour(P.c[p]);
        ctx.fillRect(Math.round(xOf(P.t[p])) - 1, y + 2, 2, PASS_H - 4);
      }
      drawn.passMarks = m;
    } else {
      // Per device pixel column: the share of each class among the passes in it.
      const n = Math.round(plotW * dpr), rowN = n + 1, buf = bins(n, K + 1);
      const scale = n / (view.t1 - view.t0);
      for (let p = lo; p < hi; p++) {
        const b = Math.min(n - 1, Math.max(0, Math.floor((P.t[p] - view.t0) * scale)));
        buf[P.c[p] * rowN + b]++;
      }
      const h = Math.round((PASS_H - 4) * dpr), img = ctx.createImageData(n, h), px = new Uint32Array(img.data.buffer);
      px.fill(rgba('#fafafa'));
      for (let b = 0; b < n; b++) {
        let total = 0;
        for (let c = 0; c <= K; c++) total += buf[c * rowN + b];
        if (!total) continue;
        drawn.passMarks++;
        let row = h;
        for (let c = 0; c <= K; c++) {
          const top = Math.round(row - h * buf[c * rowN + b] / total), col = PIX_COLOUR[c];
          for (let r = top; r < row; r++) px[r * n + b] = col;
          row = top;
        }
      }
      ctx.putImageData(img, Math.round(LABEL_W * dpr), Math.round((y + 2) * dpr));
    }
    drawRoom(y);
    if (cursor.pass >= 0 && cur === cursor.run) outlinePass(cursor.pass, y, '#c0392b');
    if (hoverPass >= 0 && cur === hoverRun) outlinePass(hoverPass, y, '#000');
  }
  // Over the pass strip: the learned room's slots (blue) and the backend's capacity (dashed), on
  // one scale from 0 at the strip's foot to the largest of either at its top.
  function drawRoom(y) {
    const room = runs[cur].room;
    if (!room) return;
    drawn.room++;
    let most = 1;
    for (const v of room.n) most = Math.max(most, v);
    for (const v of room.c) most = Math.max(most, v);
    const yOf = (v) => y + PASS_H - 2 - (PASS_H - 4) * v / most;
    const steps = (ts, vs) => {
      ctx.beginPath();
      for (let i = 0; i < ts.length; i++) {
        const x = Math.max(LABEL_W, Math.min(LABEL_W + plotW, xOf(ts[i])));
        if (i === 0) ctx.moveTo(x, yOf(vs[i])); else { ctx.lineTo(x, yOf(vs[i - 1])); ctx.lineTo(x, yOf(vs[i])); }
      }
      if (ts.length) ctx.lineTo(LABEL_W + plotW, yOf(vs[vs.length - 1]));
      ctx.stroke();
    };
    // A white halo first, so that the lines read over a dense strip.
    ctx.lineWidth = 4; ctx.strokeStyle = 'rgba(255,255,255,0.85)';
    steps(room.ct, room.c); steps(room.t, room.n);
    ctx.lineWidth = 1.5;
    ctx.setLineDash([4, 3]); ctx.strokeStyle = '#333'; steps(room.ct, room.c);
    ctx.setLineDash([]); ctx.strokeStyle = '#1a5fb4'; steps(room.t, room.n);
    ctx.font = '10px system-ui, Helvetica, Arial, sans-serif'; ctx.fillStyle = '#1a5fb4'; ctx.textAlign = 'left';
    ctx.fillText(`room (0..${most})`, 60, y + 17);
  }
  function outlinePass(p, y, style) {
    const x = xOf(P.t[p]);
    if (x < LABEL_W - 3 || x > LABEL_W + plotW + 3) return;
    ctx.strokeStyle = style; ctx.lineWidth = 1.5;
    ctx.strokeRect(Math.round(x) - 3, y, 6, PASS_H);
  }

  function drawLabel(l, y) {
    ctx.textAlign = 'left'; ctx.fillStyle = '#222';
    ctx.font = 'bold 12px system-ui, Helvetica, Arial, sans-serif';
    ctx.fillText(l.name.length > 20 ? l.name.slice(0, 19) + '\u2026' : l.name, 8, y + 16);
    ctx.font = '11px system-ui, Helvetica, Arial, sans-serif'; ctx.fillStyle = '#666';
    ctx.fillText(`${l.plan}, ${l.shares} share${l.shares === 1 ? '' : 's'}`, 8, y + 31);
    ctx.fillText(`${l.n} requests`, 8, y + 45);
  }
