  // ---- view state
  const canvas = document.getElementById('view'), wrap = document.getElementById('wrap');
  const ctx = canvas.getContext('2d', { alpha: false });
  const panelEl = document.getElementById('panel'), tip = document.getElementById('tip');
  const view = { t0: 0, t1: 1 };
  // pass >= 0: the cursor stands on that pass of run `run` (the arrow keys step that run's passes;
  // a capture has none, so a two-run page starts on the first run that has some).
  const cursor = { t: 0, pass: -1, run: 0 };
  let W = 0, H = 0, dpr = 1, offY = 0, plotW = 1, hoverPass = -1, hoverRun = -1, dirty = true;
  const frames = [];
  let firstFrame = null;
  const drawn = { lanes: 0, requests: 0, individual: 0, aggregated: 0, passes: 0, passMarks: 0, room: 0 };
  let drawnRuns = [];      // per run: what of it the last frame drew
  let drawnByLane = [];    // per run: requests drawn per lane (by name) in the last frame

  // Vertical layout in content coordinates (scrolled by offY). One run: the pass strip stays
  // fixed under the ruler, as FIX_H says. Two: only the ruler stays; each run is a section of a
  // header band, its pass strip and its lanes. Live, the lanes come and go: resize() lays out again.
  const HEAD_H = 22, SECTION_GAP = 10;
  const FIX_H = PAIR ? RULER_H + 2 : TOP_H;
  let sections = [], contentH = TOP_H;
  function layout() {
    sections = [];
    if (PAIR) {
      let y = FIX_H;
      runs.forEach((r) => {
        const passY = y + HEAD_H, lanesY = passY + PASS_H + 6;
        sections.push({ headY: y, passY, lanesY });
        y = lanesY + r.lanes.length * LANE_H + SECTION_GAP;
      });
      contentH = y;
    } else {
      sections.push({ headY: 0, passY: RULER_H + 2, lanesY: TOP_H });
      contentH = TOP_H + lanes.length * LANE_H;
    }
  }
  // What lies at canvas row y: a run's pass strip or one of its lanes (top: that lane's row).
  function where(y) {
    if (!PAIR) {
      if (y >= RULER_H && y < TOP_H) return { kind: 'pass', r: 0, top: RULER_H + 2 };
      if (y < TOP_H) return null;
      const j = Math.floor((y + offY - TOP_H) / LANE_H);
      if (j < 0 || j >= lanes.length) return null;
      return { kind: 'lane', r: 0, j, top: TOP_H + j * LANE_H - offY };
    }
    if (y < FIX_H) return null;
    const yc = y + offY;
    for (let r = 0; r < runs.length; r++) {
      const s = sections[r];
      if (yc >= s.passY - 2 && yc < s.passY + PASS_H) return { kind: 'pass', r, top: s.passY - offY };
      const j = Math.floor((yc - s.lanesY) / LANE_H);
      if (yc >= s.lanesY && j < runs[r].lanes.length) return { kind: 'lane', r, j, top: s.lanesY + j * LANE_H - offY };
    }
    return null;
  }
  const xOf = (t) => LABEL_W + (t - view.t0) / (view.t1 - view.t0) * plotW;
  const tOf = (x) => view.t0 + (x - LABEL_W) / plotW * (view.t1 - view.t0);

  function resize() {
    layout();
    dpr = window.devicePixelRatio || 1;
    W = wrap.clientWidth;
    const barH = document.getElementById('bar').offsetHeight;
    H = Math.max(120, Math.min(contentH, window.innerHeight - barH));
    canvas.style.top = barH + 'px';
    panelEl.style.top = barH + 'px';
    panelEl.style.maxHeight = `calc(100vh - ${barH}px)`;
    wrap.style.height = contentH + 'px';
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    canvas.style.height = H + 'px';
    plotW = Math.max(50, W - LABEL_W - RIGHT_PAD);
    request();
  }
  function scrollOffset() {
    const barH = document.getElementById('bar').offsetHeight;
    const top = wrap.getBoundingClientRect().top - barH;
    return Math.max(0, Math.min(-top, contentH - H));
  }
  function request() {
    if (dirty && frameQueued) return;
    dirty = true;
    if (!frameQueued) { frameQueued = true; requestAnimationFrame(frame); }
  }
  let frameQueued = false;
  function frame() {
    frameQueued = false;
    if (!dirty) return;
    dirty = false;
    if (LIVE && live.stale) rebuild();
    const start = performance.now();
    draw();
    const ms = performance.now() - start;
    frames.push(ms);
    if (frames.length > 2000) frames.splice(0, 1000);
    if (firstFrame === null) firstFrame = performance.now();
  }
