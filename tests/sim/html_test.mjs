// The page of `creditloop-sim --html` in headless Chromium, as a person uses it: it loads without
// errors, draws what the trace holds, its cursor reports the state the trace implies, hovering a
// pass tells why each ignored participant was passed over, a run of 100,000 requests opens
// and pans at an interactive rate, and the two-run page (a replay beside its capture, a scenario
// under two sets of plans) draws both runs on one time axis with one cursor. Expected values come from the simulator's own trace of the
// same run, never from the page.
//
// Run through ctest (sim.html_browser), which sets:
//   CREDITLOOP_SIM            the simulator
//   CREDITLOOP_SCENARIOS      tools/scenarios
//   CREDITLOOP_NODE_MODULES   where tests/sim/install-node-deps put playwright-core
//   CREDITLOOP_CHROMIUM       the browser (/usr/bin/chromium)
//   CREDITLOOP_ARTIFACTS      where pages, screenshots and timings are written
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

function env(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set: run this test through ctest (sim.html_browser)`);
    process.exit(2);
  }
  return v;
}
const SIM = env('CREDITLOOP_SIM');
const SCENARIOS = env('CREDITLOOP_SCENARIOS');
const OUT = env('CREDITLOOP_ARTIFACTS');
const CHROMIUM = env('CREDITLOOP_CHROMIUM');
const require = createRequire(path.join(env('CREDITLOOP_NODE_MODULES'), 'node_modules') + path.sep);
const { chromium } = require('playwright-core');

fs.mkdirSync(OUT, { recursive: true });
const EXAMPLES = ['quickstart', 'interleave', 'shares', 'descend_climb', 'bounded_wait', 'heavy_work', 'hang_up'];
const EPS = 2.5e-6;  // two roundings to 6 decimals

// Runs the simulator on `scenario`, writing the page to `html`; returns the trace lines.
function runSim(scenario, html, extra = []) {
  const out = execFileSync(SIM, ['--reasons', '--html', html, ...extra, scenario], { maxBuffer: 1 << 30 });
  return out.toString().trim().split('\n').map((l) => JSON.parse(l));
}

// What the trace says at each pass: per participant, requests queued and in flight as the pass
// settles (before its dispatches), and the pass line itself.
function passStates(trace, names) {
  const queued = Object.fromEntries(names.map((n) => [n, 0]));
  const inFlight = Object.fromEntries(names.map((n) => [n, 0]));
  const passes = [];
  let last = null;
  for (const l of trace) {
    if (l.ev === 'arrive') queued[l.participant]++;
    else if (l.ev === 'dispatch') {
      queued[l.participant]--; inFlight[l.participant]++;
      last.dispatches.push(l);
    } else if (l.ev === 'complete') inFlight[l.participant]--;
    else if (l.ev === 'withdraw') queued[l.participant]--;
    else if (l.ev === 'pass') {
      last = { line: l, queued: { ...queued }, inFlight: { ...inFlight }, dispatches: [] };
      passes.push(last);
    }
  }
  return passes;
}

let browser;
const timings = {};
before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // Root in a container has no user namespace for Chromium's sandbox; the page is our own.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
});
after(async () => {
  await browser?.close();
  fs.writeFileSync(path.join(OUT, 'timings.json'), JSON.stringify(timings, null, 2) + '\n');
});

async function open(html, viewport = { width: 1400, height: 1000 }) {
  const page = await browser.newPage({ viewport });
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  // The page must need nothing but itself.
  page.on('request', (r) => { if (!r.url().startsWith('file:') && !r.url().startsWith('data:')) problems.push(`request: ${r.url()}`); });
  const started = Date.now();
  await page.goto(pathToFileURL(html).href);
  await page.waitForFunction(() => window.creditloopView && window.creditloopView.stats().firstFrameMs !== null);
  const loaded = Date.now() - started;
  return { page, problems, loaded };
}

for (const name of EXAMPLES) {
  test(`${name}: draws what the trace holds and its cursor agrees with the trace`, async () => {
    const scenario = JSON.parse(fs.readFileSync(path.join(SCENARIOS, `${name}.json`)));
    const html = path.join(OUT, `${name}.html`);
    const trace = runSim(path.join(SCENARIOS, `${name}.json`), html);
    const names = scenario.participants.map((p) => p.name);
    const { page, problems } = await open(html);
    try {
      const stats = await page.evaluate(() => window.creditloopView.stats());
      const count = (ev) => trace.filter((l) => l.ev === ev).length;
      assert.equal(stats.lanes, names.length);
      assert.equal(stats.requests, count('arrive'));
      assert.equal(stats.passes, count('pass'));
      const k = (scenario.classes || ['P1', 'P2']).length;
      const byClass = new Array(k + 1).fill(0);
      for (const l of trace) if (l.ev === 'dispatch') byClass[Number(l.class.slice(1)) - 1]++;
      assert.deepEqual(stats.dispatchedByClass, byClass);
      // The whole run is in view: every lane, request and pass is drawn, one by one or aggregated.
      assert.equal(stats.drawn.lanes, names.length);
      assert.equal(stats.drawn.requests, count('arrive'));
      assert.equal(stats.drawn.passes, count('pass'));
      assert.ok(stats.drawn.passMarks > 0);
      await page.screenshot({ path: path.join(OUT, `${name}.png`) });

      // The cursor on passes spread over the run, and on every pass that ignored someone (up to
      // 40): queues, requests in flight and balances as the trace has them.
      const passes = passStates(trace, names);
      const picks = new Set([0, passes.length >> 1, passes.length - 1]);
      passes.forEach((p, i) => { if (p.line.ignored.length && picks.size < 43) picks.add(i); });
      let reasonsChecked = 0;
      for (const i of picks) {
        const want = passes[i];
        const st = await page.evaluate((p) => window.creditloopView.setPass(p), i);
        assert.equal(st.pass, i);
        assert.ok(Math.abs(st.t / 1e6 - want.line.t) < EPS);
        st.lanes.forEach((lane, j) => {
          assert.equal(lane.queued, want.queued[names[j]], `${name} pass ${i}: ${names[j]} queued`);
          assert.equal(lane.inFlight, want.inFlight[names[j]], `${name} pass ${i}: ${names[j]} in flight`);
        });
        const held = (who) => Object.keys(scenario.plans[scenario.participants.find((p) => p.name === who).plan]);
        const balance = (who, cls) => st.lanes[names.indexOf(who)].balances[held(who).sort().indexOf(cls)];
        for (const [who, r] of Object.entries(want.line.reasons)) {
          if (r.why !== 'below_one_credit') continue;
          assert.ok(Math.abs(balance(who, want.line.class) - r.balance) < EPS, `${name} pass ${i}: ${who} balance`);
          reasonsChecked++;
        }
        // The first dispatch after the pass debits one credit from the balance shown.
        const d = want.dispatches[0];
        if (d && d.class in d.balances) {
          assert.ok(Math.abs(balance(d.participant, d.class) - 1 - d.balances[d.class]) < EPS,
            `${name} pass ${i}: ${d.participant} ${d.class} before its dispatch`);
        }
        const panel = await page.evaluate(() => window.creditloopView.panel());
        assert.ok(panel.includes(`pass #${i + 1} of ${passes.length}`), panel);
        for (const who of want.line.ignored) assert.ok(panel.includes(who), `${who} in ${panel}`);
      }
      if (passes.some((p) => Object.values(p.line.reasons).some((r) => r.why === 'below_one_credit'))) {
        assert.ok(reasonsChecked > 0);
      }

      // The keys and the buttons step pass by pass.
      await page.evaluate(() => window.creditloopView.setPass(0));
      await page.keyboard.press('ArrowRight');
      await page.keyboard.press('ArrowRight');
      assert.equal((await page.evaluate(() => window.creditloopView.state())).pass, Math.min(2, passes.length - 1));
      await page.keyboard.press('ArrowLeft');
      assert.equal((await page.evaluate(() => window.creditloopView.state())).pass, Math.min(1, passes.length - 1));
      await page.click('#next');
      assert.equal((await page.evaluate(() => window.creditloopView.state())).pass, Math.min(2, passes.length - 1));
      // A free cursor between passes counts every event up to it.
      const mid = trace.find((l) => l.ev === 'dispatch' && l.t > 0);
      if (mid) {
        const st = await page.evaluate((t) => window.creditloopView.setCursor(t), mid.t * 1e6);
        const j = names.indexOf(mid.participant);
        const upTo = trace.filter((l) => l.t !== undefined && l.t <= mid.t && l.participant === mid.participant);
        const arrived = upTo.filter((l) => l.ev === 'arrive').length, sent = upTo.filter((l) => l.ev === 'dispatch').length;
        const withdrawn = upTo.filter((l) => l.ev === 'withdraw').length;
        assert.equal(st.pass, -1);
        assert.equal(st.lanes[j].queued, arrived - sent - withdrawn);
      }
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });
}

test('hovering a pass shows who was eligible, who was ignored and why', async () => {
  // heavy_work ignores bulk for want of a P1 bucket and heavy for want of credit.
  const html = path.join(OUT, 'heavy_work.html');
  const trace = runSim(path.join(SCENARIOS, 'heavy_work.json'), html);
  const passes = trace.filter((l) => l.ev === 'pass');
  const firstAt = (p) => passes.findIndex((q) => q.t === passes[p].t);
  const kinds = (l) => new Set(Object.values(l.reasons).map((r) => r.why));
  let pick = passes.findIndex((l, i) => firstAt(i) === i && kinds(l).size === 2);
  if (pick < 0) pick = passes.findIndex((l, i) => firstAt(i) === i && l.ignored.length > 0);
  assert.ok(pick >= 0, 'a pass with reasons');
  const want = passes[pick];
  const { page, problems } = await open(html);
  try {
    // Zoomed in around the pass so that no other instant shares its pixels.
    await page.evaluate((t) => window.creditloopView.view(t - 20000, t + 20000), want.t * 1e6);
    await page.waitForTimeout(50);
    const [x, y] = await page.evaluate((p) => [window.creditloopView.passX(p), window.creditloopView.passY()], pick);
    await page.mouse.move(x, y);
    await page.waitForSelector('#tip:not([hidden])');
    const tip = await page.textContent('#tip');
    assert.ok(tip.includes(`pass #${pick + 1}`), tip);
    assert.ok(tip.includes(`settled on ${want.class}`), tip);
    for (const who of want.eligible) assert.ok(tip.includes(who), tip);
    for (const [who, r] of Object.entries(want.reasons)) {
      assert.ok(tip.includes(who), tip);
      if (r.why === 'no_bucket') assert.ok(tip.includes(`${who}: no ${want.class} bucket`), tip);
      else {
        assert.ok(tip.includes(`${who}: below one credit: balance ${r.balance}`), tip);
        assert.ok(tip.includes(r.next_credit === null ? 'never' : `next credit at ${r.next_credit} s`), tip);
      }
    }
    await page.screenshot({ path: path.join(OUT, 'hover.png') });
    // The wheel zooms around the pointer; a drag pans.
    const before = await page.evaluate(() => window.creditloopView.view());
    await page.mouse.move(x, y + 120);
    await page.mouse.wheel(0, -300);
    await page.waitForTimeout(50);
    const zoomed = await page.evaluate(() => window.creditloopView.view());
    assert.ok(zoomed.t1 - zoomed.t0 < (before.t1 - before.t0) * 0.9, JSON.stringify([before, zoomed]));
    assert.ok(zoomed.t0 < want.t * 1e6 && want.t * 1e6 < zoomed.t1, 'the pass stays in view');
    await page.mouse.move(x + 100, y + 120);
    await page.mouse.down();
    await page.mouse.move(x, y + 120, { steps: 5 });
    await page.mouse.up();
    const panned = await page.evaluate(() => window.creditloopView.view());
    assert.ok(panned.t0 > zoomed.t0, 'dragging left moves the view later');
    assert.ok(Math.abs((panned.t1 - panned.t0) - (zoomed.t1 - zoomed.t0)) < 1e-6 * (zoomed.t1 - zoomed.t0));
    // Clicking it, where it now is, puts the cursor there.
    await page.mouse.click(await page.evaluate((p) => window.creditloopView.passX(p), pick), y);
    assert.equal((await page.evaluate(() => window.creditloopView.state())).pass, pick);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});

// Per participant, requests arrived and dispatched at or before `t` (microseconds) in a trace.
function countsAt(trace, names, t) {
  const out = Object.fromEntries(names.map((n) => [n, { arrived: 0, dispatched: 0 }]));
  for (const l of trace) {
    if (l.t === undefined || Math.round(l.t * 1e6) > t) continue;
    if (l.ev === 'arrive') out[l.participant].arrived++;
    else if (l.ev === 'dispatch') out[l.participant].dispatched++;
  }
  return out;
}

// The two-run page against the two traces it shows; `runs[i]` is run i's trace.
async function checkPair(html, names, traces, { capturedTop }) {
  const { page, problems } = await open(html, { width: 1400, height: 2400 });
  try {
    const stats = await page.evaluate(() => window.creditloopView.stats());
    assert.equal(stats.runs.length, 2);
    stats.runs.forEach((r, i) => {
      const trace = traces[i];
      const count = (ev) => trace.filter((l) => l.ev === ev).length;
      assert.equal(r.lanes, names.length, `run ${i} lanes`);
      assert.equal(r.requests, count('arrive'), `run ${i} requests`);
      // A capture holds no passes: the top run of a replay has none.
      assert.equal(r.passes, capturedTop && i === 0 ? 0 : count('pass'), `run ${i} passes`);
      const byClass = new Array(r.dispatchedByClass.length).fill(0);
      for (const l of trace) if (l.ev === 'dispatch') byClass[Number(l.class.slice(1)) - 1]++;
      assert.deepEqual(r.dispatchedByClass, byClass, `run ${i} classes`);
      // The page is tall enough for both: every lane and request of each run is drawn.
      assert.equal(r.drawn.lanes, names.length, `run ${i} lanes drawn`);
      assert.equal(r.drawn.requests, count('arrive'), `run ${i} requests drawn`);
    });
    assert.equal(stats.lanes, 2 * names.length);
    const header = await page.textContent('header');
    assert.ok(header.includes('top: ') && header.includes('below: '), header);
    await page.screenshot({ path: html.replace(/\.html$/, '.png') });

    // One cursor for both runs: each run's queues at its instant are those of its own trace.
    const end = stats.end;
    for (const f of [0.1, 0.37, 0.5, 0.81]) {
      const st = await page.evaluate((t) => window.creditloopView.setCursor(t), end * f);
      assert.equal(st.runs.length, 2);
      st.runs.forEach((run, i) => {
        assert.equal(run.t, st.t, `run ${i} follows the cursor`);
        const want = countsAt(traces[i], names, st.t);
        run.lanes.forEach((lane, j) => {
          assert.equal(lane.queued, want[names[j]].arrived - want[names[j]].dispatched, `run ${i} ${names[j]} queued at ${st.t}`);
        });
      });
    }
    // Dragging the cursor on the time axis moves it for both runs.
    const box = await page.locator('#view').boundingBox();
    const before = (await page.evaluate(() => window.creditloopView.state())).t;
    await page.mouse.move(box.x + box.width * 0.3, box.y + 10);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.45, box.y + 10, { steps: 5 });
    await page.mouse.up();
    const moved = await page.evaluate(() => window.creditloopView.state());
    assert.notEqual(moved.t, before);
    for (const run of moved.runs) assert.equal(run.t, moved.t);
    // The arrow keys step the passes of the run that has them; the other run follows in time.
    await page.evaluate(() => window.creditloopView.setPass(0));
    await page.keyboard.press('ArrowRight');
    const stepped = await page.evaluate(() => window.creditloopView.state());
    assert.equal(stepped.pass, 1);
    assert.equal(stepped.run, capturedTop ? 1 : 0);
    for (const run of stepped.runs) assert.equal(run.t, stepped.t);
    const panel = await page.evaluate(() => window.creditloopView.panel());
    assert.ok(panel.includes('top: ') && panel.includes('below: '), panel);
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
}

test('two runs: a replay below the capture it replays, one time axis and one cursor', async () => {
  // interleave has no `until`: every request completes, so the capture holds them all.
  const scenario = path.join(SCENARIOS, 'interleave.json');
  const names = JSON.parse(fs.readFileSync(scenario)).participants.map((p) => p.name);
  const capture = path.join(OUT, 'interleave.capture');
  const trace = runSim(scenario, path.join(OUT, 'interleave_single.html'), ['--capture', capture]);
  // What the capture holds, as a trace: its requests' arrivals and dispatches.
  const captured = [];
  for (const line of fs.readFileSync(capture, 'utf8').trim().split('\n').slice(1)) {
    const r = JSON.parse(line);
    if (r.ev !== 'request') continue;  // the participants' `plan` lines at 0
    captured.push({ ev: 'arrive', t: r.arrive, participant: r.participant });
    captured.push({ ev: 'dispatch', t: r.dispatch, participant: r.participant, class: r.class });
  }
  const html = path.join(OUT, 'replay_pair.html');
  execFileSync(SIM, ['--replay', capture, '--html', html]);
  // Replayed under the captured plans, the run is the simulated one: its trace is the original's.
  const completed = trace.filter((l) => l.ev === 'complete').length;
  assert.equal(captured.length / 2, completed);
  await checkPair(html, names, [captured, trace], { capturedTop: true });
});

test('two runs: a scenario under its own plans and under another file\'s', async () => {
  const file = path.join(SCENARIOS, 'quickstart.json');
  const scenario = JSON.parse(fs.readFileSync(file));
  const names = scenario.participants.map((p) => p.name);
  const plans = { plans: scenario.plans, participants: [{ name: 'bob', shares: 4 }] };
  const plansFile = path.join(OUT, 'more_shares.json');
  fs.writeFileSync(plansFile, JSON.stringify(plans));
  const other = JSON.parse(JSON.stringify(scenario));
  other.participants.find((p) => p.name === 'bob').shares = 4;
  const otherFile = path.join(OUT, 'quickstart_bob4.json');
  fs.writeFileSync(otherFile, JSON.stringify(other));
  const first = runSim(file, path.join(OUT, 'quickstart_a.html'));
  const second = runSim(otherFile, path.join(OUT, 'quickstart_b.html'));
  const html = path.join(OUT, 'plans_pair.html');
  execFileSync(SIM, [file, '--plans', plansFile, '--html', html]);
  await checkPair(html, names, [first, second], { capturedTop: false });
});

test('100,000 requests: first frame within 2 s, panning at 30 frames per second or more', async () => {
  // Twelve participants on two plans, with shares 1 to 12, overloading an 8-slot server.
  const scenario = {
    classes: ['P1', 'P2'],
    plans: { pro: { P1: { rate: 20, burst: 40 }, P2: { rate: 50, burst: 100 } }, lite: { P2: { rate: 50, burst: 100 } } },
    server: { slots: 8 },
    participants: [],
    arrivals: [],
  };
  for (let i = 0; i < 12; i++) {
    scenario.participants.push({ name: `p${i}`, plan: i % 2 ? 'pro' : 'lite', shares: i + 1 });
    scenario.arrivals.push({ at: 0.001 * i, participant: `p${i}`, count: i < 4 ? 8334 : 8333, every: 0.0005, service: 0.001, cost: 0.25 });
  }
  const file = path.join(OUT, 'big.json');
  fs.writeFileSync(file, JSON.stringify(scenario));
  const html = path.join(OUT, 'big.html');
  const summary = runSim(file, html, ['--summary']);
  let total = 0;
  for (const p of Object.values(summary[0].participants)) total += p.completed;
  assert.equal(total, 100000);

  const { page, problems, loaded } = await open(html, { width: 1400, height: 900 });
  try {
    const stats = await page.evaluate(() => window.creditloopView.stats());
    assert.equal(stats.requests, 100000);
    timings.big = { htmlBytes: fs.statSync(html).size, loadToFirstFrameMs: loaded, firstFrameSinceNavigationMs: stats.firstFrameMs };
    await page.screenshot({ path: path.join(OUT, 'big.png') });

    // A scripted drag across the lanes, at the whole run and zoomed in, while a callback on
    // every animation frame records when it ran.
    const pan = async (label) => {
      await page.evaluate(() => {
        window.__frames = [];
        window.__frameDraws = window.creditloopView.frameTimes().length;
        const tick = (t) => { window.__frames.push(t); if (window.__frames.length < 100000) window.__raf = requestAnimationFrame(tick); };
        window.__raf = requestAnimationFrame(tick);
      });
      const box = await page.locator('#view').boundingBox();
      const y = box.y + 200, x0 = box.x + box.width * 0.7;
      await page.mouse.move(x0, y);
      await page.mouse.down();
      for (let i = 1; i <= 60; i++) await page.mouse.move(x0 - i * 8, y);
      await page.mouse.up();
      await page.waitForTimeout(100);
      const r = await page.evaluate(() => {
        cancelAnimationFrame(window.__raf);
        return { frames: window.__frames, draws: window.creditloopView.frameTimes().slice(window.__frameDraws) };
      });
      const gaps = r.frames.slice(1).map((t, i) => t - r.frames[i]).sort((a, b) => a - b);
      const draws = r.draws.slice().sort((a, b) => a - b);
      const q = (a, f) => a[Math.min(a.length - 1, Math.floor(a.length * f))];
      const result = {
        frames: r.frames.length, draws: draws.length,
        frameIntervalMs: { median: q(gaps, 0.5), p90: q(gaps, 0.9), max: gaps[gaps.length - 1] },
        drawMs: { median: q(draws, 0.5), p90: q(draws, 0.9), max: draws[draws.length - 1] },
      };
      result.fps = 1000 / result.frameIntervalMs.median;
      timings[label] = result;
      console.log(`# ${label}: ${JSON.stringify(result)}`);
      return result;
    };
    const whole = await pan('pan_whole_run');
    await page.evaluate(() => { const v = window.creditloopView.stats(); window.creditloopView.view(v.end * 0.3, v.end * 0.34); });
    const zoomed = await pan('pan_zoomed_in');
    await page.screenshot({ path: path.join(OUT, 'big_zoomed.png') });
    console.log(`# first frame: ${stats.firstFrameMs.toFixed(0)} ms after navigation, ${loaded} ms from goto`);

    assert.ok(stats.firstFrameMs < 2000, `first frame after ${stats.firstFrameMs} ms`);
    for (const r of [whole, zoomed]) {
      assert.ok(r.draws >= 20, `only ${r.draws} frames drawn during the pan`);
      assert.ok(r.fps >= 30, `${r.fps.toFixed(1)} frames per second`);
      assert.ok(r.drawMs.median < 33, `half the frames took ${r.drawMs.median.toFixed(1)} ms or more to draw`);
    }
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
  }
});
