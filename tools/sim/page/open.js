'use strict';
(function () {
  const RAW = JSON.parse(document.getElementById('creditloop-data').textContent);
  // The server's /ui: the data come from the event stream RAW.live names, one tick at a time, and
  // the page keeps the last window of them. Otherwise (the simulator's page) the run is all here:
  // one run, or two runs of the same participants (a replay beside its capture, a scenario under
  // two sets of plans) that share the time axis, zoom and cursor, each drawn as a section of its own.
  const LIVE = typeof RAW.live === 'string';
  const PAIR = !LIVE && RAW.format === 'creditloop-picture-pair/1';
  const SOURCES = LIVE ? [] : PAIR ? RAW.runs.map((r) => Object.assign({ label: r.label }, r.run)) : [RAW];
  const D = SOURCES[0];            // the first run's data (undefined live)
  let K = 0;                       // metered classes; class K is the unmetered one
  let CLASSES = [];
  // The same colours as the SVG (picture.cpp): Okabe and Ito's palette, then greys.
  const COLOUR = ['#0072b2', '#e69f00', '#009e73', '#cc79a7', '#56b4e9', '#d55e00', '#b8a800'];
  const TINT = ['#99c7e0', '#f5d999', '#99d8c7', '#ebc9dc', '#bbe1f6', '#eebf99', '#e3dc99'];
  const UNMETERED = '#555555', UNMETERED_TINT = '#bbbbbb', QUEUED = '#dddddd', WITHDRAWN = '#222222';
  const colour = (c) => (c >= K ? UNMETERED : COLOUR[c]);
  const tint = (c) => (c < 0 ? QUEUED : c >= K ? UNMETERED_TINT : TINT[c]);
