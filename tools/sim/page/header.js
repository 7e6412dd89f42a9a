  // ---- header and legend
  function header() {
    if (LIVE && !live.hello) {
      document.title = document.getElementById('title').textContent = 'creditloop-server \u00b7 live';
      document.getElementById('run').textContent = 'connecting to the server\u2026';
      return;
    }
    const name = LIVE ? 'creditloop-server \u00b7 live' : 'creditloop-sim \u00b7 ' + RAW.title;
    if (document.title !== name) document.title = name;
    document.getElementById('title').textContent = name;
    const classes = `${K} metered class${K === 1 ? '' : 'es'} (${CLASSES.slice(0, K).map(esc).join(', ')}), unmetered ${esc(CLASSES[K])}`;
    const slots = LIVE ? live.hello.slots : D.slots;
    const plansHtml = (plans) => plans.map((pl) => {
      const terms = pl.terms.map((t, c) => (t ? `${sw(c)}${esc(CLASSES[c])} ${num(t[0])}/s burst ${num(t[1])}` : null)).filter(Boolean);
      return `<span><b>plan ${esc(pl.name)}</b>: ${terms.length ? terms.join(', ') : 'no metered class'} (per share)</span>`;
    }).join(' ');
    const peopleHtml = (ls) => ls.map((l) =>
      `<span><b>${esc(l.name)}</b> ${esc(l.plan)}, ${l.shares} share${l.shares === 1 ? '' : 's'}, ${l.n} requests</span>`).join(' ');
    if (PAIR) {
      document.getElementById('run').innerHTML = 'two runs on one time axis: ' + classes + ` &middot; server: ${slots} slot${slots === 1 ? '' : 's'}`;
      document.getElementById('plans').innerHTML = runs.map((r, i) =>
        `<div class="runname"><b>${i === 0 ? 'top' : 'below'}: ${esc(r.label)}</b> &middot; ${r.requests} requests, ${r.P.n} passes</div>` +
        '<div>' + plansHtml(r.src.plans) + '</div><div>' + peopleHtml(r.lanes) + '</div>').join('');
      return;
    }
    document.getElementById('run').innerHTML = LIVE
      ? classes + (slots === 'auto' ? ' &middot; server: a learned room' : ` &middot; server: ${slots} slot${slots === 1 ? '' : 's'}`) +
        `, ${esc(live.hello.scheduler)} scheduler` +
        ` &middot; the last ${num(live.hello.window_us / 1e6)} s (time: seconds since the server started), sampled every ${num(live.hello.tick_us / 1e3)} ms` +
        ` &middot; ${REQUESTS} requests answered in it, ${lanes.length} tenants` +
        (live.dropped ? ` &middot; <b class="low">${live.dropped} requests not recorded (too many)</b>` : '') +
        ` &middot; <b id="status">${!live.connected ? 'disconnected: reconnecting' : live.follow ? 'live' : 'paused: fit (0) follows again'}</b>`
      : classes + (D.auto ? ` &middot; server: a learned room of ${D.auto[0]}..${D.auto[1]} slots` : ` &middot; server: ${slots} slot${slots === 1 ? '' : 's'}`) +
        (D.room && D.room.c.length ? `, a backend of capacity ${D.room.c.join(', ')}` : '') +
        ` &middot; ${D.until === null ? 'runs until every request completes' : 'until ' + sec(D.until)}` +
        ` &middot; ${REQUESTS} requests, ${P.n} passes, ${lanes.length} participants`;
    document.getElementById('plans').innerHTML = plansHtml(LIVE ? live.hello.plans : D.plans);
    document.getElementById('people').innerHTML = (LIVE ? 'tenants: ' : 'participants, in ring order: ') + peopleHtml(lanes);
  }
  function legend() {
    document.getElementById('legend').innerHTML =
      CLASSES.map((name, c) => `<span><i style="background:${colour(c)}"></i>${esc(name)}${c === K ? ' (unmetered)' : ''}</span>`).join('') +
      `<span><i class="thin" style="background:${TINT[0]}"></i>waiting (tint of its class)</span>` +
      (LIVE ? '' : `<span><i class="thin" style="background:${QUEUED}"></i>still queued at the stop</span>`) +
      (runs.some((r) => r.lanes.some((l) => l.xa && l.xa.length > 0)) ? `<span><i class="thin" style="background:${WITHDRAWN}"></i>withdrawn while queued</span>` : '') +
      `<span><i class="dash"></i>one credit</span>`;
  }
