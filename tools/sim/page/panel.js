  // ---- the state at the cursor
  // On a pass: as that pass settles its class, before its dispatches. Off passes: after every
  // event at or before the cursor's time.
  function stateAt() {
    const p = cur === cursor.run ? cursor.pass : -1, t = p >= 0 ? P.t[p] : cursor.t;
    const out = { t, pass: p, lanes: [] };
    if (LIVE) {
      // The sample at or before t: queue, balances, next credits. Requests: those answered.
      for (const l of lanes) {
        const s = upperBound(l.bt, t) - 1, arrived = upperBound(l.a, t);
        let dispatched = 0, completed = 0;
        for (let i = 0; i < arrived; i++) if (l.d[i] <= t) { dispatched++; if (l.c[i] <= t) completed++; }
        out.lanes.push({
          name: l.name, queued: s < 0 ? 0 : l.queued[s], inFlight: dispatched - completed, arrived, dispatched, completed,
          balances: l.held.map((_, h) => (s < 0 ? null : l.b[h][s] / 1e6)), next: s < 0 ? {} : l.next[s],
        });
      }
      return out;
    }
    for (const l of lanes) {
      const arrived = upperBound(l.a, t);
      const dispatched = p >= 0 ? lowerBound(l.dp, p) : upperBound(l.d, t);
      // Completions are not in order within a lane (services differ): count them.
      let completed = 0;
      const done = (i) => (p >= 0 ? l.cp[i] >= 0 && l.cp[i] <= p : l.c[i] >= 0 && l.c[i] <= t);
      for (let i = 0; i < dispatched; i++) if (done(i)) completed++;
      const s = p >= 0 ? upperBound(l.bk, p) - 1 : upperBound(l.bt, t) - 1;
      const balances = l.held.map((_, h) => refilled(l, h, s, t));
      // A withdrawal at an instant comes before that instant's passes.
      const xArrived = upperBound(l.xa, t);
      let withdrawn = 0;
      for (let j = 0; j < xArrived; j++) if (l.xe[j] <= t) withdrawn++;
      out.lanes.push({
        name: l.name, queued: arrived - dispatched + xArrived - withdrawn, inFlight: dispatched - completed,
        arrived: arrived + xArrived, dispatched, completed, withdrawn, balances,
      });
    }
    return out;
  }
  function passInfo(p) {
    const ignored = [];
    for (let q = P.i0[p]; q < P.i0[p + 1]; q++) {
      const who = lanes[P.i[q]].name;
      if (P.r[q] === 0) ignored.push({ who, why: 'no_bucket' });
      else {
        const r = P.r0[q];
        ignored.push({ who, why: 'below_one_credit', balance: P.rb[r] / 1e6, next: P.rn[r] < 0 ? null : P.rn[r] });
      }
    }
    const eligible = [];
    for (let q = P.e0[p]; q < P.e0[p + 1]; q++) eligible.push(lanes[P.e[q]].name);
    return { t: P.t[p], cls: CLASSES[P.c[p]], c: P.c[p], eligible, ignored };
  }
  function whyText(r, cls) {
    if (r.why === 'no_bucket') return `no ${esc(cls)} bucket (its plan holds none)`;
    return `below one credit: balance ${num(r.balance)}, next credit ${r.next === null ? 'never' : 'at ' + sec(r.next)}`;
  }
  function passHtml(p) {
    const info = passInfo(p);
    if (LIVE) {
      return `<div><b>${P.w[p]} pass${P.w[p] === 1 ? '' : 'es'}</b> settled on ${sw(info.c)}<b>${esc(info.cls)}</b> from ${sec(P.t0[p])} to ${sec(info.t)}</div>` +
        `<div>served or eligible: ${info.eligible.length ? info.eligible.map(esc).join(', ') : '\u2014'}</div>` +
        `<div>ignored: ${info.ignored.length ? '' : '\u2014'}</div>` +
        (info.ignored.length ? '<ul>' + info.ignored.map((r) => `<li><b>${esc(r.who)}</b>: <span class="why">${whyText(r, info.cls)}</span></li>`).join('') + '</ul>' : '');
    }
    return `<div><b>pass #${p + 1}</b> of ${P.n} at ${sec(info.t)}: settled on ${sw(info.c)}<b>${esc(info.cls)}</b></div>` +
      `<div>eligible: ${info.eligible.length ? info.eligible.map(esc).join(', ') : '\u2014'}</div>` +
      `<div>ignored: ${info.ignored.length ? '' : '\u2014'}</div>` +
      (info.ignored.length ? '<ul>' + info.ignored.map((r) => `<li><b>${esc(r.who)}</b>: <span class="why">${whyText(r, info.cls)}</span></li>`).join('') + '</ul>' : '');
  }
  function updatePanel() {
    if (!PAIR) {
      panelEl.innerHTML = `<h2>cursor at ${sec(stateAt().t)}</h2>` + runPanel();
      return;
    }
    let html = `<h2>cursor at ${sec(cursor.pass >= 0 ? P.t[cursor.pass] : cursor.t)}</h2>`;
    runs.forEach((r, i) => {
      use(i);
      html += `<h2 class="runname">${i === 0 ? 'top' : 'below'}: ${esc(r.label)}</h2>` + runPanel();
    });
    use(cursor.run);
    panelEl.innerHTML = html;
  }
  // The panel's part for the run in use: its pass at the cursor and its participants there.
  function runPanel() {
    const st = stateAt();
    let html = '';
    const last = st.pass >= 0 ? st.pass : upperBound(P.t, st.t) - 1;
    if (LIVE) html += `<div class="why">${last >= 0 ? 'the sample at or before the cursor: the passes since the one before, and who they served or ignored' : 'no pass yet'}</div>` + (last >= 0 ? passHtml(last) : '');
    else if (st.pass >= 0) html += '<div class="why">on a pass: the state as it settles its class, before its dispatches</div>' + passHtml(st.pass);
    else if (last >= 0) html += `<div class="why">between passes: after every event up to the cursor; the latest pass:</div>` + passHtml(last);
    else html += '<div class="why">before the first pass</div>';
    if (LIVE && last >= 0) {
      // The other classes the loop settled on in the same tick.
      for (let q = lowerBound(P.t, P.t[last]); q < P.n && P.t[q] === P.t[last]; q++) if (q !== last) html += passHtml(q);
    }
    const reasons = new Map();
    if (last >= 0 && (st.pass >= 0 || P.t[last] === st.t)) for (const r of passInfo(last).ignored) reasons.set(r.who, r);
    html += '<h2>participants</h2><table><tr><th>name</th><th>queued</th><th>in flight</th>' +
      CLASSES.slice(0, K).map((c, k) => `<th>${sw(k)}${esc(c)}</th>`).join('') + '<th>next credit</th></tr>';
    st.lanes.forEach((s, j) => {
      const l = lanes[j];
      const cells = CLASSES.slice(0, K).map((_, k) => {
        const h = l.held.indexOf(k);
        if (h < 0) return '<td class="why">\u2014</td>';
        const b = s.balances[h];
        if (b === null) return '<td class="why">?</td>';
        return `<td class="${b < 1 ? 'low' : ''}">${num(b, 3)}</td>`;
      }).join('');
      // The next credit: for a participant this pass ignored, the instant the trace gives;
      // otherwise the earliest instant one of its empty buckets refills to a credit.
      let next = '';
      const r = reasons.get(l.name);
      if (r) next = r.why === 'no_bucket' ? 'no bucket' : r.next === null ? 'never' : sec(r.next) + ' (ignored)';
      else if (LIVE) {
        // The server's instants, from the sample.
        let best = Infinity, bestC = '';
        for (const c in s.next) if (s.next[c] < best) { best = s.next[c]; bestC = c; }
        if (bestC) next = `${esc(bestC)} at ${sec(best)}`;
      } else {
        let best = Infinity, bestC = -1;
        l.held.forEach((k, h) => {
          const b = s.balances[h];
          if (b < 1 && l.rate[h] > 0) { const at = st.t + (1 - b) / l.rate[h] * 1e6; if (at < best) { best = at; bestC = k; } }
        });
        if (bestC >= 0) next = `${esc(CLASSES[bestC])} at ${sec(Math.ceil(best))}`;
      }
      html += `<tr><td>${esc(l.name)}</td><td>${s.queued}</td><td>${s.inFlight}</td>${cells}<td class="why">${next}</td></tr>`;
    });
    html += '</table>';
    html += `<h2>${LIVE ? 'answered in the window, by class' : 'dispatched in the run'}</h2><table><tr><th>name</th>` + CLASSES.map((c, k) => `<th>${sw(k)}${esc(c)}</th>`).join('') + '</tr>' +
      lanes.map((l) => `<tr><td>${esc(l.name)}</td>${l.byClass.map((v) => `<td>${v}</td>`).join('')}</tr>`).join('') + '</table>';
    return html;
  }
