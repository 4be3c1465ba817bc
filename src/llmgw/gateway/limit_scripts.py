"""The Redis keys that shared limits count in, and the Lua scripts that admit, settle and renew."""

from __future__ import annotations

from llmgw.store.redis_pipe import Script

PREFIX = "llmgw:lim:"

# One call admits a batch of requests, each all or nothing, in order. KEYS: five per member of
# each request: its minute window (a hash: requests 'r', tokens 't'), its leases (a sorted set
# of "lease id:tokens reserved" by expiry), the sum of what those leases reserve, its day's spend
# and its month's. ARGV: lease ms, then per request: its number of members, tokens to reserve,
# lease id, and nine per member: rpm, tpm, concurrent, tokens per day, tokens per month, and the
# floors of the minute window (requests, tokens), the day's spend and the month's (-1: none).
# Returns three values per request: 0, '', 0 when admitted, else the member (1-based) whose limit
# it did not fit, the limit and what that member had used.
# Every Redis call costs about a microsecond here, on every request: the script makes few.
ADMIT = """
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Each member's counts are read once per call and written once at its end, however many
-- requests of the batch count against it: a burst costs Redis a few calls per key, not per request.
local state, order = {}, {}
local function load(kk)
  local mk = KEYS[kk + 1]
  local s = state[mk]
  if s then return s end
  local fz, fs = KEYS[kk + 2], KEYS[kk + 3]
  -- Leases past their expiry are of processes that died holding them: let go.
  local gone = redis.call('ZRANGEBYSCORE', fz, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', fz, '-inf', now)
    local freed = 0
    for _, m in ipairs(gone) do freed = freed + tonumber(string.match(m, ':(%d+)$')) end
    redis.call('DECRBY', fs, freed)
  end
  local got = redis.call('HMGET', mk, 'r', 't')
  s = {mk = mk, fz = fz, fs = fs, r = tonumber(got[1] or '0'), t = tonumber(got[2] or '0'),
       new = got[1] == false, changed = false, inflight = redis.call('ZCARD', fz),
       held = nil, reserved = 0, adds = {}, spent = {}}
  state[mk] = s
  order[#order + 1] = s
  return s
end
local out, k, a = {}, 0, 1
while a < #ARGV do
  local n, reserve, lease = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3]
  a = a + 3
  local refused = nil
  for i = 1, n do
    local kk, aa = k + (i - 1) * 5, a + (i - 1) * 9
    local s = load(kk)
    -- What the calling server knows is a floor of the truth: a count Redis lost (restarted
    -- empty) or missed (requests admitted while it did not answer) is raised to it.
    local seed_r, seed_t = tonumber(ARGV[aa + 6]), tonumber(ARGV[aa + 7])
    if seed_r > s.r then s.r = seed_r; s.changed = true end
    if seed_t > s.t then s.t = seed_t; s.changed = true end
    local rpm, tpm, conc = tonumber(ARGV[aa + 1]), tonumber(ARGV[aa + 2]), tonumber(ARGV[aa + 3])
    if rpm >= 0 and s.r + 1 > rpm then refused = {i, 'rpm', s.r}
    elseif tpm >= 0 and s.t + reserve > tpm and s.t > 0 then refused = {i, 'tpm', s.t}
    elseif conc >= 0 and s.inflight + 1 > conc then refused = {i, 'concurrent', s.inflight}
    else
      for b = 0, 1 do
        local limit, seed = tonumber(ARGV[aa + 4 + b]), tonumber(ARGV[aa + 8 + b])
        if limit >= 0 and not refused then
          local bk = KEYS[kk + 4 + b]
          local spent = s.spent[b]
          if spent == nil then spent = tonumber(redis.call('GET', bk) or '-1') end
          if seed > spent then
            spent = seed
            redis.call('SET', bk, spent, 'EX', b == 0 and 172800 or 3456000)
          end
          s.spent[b] = spent
          if s.held == nil then s.held = tonumber(redis.call('GET', s.fs) or '0') end
          local held = s.held + s.reserved + reserve
          if spent >= limit or (spent + held > limit and s.inflight > 0) then
            refused = {i, b == 0 and 'day' or 'month', spent}
          end
        end
      end
    end
    if refused then break end
  end
  if refused then
    out[#out + 1], out[#out + 2], out[#out + 3] = refused[1], refused[2], refused[3]
  else
    for i = 1, n do
      local s = state[KEYS[k + (i - 1) * 5 + 1]]
      s.r, s.t, s.changed = s.r + 1, s.t + reserve, true
      s.inflight, s.reserved = s.inflight + 1, s.reserved + reserve
      s.adds[#s.adds + 1] = now + ttl
      s.adds[#s.adds + 1] = lease .. ':' .. reserve
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = 0, '', 0
  end
  k, a = k + n * 5, a + n * 9
end
for _, s in ipairs(order) do
  if s.changed then
    redis.call('HSET', s.mk, 'r', s.r, 't', s.t)
    if s.new then redis.call('EXPIRE', s.mk, 120) end
  end
  if #s.adds > 0 then
    redis.call('ZADD', s.fz, unpack(s.adds))
    redis.call('PEXPIRE', s.fz, ttl)
  end
  if s.reserved > 0 then redis.call('INCRBY', s.fs, s.reserved) end
end
return out
"""

# One call settles a batch of requests. KEYS as for ADMIT. ARGV: per request, its number of
# members, tokens used, tokens reserved and lease id. A lease that expired meanwhile is gone
# with its reservation: only what is still held is given back. Gathered per member first, so a
# batch costs Redis a few calls per key.
SETTLE = """
local state, order = {}, {}
local k, a = 0, 0
while a < #ARGV do
  local n, tokens = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local reserved, entry = tonumber(ARGV[a + 3]), ARGV[a + 4] .. ':' .. ARGV[a + 3]
  for i = 1, n do
    local kk = k + (i - 1) * 5
    local s = state[KEYS[kk + 1]]
    if not s then
      s = {kk = kk, entries = {}, reserved = {}, delta = 0, tokens = 0}
      state[KEYS[kk + 1]] = s
      order[#order + 1] = s
    end
    s.entries[#s.entries + 1] = entry
    s.reserved[#s.reserved + 1] = reserved
    s.delta, s.tokens = s.delta + tokens - reserved, s.tokens + tokens
  end
  k, a = k + n * 5, a + 4
end
for _, s in ipairs(order) do
  local mk, fz, fs = KEYS[s.kk + 1], KEYS[s.kk + 2], KEYS[s.kk + 3]
  local freed = 0
  if #s.entries == 1 then  -- the common case at low load: ZREM says whether it was there
    if redis.call('ZREM', fz, s.entries[1]) == 1 then freed = s.reserved[1] end
  else
    for i, score in ipairs(redis.call('ZMSCORE', fz, unpack(s.entries))) do
      if score then freed = freed + s.reserved[i] end
    end
    redis.call('ZREM', fz, unpack(s.entries))
  end
  if freed > 0 then redis.call('DECRBY', fs, freed) end
  if s.delta ~= 0 and redis.call('EXISTS', mk) == 1 then redis.call('HINCRBY', mk, 't', s.delta) end
  if s.tokens > 0 then
    for b = 4, 5 do
      if redis.call('EXISTS', KEYS[s.kk + b]) == 1 then redis.call('INCRBY', KEYS[s.kk + b], s.tokens) end
    end
  end
end
return 1
"""

# Keeps the leases of requests still running alive for another lease. KEYS: each member's leases
# (sorted set). ARGV: lease ms, then per request its number of members and its lease's entry.
RENEW = """
local ttl = tonumber(ARGV[1])
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
local k, a = 0, 1
while a < #ARGV do
  local n, entry = tonumber(ARGV[a + 1]), ARGV[a + 2]
  for i = 1, n do
    redis.call('ZADD', KEYS[k + i], 'XX', expiry, entry)
    redis.call('PEXPIRE', KEYS[k + i], ttl)
  end
  k, a = k + n, a + 2
end
return 1
"""

ADMIT_SCRIPT, SETTLE_SCRIPT, RENEW_SCRIPT = Script(ADMIT), Script(SETTLE), Script(RENEW)
SCRIPTS = (ADMIT_SCRIPT, SETTLE_SCRIPT, RENEW_SCRIPT)


def member_keys(member_id: str, minute: int, day: str, month: str) -> list[str]:
    """A member's five keys, in the order the scripts take them."""
    base = PREFIX + member_id
    return [f"{base}:m:{minute}", f"{base}:leases", f"{base}:held", f"{base}:d:{day}",
            f"{base}:mo:{month}"]

