  // ---- the hook tests and scripts drive the page through
  window.creditloopView = {
    stats() {
      const laneStats = (r) => (l) => ({ name: l.name, requests: l.n, byClass: l.byClass.slice(), drawn: (drawnByLane[r] || {})[l.name] || 0 });
      const classesOf = (ls) => {
        const byClass = new Array(K + 1).fill(0);
        for (const l of ls) l.byClass.forEach((v, c) => { byClass[c] += v; });
        return byClass;
      };
      const out = {
        lanes: runs.reduce((s, r) => s + r.lanes.length, 0), requests: REQUESTS,
        passes: runs.reduce((s, r) => s + r.P.n, 0), dispatchedByClass: classesOf(runs.flatMap((r) => r.lanes)),
        drawn: Object.assign({}, drawn), view: { t0: view.t0, t1: view.t1 }, end: END,
        firstFrameMs: firstFrame, canvas: { width: W, height: H, plotWidth: plotW },
        perLane: runs.flatMap((r, i) => r.lanes.map(laneStats(i))),
        room: runs[cur].room ? { samples: runs[cur].room.n.length, last: runs[cur].room.n[runs[cur].room.n.length - 1] } : null,
        live: LIVE ? { connected: live.connected, following: live.follow, ticks: live.ticks.length, events: live.events, dropped: live.dropped, start: START, rebuildMs: live.rebuildMs } : null,
      };
      // Two runs: each one's counts and what of it the last frame drew.
      if (PAIR) {
        out.runs = runs.map((r, i) => ({
          label: r.label, lanes: r.lanes.length, requests: r.requests, passes: r.P.n,
          dispatchedByClass: classesOf(r.lanes), drawn: Object.assign({}, drawnRuns[i]), perLane: r.lanes.map(laneStats(i)),
        }));
      }
      return out;
    },
    // Live: follow the stream again (as the fit button does).
    follow() { fit(); },
    setCursor(t) { setCursor(t); return this.state(); },
    setPass(p) { setPass(p); return this.state(); },
    stepPass(n) { stepPass(n === undefined ? 1 : n); return this.state(); },
    // Two runs: {t, pass, run, runs: [each run's state]}, pass being in run `run`.
    state() {
      if (!PAIR) return JSON.parse(JSON.stringify(stateAt()));
      const each = runs.map((_, i) => { use(i); return stateAt(); });
      use(cursor.run);
      return JSON.parse(JSON.stringify({ t: cursor.pass >= 0 ? P.t[cursor.pass] : cursor.t, pass: cursor.pass, run: cursor.run, runs: each }));
    },
    // Two runs: which run's passes the cursor steps through.
    setRun(r) { cursor.run = r; cursor.pass = -1; use(r); updatePanel(); request(); return this.state(); },
    pass(p) { return passInfo(p); },
    panel() { return panelEl.innerText; },
    frameTimes() { return frames.slice(); },
    // Draws now, outside the animation frame: for measuring a frame's cost.
    redraw() { const s = performance.now(); draw(); return performance.now() - s; },
    view(t0, t1) { if (t0 !== undefined) { view.t0 = t0; view.t1 = t1; request(); } return { t0: view.t0, t1: view.t1 }; },
    passX(p) { return canvas.getBoundingClientRect().left + xOf(P.w ? (P.t0[p] + P.t[p]) / 2 : P.t[p]); },
    passY() { return canvas.getBoundingClientRect().top + (PAIR ? sections[cursor.run].passY - offY : RULER_H + 2) + PASS_H / 2; },
  };
