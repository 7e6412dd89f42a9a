  // ---- live: the stream's ticks, kept for one window
  // A tick holds the requests answered since the last one (arrival, start, finish, class, cost,
  // by tenant) and a sample of the loop: per tenant its queue, balances, next credits and
  // dispatches per class since the last tick, and the passes settled on each class since then.
  const live = { hello: null, ticks: [], connected: false, stale: false, follow: true, events: 0, dropped: 0, rebuildMs: 0, requests: 0 };
  function liveModel() {
    const h = live.hello, ticks = live.ticks;
    END = ticks.length ? ticks[ticks.length - 1].t : h.now;
    // The window, and no more requests than the server keeps for a new page (the oldest go).
    while (ticks.length && (ticks[0].t < END - h.window_us || live.requests > h.max_requests)) live.requests -= ticks.shift().count;
    START = Math.max(0, END - h.window_us);  // 0: when the server started
    // Lanes: the tenants of the latest tick in its order, then any still in older requests.
    const index = new Map(), names = [];
    const add = (name) => { if (!index.has(name)) { index.set(name, names.length); names.push(name); } };
    if (ticks.length) ticks[ticks.length - 1].tenants.forEach((x) => add(x.name));
    for (const t of ticks) Object.keys(t.requests).forEach(add);
    const plans = new Map(h.plans.map((p) => [p.name, p]));
    lanes = names.map((name) => {
      let info = null;
      for (let i = ticks.length - 1; i >= 0 && !info; i--) info = ticks[i].byName.get(name) || null;
      const plan = info ? plans.get(info.plan) : undefined, shares = info ? info.shares : 1;
      const held = [], cap = [], perSecond = [];
      if (plan) plan.terms.forEach((t, c) => { if (t) { held.push(c); perSecond.push(t[0] * shares); cap.push(t[1] * shares); } });
      // Its requests answered in the window, in arrival order.
      const ra = [], rd = [], rc = [], rk = [], rcost = [];
      for (const t of ticks) {
        const r = t.requests[name];
        if (!r) continue;
        for (let i = 0; i < r.a.length; i++) { ra.push(r.a[i]); rd.push(r.d[i]); rc.push(r.c[i]); rk.push(r.k[i]); rcost.push(r.cost[i]); }
      }
      const order = ra.map((_, i) => i).sort((x, y) => ra[x] - ra[y] || rd[x] - rd[y]);
      const n = order.length;
      const a = new Float64Array(n), d = new Float64Array(n), c = new Float64Array(n), cls = new Int8Array(n), cost = new Float64Array(n);
      order.forEach((o, i) => { a[i] = ra[o]; d[i] = rd[o]; c[i] = rc[o]; cls[i] = rk[o]; cost[i] = rcost[o]; });
      // Its samples: balances are drawn as sampled, steps between ticks (a rate of 0).
      const bt = [], b = held.map(() => []), queued = [], next = [];
      for (const t of ticks) {
        const x = t.byName.get(name);
        if (!x) continue;
        bt.push(t.t); queued.push(x.queued); next.push(x.next);
        held.forEach((k, j) => {
          const v = x.balance[CLASSES[k]];
          const prev = b[j].length ? b[j][b[j].length - 1] : cap[j] * 1e6;
          b[j].push(v === undefined ? prev : Math.round(v * 1e6));
        });
      }
      return finishLane({
        name, plan: info ? info.plan : '?', shares, held, rate: held.map(() => 0), perSecond, cap,
        req: Float64Array.from({ length: n }, (_, i) => i + 1), a, d, c, cls, cost,
        dp: new Int32Array(n), cp: new Int32Array(n), n, nd: n,
        bt: Float64Array.from(bt), bk: new Int32Array(bt.length), b: b.map((col) => Float64Array.from(col)), queued, next,
      });
    });
    // One pass-lane entry per tick and class the loop settled on in it, with how many passes,
    // who took part (dispatched under that class in the tick, or queued and holding a credit of
    // it at the sample) and who was passed over and why (queued, with no bucket of that class,
    // or below one credit, with the next credit's instant).
    const t = [], t0 = [], c = [], w = [], e = [], ne = [], ig = [], ni = [], r = [], rb = [], rn = [];
    let prevT = null;
    for (const tick of ticks) {
      const from = prevT === null ? tick.t - h.tick_us : prevT;
      prevT = tick.t;
      tick.passes.forEach((count, k) => {
        if (!count) return;
        t.push(tick.t); t0.push(from); c.push(k); w.push(count);
        let eligible = 0, ignored = 0;
        for (const x of tick.tenants) {
          const j = index.get(x.name);
          if (x.dispatched[k] > 0) { e.push(j); eligible++; continue; }
          if (!(x.queued > 0)) continue;
          if (k === K) { e.push(j); eligible++; continue; }
          const bal = x.balance[CLASSES[k]];
          if (bal === undefined) { ig.push(j); r.push(0); ignored++; }
          else if (bal < 1) {
            ig.push(j); r.push(1); ignored++;
            rb.push(Math.round(bal * 1e6));
            const nx = x.next[CLASSES[k]];
            rn.push(nx === undefined ? -1 : nx);
          } else { e.push(j); eligible++; }
        }
        ne.push(eligible); ni.push(ignored);
      });
    }
    const n = t.length, e0 = new Int32Array(n + 1), i0 = new Int32Array(n + 1);
    for (let p = 0; p < n; p++) { e0[p + 1] = e0[p] + ne[p]; i0[p + 1] = i0[p] + ni[p]; }
    const r0 = new Int32Array(r.length + 1);
    for (let q = 0; q < r.length; q++) r0[q + 1] = r0[q] + (r[q] === 1 ? 1 : 0);
    P = { n, t: Float64Array.from(t), t0: Float64Array.from(t0), w: Float64Array.from(w), c: Uint8Array.from(c), e0, i0, e, i: ig, r, r0, rb, rn };
    REQUESTS = lanes.reduce((s, l) => s + l.n, 0);
    // A learned room as each tick sampled it, a step from the tick on (no backend capacity here).
    const roomT = [], roomN = [];
    for (const tick of ticks) if (tick.room) { roomT.push(tick.t); roomN.push(tick.room.slots); }
    const room = roomN.length ? { t: roomT, n: roomN, ct: [], c: [] } : null;
    runs = [{ label: '', lanes, P, room, requests: REQUESTS, balances: true }];
    use(0);
  }
