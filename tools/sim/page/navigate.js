  // ---- moving the cursor and the view
  function keepInView(t) {
    const span = view.t1 - view.t0;
    if (t < view.t0 || t > view.t1) { view.t0 = t - span / 2; view.t1 = t + span / 2; }
  }
  // Live, anything the reader does to the view or the cursor stops following the stream.
  function pause() { if (LIVE && live.follow) { live.follow = false; header(); } }
  function setCursor(t) {
    pause();
    cursor.t = Math.max(START, Math.min(END, t));
    cursor.pass = -1;
    updatePanel(); request();
  }
  function setPass(p) {
    if (P.n === 0) return;
    pause();
    cursor.pass = Math.max(0, Math.min(P.n - 1, p));
    cursor.t = P.t[cursor.pass];
    keepInView(cursor.t);
    updatePanel(); request();
  }
  function stepPass(n) {
    if (P.n === 0) return;
    if (cursor.pass >= 0) return setPass(cursor.pass + n);
    const last = upperBound(P.t, cursor.t) - 1;  // the latest pass at or before the cursor
    if (n > 0) return setPass(last + n);
    return setPass(last >= 0 && P.t[last] === cursor.t ? last + n : last + n + 1);
  }
  function zoom(factor, atX) {
    pause();
    const t = tOf(atX === undefined ? LABEL_W + plotW / 2 : atX);
    const span = Math.min((END - START) * 1.5, Math.max(2, (view.t1 - view.t0) * factor));
    const f = (t - view.t0) / (view.t1 - view.t0);
    view.t0 = t - f * span; view.t1 = view.t0 + span;
    clampView(); request();
  }
  function clampView() {
    const span = view.t1 - view.t0, pad = span * 0.25;
    if (view.t0 < START - pad) { view.t0 = START - pad; view.t1 = view.t0 + span; }
    if (view.t1 > END + pad) { view.t1 = END + pad; view.t0 = view.t1 - span; }
  }
  function fitView() {
    const span = END - START;
    view.t0 = START - (LIVE ? 0 : span * 0.01); view.t1 = END + span * (LIVE ? 0.02 : 0.01);
  }
  function fit() {
    if (LIVE) { live.follow = true; live.stale = true; } else fitView();
    request();
  }
