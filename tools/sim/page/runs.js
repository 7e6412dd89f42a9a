  // ---- data: columns back from differences; times in microseconds, balances in micro-credits
  function undelta(a, Type) {
    const out = new (Type || Float64Array)(a.length);
    let s = 0;
    for (let i = 0; i < a.length; i++) { s += a[i]; out[i] = s; }
    return out;
  }
  function lowerBound(a, x, lo, hi) {  // first index in [lo, hi) with a[i] >= x
    lo = lo || 0; hi = hi === undefined ? a.length : hi;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  function upperBound(a, x, lo, hi) {  // first index in [lo, hi) with a[i] > x
    lo = lo || 0; hi = hi === undefined ? a.length : hi;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] <= x) lo = m + 1; else hi = m; }
    return lo;
  }

  // What is drawn: set whole by loadRun() (the simulator's data) or liveModel() (the stream's).
  // Each run holds its lanes and passes; `lanes` and `P` are those of the run in use, and use(r)
  // points them at run r. Outside a loop over the runs they point at the run the cursor's pass is
  // in (live and single-run pages have one run).
  const NO_PASSES = { n: 0, t: new Float64Array(0), c: new Uint8Array(0), e0: Int32Array.of(0), i0: Int32Array.of(0), e: [], i: [], r: [], r0: Int32Array.of(0), rb: [], rn: [] };
  let START = 0, END = 1, lanes = [], P = NO_PASSES, REQUESTS = 0;
  let runs = [{ label: '', lanes, P, requests: 0, balances: true }], cur = 0;
  function use(r) { cur = r; lanes = runs[r].lanes; P = runs[r].P; }

  // A lane's derived columns, from its requests in arrival order (a; d and c for the nd
  // dispatched ones, c < 0 when not completed; cls) and its balance samples (bt, b).
  function finishLane(l) {
    const { a, c, n, nd } = l;
    // Requests are drawn from arrival to completion (or to the end). Arrivals are sorted; the
    // running maximum of the ends is too, which finds the first request still in view.
    const endT = new Float64Array(n), reach = new Float64Array(n);
    let most = -Infinity;
    for (let i = 0; i < n; i++) {
      endT[i] = i < nd && c[i] >= 0 ? c[i] : END;
      most = Math.max(most, endT[i]);
      reach[i] = most;
    }
    // The most requests alive at once sets the rows; the longest queue scales the aggregates.
    const ends = Float64Array.from(endT).sort();
    let alive = 0, maxAlive = 1, j = 0;
    for (let i = 0; i < n; i++) {
      while (j < n && ends[j] < a[i]) { alive--; j++; }
      alive++; maxAlive = Math.max(maxAlive, alive);
    }
    let queue = 0, maxQueue = 1, q = 0;
    for (let i = 0; i < n; i++) {
      while (q < nd && l.d[q] < a[i]) { queue--; q++; }
      queue++; maxQueue = Math.max(maxQueue, queue);
    }
    let lo = 0, hi = 1;
    l.cap.forEach((cap) => { hi = Math.max(hi, cap); });
    l.b.forEach((col) => { for (let i = 0; i < col.length; i++) { lo = Math.min(lo, col[i] / 1e6); hi = Math.max(hi, col[i] / 1e6); } });
    const byClass = new Array(K + 1).fill(0);
    for (let i = 0; i < nd; i++) byClass[l.cls[i]]++;
    return Object.assign(l, {
      endT, reach, lo, hi, byClass, maxQueue,
      // At least four rows, so that a lone request is a bar and not a block.
      rows: Math.max(4, Math.min(maxAlive, Math.floor((REQ_H - 4) / 3))),
    });
  }

  // One run of the simulator's data: its lanes and passes (END already covers every run).
  function runOf(src) {
    const ls = src.participants.map((p) => {
      const a = undelta(p.a), n = a.length, nd = p.w.length;
      const d = new Float64Array(nd), c = new Float64Array(nd), cls = Int8Array.from(p.c);
      const dp = undelta(p.dp, Int32Array), cp = new Int32Array(nd);
      for (let i = 0; i < nd; i++) {
        d[i] = a[i] + p.w[i];
        c[i] = p.s[i] < 0 ? -1 : d[i] + p.s[i];
        cp[i] = p.cp[i] < 0 ? -1 : dp[i] + 1 + p.cp[i];
      }
      // Withdrawn requests come apart (xreq, xa, xw), so that the dispatched ones stay a prefix.
      const xa = undelta(p.xa || []), xe = new Float64Array(xa.length);
      for (let i = 0; i < xa.length; i++) xe[i] = xa[i] + p.xw[i];
      return finishLane({
        name: p.name, plan: p.plan, shares: p.shares, held: p.held, rate: p.rate, cap: p.cap,
        req: undelta(p.req), a, d, c, cls, dp, cp, n, nd, xreq: undelta(p.xreq || []), xa, xe,
        bt: undelta(p.bt), bk: undelta(p.bk, Int32Array), b: p.b.map((col) => undelta(col)), summary: p.summary,
      });
    });
    const passes = (() => {
      const ps = src.passes, n = ps.t.length;
      const t = undelta(ps.t), c = Uint8Array.from(ps.c);
      const e0 = new Int32Array(n + 1), i0 = new Int32Array(n + 1);
      for (let p = 0; p < n; p++) { e0[p + 1] = e0[p] + ps.ne[p]; i0[p + 1] = i0[p] + ps.ni[p]; }
      // Where each ignored entry's balance and next credit sit among the below_one_credit ones.
      const r0 = new Int32Array(ps.i.length + 1);
      for (let q = 0; q < ps.i.length; q++) r0[q + 1] = r0[q] + (ps.r[q] === 1 ? 1 : 0);
      return { n, t, c, e0, i0, e: ps.e, i: ps.i, r: ps.r, r0, rb: ps.rb, rn: ps.rn };
    })();
    // The learned room and the backend's capacity, each a step from its instant on.
    const room = src.room ? { t: undelta(src.room.t), n: src.room.n, ct: undelta(src.room.ct), c: src.room.c } : null;
    return { src, label: src.label, lanes: ls, P: passes, room, requests: ls.reduce((s, l) => s + l.n + l.xa.length, 0), balances: src.balances !== false };
  }
  function loadRun() {
    K = D.k; CLASSES = D.classes;
    START = 0; END = Math.max(1, ...SOURCES.map((src) => src.end));
    runs = SOURCES.map(runOf);
    REQUESTS = runs.reduce((s, r) => s + r.requests, 0);
    use(0);
  }
