  // ---- formatting
  function num(v, places) {
    let s = v.toFixed(places === undefined ? 6 : places);
    if (s.indexOf('.') >= 0) s = s.replace(/0+$/, '').replace(/\.$/, '');
    return s === '-0' ? '0' : s;
  }
  const sec = (us) => num(us / 1e6) + ' s';
  const cred = (uc) => num(uc / 1e6);
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[ch]));
  }
  const sw = (c) => `<span class="sw" style="background:${colour(c)}"></span>`;
  function niceStep(span, most) {
    const raw = span / most, p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function tickLabel(us, step) {  // the largest unit that keeps labels short: 0.5 s, not 500 ms
    if (step >= 1e5) return num(us / 1e6) + ' s';
    if (step >= 100) return num(us / 1e3, 3) + ' ms';
    return num(us, 1) + ' \u00b5s';
  }
