-- wrk script for tools/loadtest/loadtest: each wrk thread is one tenant of creditloop-server, and
-- at the end one line per tenant tells what it saw.
--
-- Configured through the environment, because setup() and done() run in wrk's main Lua state,
-- which never sees the script's command-line arguments:
--   LOADTEST_TENANTS  "name:key,name:key,...": thread i is tenant i (modulo the list), with all
--                     of that thread's connections
--   LOADTEST_PATH     the request target, e.g. /work?cpu_ms=0.2&wait_ms=20
--   LOADTEST_DELAY_MS pause on each connection between a response and the next request (paces a
--                     tenant below its refill; 0 or unset: closed loop, as fast as answered)
--   LOADTEST_OUT      file that done() writes the result lines to
--
-- A result line is `key=value` pairs: tenant, requests (answered 200 with the scheduler's
-- headers), bad (anything else), seconds, rps, work (the sum of X-Creditloop-Cost), the count per
-- class (P1..P3, fifo), and the queueing delay's p50, p99, p999 and max in milliseconds, from
-- X-Creditloop-Wait-Ms; then the cost's p50, p99, p99.9 and max (X-Creditloop-Cost: the time a
-- request held its slot, in credits). The queueing delay is the server's own measure (arrival to start), so it
-- leaves out the connection's and wrk's time, which belong to no scheduler.

local path = os.getenv("LOADTEST_PATH") or "/"
local pause = tonumber(os.getenv("LOADTEST_DELAY_MS") or "0") or 0
local classes = { "P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "fifo" }

-- ---- main state: setup() and done() --------------------------------------------------------

local roster = {}
for item in string.gmatch(os.getenv("LOADTEST_TENANTS") or "", "[^,]+") do
  local name, key = string.match(item, "^([^:]+):(.+)$")
  roster[#roster + 1] = { name = name, key = key }
end
local threads = {}

function setup(thread)
  local t = roster[(#threads % #roster) + 1]
  thread:set("tenant", t.name)
  thread:set("key", t.key)
  threads[#threads + 1] = thread
end

local function percentile(sorted, q)
  if #sorted == 0 then return 0 end
  local rank = math.ceil(q * #sorted)  -- nearest rank: always a value that was observed
  if rank < 1 then rank = 1 end
  return sorted[rank]
end

-- One result line; r.waits and r.costs sorted.
local function describe(name, r, seconds)
  local line = string.format("tenant=%s requests=%d bad=%d seconds=%.3f rps=%.3f work=%.3f",
    name, r.ok, r.bad, seconds, r.ok / seconds, r.work)
  for _, c in ipairs(classes) do
    if r.count[c] then line = line .. string.format(" %s=%d", c, r.count[c]) end
  end
  line = line .. string.format(" p50=%.3f p99=%.3f p999=%.3f max=%.3f",
    percentile(r.waits, 0.50), percentile(r.waits, 0.99), percentile(r.waits, 0.999),
    r.waits[#r.waits] or 0)
  return line .. string.format(" cost_p50=%.6f cost_p99=%.6f cost_p999=%.6f cost_max=%.6f",
    percentile(r.costs, 0.50), percentile(r.costs, 0.99), percentile(r.costs, 0.999),
    r.costs[#r.costs] or 0)
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local by_name, order = {}, {}
  -- Several threads may carry one tenant: theirs are merged before the percentiles.
  for _, thread in ipairs(threads) do
    local name = thread:get("tenant")
    local r = by_name[name]
    if r == nil then
      r = { waits = {}, costs = {}, ok = 0, bad = 0, work = 0, count = {} }
      by_name[name] = r
      order[#order + 1] = name
    end
    for _, w in ipairs(thread:get("waits") or {}) do r.waits[#r.waits + 1] = w end
    for _, c in ipairs(thread:get("costs") or {}) do r.costs[#r.costs + 1] = c end
    r.ok = r.ok + (thread:get("ok") or 0)
    r.bad = r.bad + (thread:get("bad") or 0)
    r.work = r.work + (thread:get("work") or 0)
    for c, n in pairs(thread:get("count") or {}) do r.count[c] = (r.count[c] or 0) + n end
  end
  local out = io.open(os.getenv("LOADTEST_OUT") or "/dev/stdout", "a")
  for _, name in ipairs(order) do
    local r = by_name[name]
    table.sort(r.waits)
    table.sort(r.costs)
    out:write(describe(name, r, seconds), "\n")
  end
  if #order > 1 then
    -- The whole group as one, for a summary line beside the individual ones.
    local all = { waits = {}, costs = {}, ok = 0, bad = 0, work = 0, count = {} }
    for _, name in ipairs(order) do
      local r = by_name[name]
      for _, w in ipairs(r.waits) do all.waits[#all.waits + 1] = w end
      for _, c in ipairs(r.costs) do all.costs[#all.costs + 1] = c end
      all.ok, all.bad, all.work = all.ok + r.ok, all.bad + r.bad, all.work + r.work
      for c, n in pairs(r.count) do all.count[c] = (all.count[c] or 0) + n end
    end
    table.sort(all.waits)
    table.sort(all.costs)
    out:write(describe("*all*", all, seconds), "\n")
  end
  local e = summary.errors
  out:write(string.format("socket_errors connect=%d read=%d write=%d timeout=%d\n",
    e.connect, e.read, e.write, e.timeout))
  out:close()
end

-- ---- each thread's state: the requests ------------------------------------------------------

function init(args)
  waits, costs, ok, bad, work, count = {}, {}, 0, 0, 0, {}
  local headers = { ["Authorization"] = "Bearer " .. key }
  req = wrk.format("GET", path, headers, nil)
end

function request()
  return req
end

if pause > 0 then
  function delay()
    return pause
  end
end

function response(status, headers, body)
  local wait = tonumber(headers["X-Creditloop-Wait-Ms"] or "")
  local class = headers["X-Creditloop-Class"]
  if status ~= 200 or wait == nil or class == nil then
    bad = bad + 1
    return
  end
  ok = ok + 1
  waits[#waits + 1] = wait
  local cost = tonumber(headers["X-Creditloop-Cost"] or "") or 0
  costs[#costs + 1] = cost
  work = work + cost
  count[class] = (count[class] or 0) + 1
end
