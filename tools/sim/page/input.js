  // ---- input
  let drag = null;
  canvas.addEventListener('pointerdown', (ev) => {
    const rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    const onCursor = Math.abs(x - xOf(cursor.t)) <= 5 || y < RULER_H;
    drag = { x0: ev.clientX, t0: view.t0, t1: view.t1, mode: onCursor ? 'cursor' : 'pan', moved: false, y };
    canvas.setPointerCapture(ev.pointerId);
    canvas.classList.add(onCursor ? 'cursor' : 'drag');
    if (onCursor && x >= LABEL_W) setCursor(tOf(x));
  });
  canvas.addEventListener('pointermove', (ev) => {
    if (!drag) { hover(ev); return; }
    const dx = ev.clientX - drag.x0;
    if (Math.abs(dx) > 2) drag.moved = true;
    if (drag.mode === 'pan') {
      if (drag.moved) pause();
      const dt = dx * (drag.t1 - drag.t0) / plotW;
      view.t0 = drag.t0 - dt; view.t1 = drag.t1 - dt;
      clampView(); request();
    } else {
      const rect = canvas.getBoundingClientRect();
      setCursor(tOf(ev.clientX - rect.left));
    }
  });
  const endDrag = (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    canvas.classList.remove('drag', 'cursor');
    if (!d.moved && d.mode === 'pan') {
      const rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left;
      const w = where(d.y);
      if (w && w.kind === 'pass') {
        use(w.r);
        const p = passAt(x);
        if (p >= 0) { cursor.run = w.r; setPass(p); } else use(cursor.run);
      } else if (x >= LABEL_W) setCursor(tOf(x));
    }
  };
  canvas.addEventListener('pointerup', endDrag);
  canvas.addEventListener('pointercancel', endDrag);
  canvas.addEventListener('pointerleave', () => { tip.hidden = true; if (hoverPass >= 0) { hoverPass = hoverRun = -1; request(); } });
  canvas.addEventListener('wheel', (ev) => {
    if (ev.shiftKey) return;  // the page scrolls: the lanes below
    ev.preventDefault();
    const rect = canvas.getBoundingClientRect();
    const delta = ev.deltaMode === 1 ? ev.deltaY * 16 : ev.deltaY;
    zoom(Math.exp(delta * 0.002), ev.clientX - rect.left);
  }, { passive: false });
  window.addEventListener('keydown', (ev) => {
    if (ev.target instanceof HTMLInputElement) return;
    const big = ev.shiftKey ? 10 : 1;
    if (ev.key === 'ArrowRight') { stepPass(big); ev.preventDefault(); }
    else if (ev.key === 'ArrowLeft') { stepPass(-big); ev.preventDefault(); }
    else if (ev.key === 'Home') setPass(0);
    else if (ev.key === 'End') setPass(P.n - 1);
    else if (ev.key === '+' || ev.key === '=') zoom(0.5);
    else if (ev.key === '-') zoom(2);
    else if (ev.key === '0') fit();
  });
  document.getElementById('prev').onclick = () => stepPass(-1);
  document.getElementById('next').onclick = () => stepPass(1);
  document.getElementById('zin').onclick = () => zoom(0.5);
  document.getElementById('zout').onclick = () => zoom(2);
  document.getElementById('fit').onclick = fit;
  window.addEventListener('resize', resize);
  window.addEventListener('scroll', request, { passive: true });
