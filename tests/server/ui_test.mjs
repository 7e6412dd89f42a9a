// creditloop-server's live page, /ui, in headless Chromium while two tenants load the server: a
// flood from a lite tenant (no P1 bucket) and a light pro tenant. The page must load without a
// console error or an outside request, draw a lane for each tenant, draw the light tenant's
// requests served under P1 while the flood queues, show the flood ignored at P1 for want of a
// bucket, and, once the load stops, hold exactly the requests the server's /debug/participants
// counts per tenant and class. Expected values come from the server's counters and the load's own
// answers, never from the page.
//
// Run through ctest (server.ui_browser), which sets:
//   CREDITLOOP_SERVER         the server binary
//   CREDITLOOP_NODE_MODULES   where tests/sim/install-node-deps put playwright-core
//   CREDITLOOP_CHROMIUM       the browser (/usr/bin/chromium)
//   CREDITLOOP_ARTIFACTS      where the configuration, server log and screenshots are written
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

function env(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set: run this test through ctest (server.ui_browser)`);
    process.exit(2);
  }
  return v;
}
const SERVER = env('CREDITLOOP_SERVER');
const OUT = env('CREDITLOOP_ARTIFACTS');
const CHROMIUM = env('CREDITLOOP_CHROMIUM');
const require = createRequire(path.join(env('CREDITLOOP_NODE_MODULES'), 'node_modules') + path.sep);
const { chromium } = require('playwright-core');

fs.mkdirSync(OUT, { recursive: true });
const ADMIN_KEY = 'admin-key-for-the-ui-test';
const KEYS = { flood: 'flood-secret-key', light: 'light-secret-key' };
// A 20 ms request costs one credit. The light tenant asks for far less P1 than its plan's rate;
// the flood keeps 16 requests outstanding on 4 slots and holds no P1 bucket.
const CONFIG = {
  mode: 'work',
  listen: '127.0.0.1:0',
  admin: { listen: '127.0.0.1:0', key: ADMIN_KEY },
  io_threads: 2,
  workers: 2,
  // A learned room held at 4 (min = max): the flood's room is the same, and the page draws the
  // room the stream's ticks carry.
  slots: { auto: { min: 4, max: 4 } },
  cost_unit_ms: 20,
  classes: 2,
  plans: {
    pro: { P1: { rate: 20, burst: 20 }, P2: { rate: 20, burst: 20 } },
    lite: { P2: { rate: 10, burst: 10 } },
  },
  tenants: [
    { name: 'flood', key: KEYS.flood, plan: 'lite' },
    { name: 'light', key: KEYS.light, plan: 'pro' },
  ],
  shutdown_deadline_ms: 5000,
};

// Polls `check` (async, returns a truthy value when done) until it holds or `ms` pass.
async function until(what, check, ms = 15000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function get(port, target, key, agent) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: target, agent, headers: key ? { Authorization: `Bearer ${key}` } : {} }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
  });
}

// Opens /ui/events and resolves with the response once its status line is in, body unread.
function openStream(port) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/ui/events', agent: false, headers: { Authorization: `Bearer ${ADMIN_KEY}` } }, (res) => resolve({ req, res }));
    req.on('error', reject);
  });
}

let server, ports, browser;
const serverLog = [];
before(async () => {
  const config = path.join(OUT, 'ui.json');
  fs.writeFileSync(config, JSON.stringify(CONFIG, null, 2));
  server = spawn(SERVER, ['-c', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  server.stderr.on('data', (d) => serverLog.push(d.toString()));
  ports = await new Promise((resolve, reject) => {
    let text = '';
    server.stdout.on('data', (d) => {
      text += d.toString();
      const m = text.match(/listening on 127\.0\.0\.1:(\d+), admin 127\.0\.0\.1:(\d+)/);
      if (m) resolve({ tenants: Number(m[1]), admin: Number(m[2]) });
    });
    server.on('exit', (code) => reject(new Error(`the server exited (${code}): ${serverLog.join('')}`)));
  });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // Root in a container has no user namespace for Chromium's sandbox; the page is our own.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
});
after(async () => {
  await browser?.close();
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  fs.writeFileSync(path.join(OUT, 'server.log'), serverLog.join(''));
});

test('/ui and /ui/events want the admin key; streams are bounded', async () => {
  assert.equal((await get(ports.admin, '/ui')).status, 401);
  assert.equal((await get(ports.admin, '/ui/events')).status, 401);
  assert.equal((await get(ports.admin, '/ui', KEYS.light)).status, 401);  // a tenant's key is not the admin's
  const page = await get(ports.admin, '/ui', ADMIN_KEY);
  assert.equal(page.status, 200);
  assert.match(page.headers['content-type'], /^text\/html/);
  for (const outside of [' src=', '<link', '@import', 'url(', 'http://', 'https://']) assert.ok(!page.body.includes(outside), outside);

  const streams = [];
  try {
    for (let i = 0; i < 8; i++) {
      const s = await openStream(ports.admin);
      assert.equal(s.res.statusCode, 200);
      assert.equal(s.res.headers['content-type'], 'text/event-stream');
      streams.push(s);
    }
    const refused = await openStream(ports.admin);
    assert.equal(refused.res.statusCode, 503);
    refused.req.destroy();
  } finally {
    for (const s of streams) s.req.destroy();
  }
  // Closed streams are let go once a write to them fails: a new one is taken again.
  await until('a stream slot to free', async () => {
    const s = await openStream(ports.admin);
    s.req.destroy();
    return s.res.statusCode === 200;
  });
});

test('a flood and a light tenant, live: lanes, the light tenant served, the flood ignored at P1, counts as the server has them', async () => {
  // The load: 16 flood requests outstanding at all times; the light tenant one at a time, every
  // 150 ms. Each answer's class is counted per tenant.
  let stop = false;
  const answered = { flood: [0, 0, 0], light: [0, 0, 0] };
  const failures = [];
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
  const loop = async (who, pause) => {
    while (!stop) {
      try {
        const r = await get(ports.tenants, '/work?wait_ms=20', KEYS[who], agent);
        if (r.status !== 200) failures.push(`${who}: ${r.status} ${r.body}`);
        else answered[who][Number(r.headers['x-creditloop-class'].slice(1)) - 1]++;
      } catch (e) {
        failures.push(`${who}: ${e.message}`);
      }
      if (pause) await new Promise((r) => setTimeout(r, pause));
    }
  };
  const load = [loop('light', 150)];
  for (let i = 0; i < 16; i++) load.push(loop('flood', 0));

  const page = await browser.newPage({ viewport: { width: 1400, height: 700 }, extraHTTPHeaders: { Authorization: `Bearer ${ADMIN_KEY}` } });
  const problems = [];
  const origin = `http://127.0.0.1:${ports.admin}/`;
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => { if (!r.url().startsWith(origin)) problems.push(`request: ${r.url()}`); });
  try {
    // Let the flood build a queue first: the page then starts from the window so far.
    await until('the flood to queue', async () => JSON.parse((await get(ports.admin, '/debug/participants', ADMIN_KEY)).body)
      .tenants.find((t) => t.name === 'flood').queued >= 8);
    await page.goto(`${origin}ui`);
    const stats = () => page.evaluate(() => window.creditloopView.stats());
    await until('the page to draw both tenants', async () => { const s = await stats(); return s.live.connected && s.lanes === 2 && s.firstFrameMs !== null; });
    await until('the learned room drawn from the ticks', async () => { const s = await stats(); return Boolean(s.room) && s.room.last === 4 && s.drawn.room > 0; });

    // The flood passed over at P1 for want of a P1 bucket, while the light tenant is served.
    const ignoredAt = await until('a P1 pass ignoring the flood', () => page.evaluate(() => {
      const v = window.creditloopView;
      for (let p = v.stats().passes - 1; p >= 0; p--) {
        const info = v.pass(p);
        if (info.cls === 'P1' && info.eligible.includes('light') && info.ignored.some((r) => r.who === 'flood' && r.why === 'no_bucket')) return p + 1;
      }
      return 0;
    }));
    await page.screenshot({ path: path.join(OUT, 'ui_live.png') });
    const st = await page.evaluate((p) => window.creditloopView.setPass(p), ignoredAt - 1);
    assert.ok(st.lanes.find((l) => l.name === 'flood').queued > 0, JSON.stringify(st));
    const panel = await page.evaluate(() => window.creditloopView.panel());
    assert.match(panel, /settled on P1/);
    assert.match(panel, /flood: no P1 bucket/);
    // Hovering the tick shows the same reasons.
    const [x, y] = await page.evaluate((p) => [window.creditloopView.passX(p), window.creditloopView.passY()], ignoredAt - 1);
    await page.mouse.move(x, y);
    await page.waitForSelector('#tip:not([hidden])');
    assert.match(await page.textContent('#tip'), /flood: no P1 bucket/);
    await page.screenshot({ path: path.join(OUT, 'ui_ignored.png') });
    await page.mouse.move(10, 690);
    assert.equal((await stats()).live.following, false);
    await page.evaluate(() => window.creditloopView.follow());

    // Both lanes, the light tenant's requests drawn and served under P1.
    const lane = (s, who) => s.perLane.find((l) => l.name === who);
    await until('the light tenant drawn, served under P1', async () => {
      const s = await stats();
      return lane(s, 'light') && lane(s, 'light').drawn > 5 && lane(s, 'light').byClass[0] > 5 && lane(s, 'flood').drawn > 5;
    });

    // Stop the load; once every answer is in, the page holds what the server counted.
    stop = true;
    await Promise.all(load);
    assert.deepEqual(failures, []);
    const debug = JSON.parse((await get(ports.admin, '/debug/participants', ADMIN_KEY)).body);
    const served = Object.fromEntries(debug.tenants.map((t) => [t.name, t.served]));
    assert.deepEqual(served, answered, 'the server counts what the load was answered');
    assert.ok(served.light[0] > 0 && served.light[1] + served.light[2] === 0, `light: ${served.light}`);
    assert.ok(served.flood[0] === 0 && served.flood[2] > 0, `flood: ${served.flood}`);
    const final = await until('the page to hold every answered request', async () => {
      const s = await stats();
      const ok = ['flood', 'light'].every((who) => lane(s, who) && JSON.stringify(lane(s, who).byClass) === JSON.stringify(served[who]));
      return ok && s.live.following && s.live.dropped === 0 ? s : null;
    }, 5000).catch(async (e) => { throw new Error(`${e.message}: page ${JSON.stringify((await stats()).perLane)}, server ${JSON.stringify(served)}`); });
    // The whole run is within the minute: every request the page holds is drawn.
    for (const who of ['flood', 'light']) assert.equal(lane(final, who).drawn, lane(final, who).requests, who);
    assert.ok(final.drawn.passMarks > 0);
    await page.screenshot({ path: path.join(OUT, 'ui_after.png') });
    console.log(`# answered: ${JSON.stringify(served)}; page: ${final.requests} requests, ${final.passes} pass entries, ${final.live.ticks} ticks`);
    assert.deepEqual(problems, []);
  } finally {
    stop = true;
    await Promise.all(load);
    agent.destroy();
    await page.close();
  }
});

test('SIGTERM with a stream open: the stream ends and the server exits 0', async () => {
  const s = await openStream(ports.admin);
  assert.equal(s.res.statusCode, 200);
  const ended = new Promise((resolve) => { s.res.on('end', resolve); s.res.on('error', resolve); s.res.on('close', resolve); s.res.resume(); });
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
  server.kill('SIGTERM');
  assert.deepEqual(await exited, { code: 0, signal: null }, serverLog.join(''));
  await ended;
});
