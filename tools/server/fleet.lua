#!lua name=creditloop
-- creditloop's fleet rule, where the data is (docs/fleet.md, "How servers agree").
--
-- Loaded by every creditloop-server in fleet mode with FUNCTION LOAD REPLACE. Each call touches
-- one key, so that under Redis Cluster it runs on the node holding that key's slot. Times are
-- Redis's own clock (TIME), so servers' clocks never enter. Numbers are integers: a demand is
-- clipped to 10^9 requests, the one a server reports and every one read back alike, so that
-- demand * 10^6, D and every product below stay under 2^53, where Lua's doubles are exact.

local MAX_DEMAND = 1000000000

-- How far ahead of Redis's clock a stamp may be and still count. Stamps are Redis's own, so
-- only Redis's clock moving back puts one ahead: an NTP step, or a fail-over to a replica whose
-- clock is behind the old primary's (hosts kept by NTP agree to within milliseconds). Dropping
-- those entries would undercount D until their servers report again, an over-grant of up to an
-- epoch; keeping any stamp ahead would keep a corrupt or hostile entry for ever. One second
-- covers any clock NTP keeps with a wide margin, and bounds how long an entry can outstay the
-- TTL after it was written.
local MAX_AHEAD_MS = 1000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function whole(text, what, min, max)
  local n = tonumber(text)
  if n == nil or n ~= math.floor(n) or n < min or n > max then
    return nil, redis.error_reply('ERR creditloop: ' .. what .. ' must be a whole number from ' ..
                                  min .. ' to ' .. max)
  end
  return n
end

-- floor(a / b) for whole a >= 0, b > 0: the double division may land one off near a whole
-- number, and the product checks are exact in range.
local function floor_div(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- KEYS[1] = <prefix>{<tenant>}:demand (a hash: server id -> "<demand> <ms>")
-- ARGV = server id, demand (requests), ttl (ms)
-- Returns {fraction in millionths, live entries, total demand D}.
local function report(keys, args)
  local key, self_id = keys[1], args[1]
  local demand, err = whole(args[2], 'demand', 0, 2 ^ 53)
  if demand == nil then return err end
  demand = math.min(demand, MAX_DEMAND)
  local ttl, err2 = whole(args[3], 'ttl', 1, 86400000)
  if ttl == nil then return err2 end
  local now = now_ms()
  redis.call('HSET', key, self_id, demand .. ' ' .. now)
  redis.call('PEXPIRE', key, ttl)
  local entries = redis.call('HGETALL', key)
  local total, live = 0, 0
  for i = 1, #entries, 2 do
    local d, at = string.match(entries[i + 1], '^(%d+) (%d+)$')
    local age = at and now - tonumber(at)
    if d == nil or age > ttl or age < -MAX_AHEAD_MS then
      redis.call('HDEL', key, entries[i])
    else
      -- A server never writes more; a larger one (tonumber may even give inf) is corrupt or
      -- hostile, and would otherwise make D inexact, or not an integer Redis can return.
      total = total + math.min(tonumber(d), MAX_DEMAND)
      live = live + 1
    end
  end
  local fraction
  if total > 0 then
    fraction = floor_div(demand * 1000000, total)
  else
    fraction = floor_div(1000000, live)
  end
  return {fraction, live, total}
end

-- KEYS[1] = <prefix>servers (a sorted set: server id scored by the ms of its last heartbeat)
-- ARGV = server id, ttl (ms)
-- Returns the number of live servers, this one included.
local function heartbeat(keys, args)
  local ttl, err = whole(args[2], 'ttl', 1, 86400000)
  if ttl == nil then return err end
  local now = now_ms()
  redis.call('ZADD', keys[1], now, args[1])
  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', '(' .. (now - ttl))
  redis.call('ZREMRANGEBYSCORE', keys[1], '(' .. (now + MAX_AHEAD_MS), '+inf')
  return redis.call('ZCARD', keys[1])
end

-- KEYS[1] = <prefix>server:<server id> (a string: the token of the process holding the id)
-- ARGV = token, ttl (ms)
-- Takes or renews the id for this process unless another holds it. Returns {1} when this process
-- holds it now, else {0, the holder's token, the holder's claim's ms to live}. Redis expires a
-- claim nobody renews, so a process that died gives its id back after one TTL; a claim without
-- an expiry was not written here, and is taken.
local function claim(keys, args)
  local ttl, err = whole(args[2], 'ttl', 1, 86400000)
  if ttl == nil then return err end
  local holder = redis.call('GET', keys[1])
  if holder and holder ~= args[1] then
    local left = redis.call('PTTL', keys[1])
    if left >= 0 then return {0, holder, left} end
  end
  redis.call('SET', keys[1], args[1], 'PX', ttl)
  return {1}
end

-- KEYS[1] = <prefix>server:<server id>; ARGV = token. A server stopping cleanly gives its id
-- back at once, and only if it still holds it.
local function release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then return redis.call('DEL', keys[1]) end
  return 0
end

-- KEYS[1] = <prefix>servers; ARGV = server id. A server stopping cleanly leaves at once.
local function leave(keys, args)
  return redis.call('ZREM', keys[1], args[1])
end

redis.register_function('creditloop_report', report)
redis.register_function('creditloop_heartbeat', heartbeat)
redis.register_function('creditloop_leave', leave)
redis.register_function('creditloop_claim', claim)
redis.register_function('creditloop_release', release)
