  // ---- live: the model again from the ticks kept, when a tick has come (once a frame at most)
  function rebuild() {
    live.stale = false;
    if (!live.hello) { header(); return; }
    const began = performance.now();
    const before = lanes.length, at = cursor.pass >= 0 ? { t: P.t[cursor.pass], c: P.c[cursor.pass] } : null;
    liveModel();
    if (lanes.length !== before) resize();
    if (live.follow) {
      fitView();
      // On the latest tick's first pass entry: the loop as it is now.
      cursor.pass = P.n ? lowerBound(P.t, P.t[P.n - 1]) : -1;
      cursor.t = P.n ? P.t[cursor.pass] : END;
    } else if (at) {
      // The entries shift as old ticks go: find the one the cursor stood on, if it is still kept.
      let p = lowerBound(P.t, at.t);
      while (p < P.n && P.t[p] === at.t && P.c[p] !== at.c) p++;
      cursor.pass = p < P.n && P.t[p] === at.t ? p : -1;
      if (cursor.pass < 0) cursor.t = Math.max(START, at.t);
    }
    clampView();
    header();
    updatePanel();
    live.rebuildMs = performance.now() - began;
  }
  function connect() {
    const source = new EventSource(RAW.live);
    source.addEventListener('hello', (ev) => {
      // The first event of each connection; the window follows it, then the ticks live.
      live.hello = JSON.parse(ev.data);
      live.ticks = [];
      live.requests = 0;
      live.connected = true;
      if (!K) { K = live.hello.k; CLASSES = live.hello.classes; setClasses(); }
      live.stale = true; request();
    });
    source.addEventListener('tick', (ev) => {
      if (!live.hello) return;
      const tick = JSON.parse(ev.data);
      tick.byName = new Map(tick.tenants.map((x) => [x.name, x]));
      tick.count = 0;
      for (const name in tick.requests) tick.count += tick.requests[name].a.length;
      live.requests += tick.count;
      live.ticks.push(tick);
      live.events++;
      live.dropped += tick.dropped;
      live.stale = true; request();
    });
    // EventSource reconnects by itself; the server starts the new connection with its hello.
    source.onerror = () => { live.connected = false; live.stale = true; request(); };
  }
