  if (LIVE) {
    document.getElementById('fit').title = 'follow the stream: the last minute, live (0)';
    header();
    connect();
  } else {
    loadRun();
    setClasses();
    fitView();
    cursor.run = Math.max(0, runs.findIndex((r) => r.P.n > 0));
    use(cursor.run);
    cursor.pass = P.n > 0 ? 0 : -1;
    header();
  }
  resize();
  updatePanel();
})();
