"""The Lua scripts of the Redis limiter (:mod:`gateway.limits.redis`; keys and fields are
described there). Each runs atomically in Redis, so replicas never interleave inside one."""

# Returns {verdict, window requests, window tokens, spent, epoch, gen, cut}: verdict 0 admitted (counts
# include this request), 1 rpm reached, 2 tpm reached, 3 budget spent, 4 the budget's
# counter was never reconciled with the store (a new period, or Redis restarted empty).
ADMIT = """
local epoch = redis.call('GET', KEYS[4]) or '0'
local budget = tonumber(ARGV[3])
if budget >= 0 and redis.call('HEXISTS', KEYS[2], 'seeded') == 0 then return {4, 0, 0, 0, epoch, '', '0'} end
local gen = redis.call('HGET', KEYS[2], 'gen') or ''
local cut = redis.call('HGET', KEYS[2], 'cut') or '0'
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
local t = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
if tonumber(ARGV[1]) >= 0 and r >= tonumber(ARGV[1]) then return {1, r, t, 0, epoch, gen, cut} end
if tonumber(ARGV[2]) >= 0 and t >= tonumber(ARGV[2]) then return {2, r, t, 0, epoch, gen, cut} end
local now = tonumber(ARGV[7])
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
if #gone > 0 then
  local sum = 0
  for _, m in ipairs(gone) do sum = sum + tonumber(string.match(m, ':(%d+)$')) end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('HINCRBY', KEYS[2], 'reserved', string.format('%d', -sum))
end
local spent = tonumber(redis.call('HGET', KEYS[2], 'spent') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[2], 'reserved') or '0')
if budget >= 0 and spent + reserved >= budget then return {3, r, t, string.format('%d', spent), epoch, gen, cut} end
r = redis.call('HINCRBY', KEYS[1], 'r', 1)
t = redis.call('HINCRBY', KEYS[1], 't', ARGV[4])
redis.call('EXPIRE', KEYS[1], 120)
redis.call('HINCRBY', KEYS[2], 'reserved', ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[9], ARGV[8])
if tonumber(ARGV[6]) > 0 then
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[6])
end
return {0, r, t, 0, epoch, gen, cut}
"""

# Returns the counter generation the spend landed in; '' when its counter is gone (Redis lost
# it and it is not rebuilt yet: the rebuild counts it from the settling process's recent
# spend); 0 when it counts nowhere now (settled already, or its reservation expired).
# Idempotent: only the call that removes the reservation's member counts, except for a
# reservation admitted under an earlier generation (the counter was lost and rebuilt since):
# its spend is added once, since the rebuild could not know it. ``{p}:l:<member>`` marks a
# reservation settled outside its counter, so that REHOLD does not hold it again.
SETTLE = """
if redis.call('ZREM', KEYS[3], ARGV[4]) == 1 then
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBY', KEYS[1], 't', ARGV[1]) end
  redis.call('HINCRBY', KEYS[2], 'reserved', ARGV[2])
  redis.call('HINCRBY', KEYS[2], 'spent', ARGV[3])
  local held = redis.call('HGET', KEYS[2], 'gen') or ''
  -- held again after a rebuild (REHOLD): mark it settled, so that a retry does not count it late
  if ARGV[5] ~= '' and held ~= ARGV[5] then redis.call('SET', KEYS[4], '1', 'EX', ARGV[6]) end
  return held
end
if redis.call('HEXISTS', KEYS[2], 'seeded') == 0 then
  redis.call('SET', KEYS[4], '1', 'EX', ARGV[6])
  return ''
end
local gen = redis.call('HGET', KEYS[2], 'gen')
if gen and ARGV[5] ~= '' and gen ~= ARGV[5] and tonumber(ARGV[3]) > 0
   and redis.call('SET', KEYS[4], '1', 'NX', 'EX', ARGV[6]) then
  redis.call('HINCRBY', KEYS[2], 'spent', ARGV[3])
  return gen
end
return 0
"""

# A counter without ``seeded`` is rebuilt as generation ARGV[4] cut at ARGV[5]: the larger of
# ARGV[2] (the store before the cut + this process's recent spend) and the store's whole
# figure (ARGV[1]); a seeded one takes the larger of its spend and ARGV[1]. Once the store's
# figure was taken, other replicas no longer add their recent spend (``closed``): the store
# may hold it already. Returns {built, gen, cut}.
RECONCILE = """
if redis.call('HEXISTS', KEYS[1], 'seeded') == 0 then
  redis.call('HDEL', KEYS[1], 'closed')
  if tonumber(ARGV[1]) > tonumber(ARGV[2]) then
    redis.call('HSET', KEYS[1], 'spent', ARGV[1], 'closed', 1)
  else
    redis.call('HSET', KEYS[1], 'spent', ARGV[2])
  end
  redis.call('HSET', KEYS[1], 'seeded', 1, 'gen', ARGV[4], 'cut', ARGV[5])
  if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
  return {1, ARGV[4], ARGV[5]}
end
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
if tonumber(ARGV[1]) > spent then redis.call('HSET', KEYS[1], 'spent', ARGV[1], 'closed', 1) end
return {0, redis.call('HGET', KEYS[1], 'gen') or '', redis.call('HGET', KEYS[1], 'cut') or '0'}
"""

# Another replica's recent spend, added once to the generation it was computed for.
CONTRIBUTE = """
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] or redis.call('HEXISTS', KEYS[1], 'closed') == 1 then return 0 end
redis.call('HINCRBY', KEYS[1], 'spent', ARGV[1])
return 1
"""

# A process's reservations in flight, admitted under a counter Redis lost, held again in the
# rebuilt generation ARGV[1] (KEYS: the counter, its reservations, then ``{p}:l:<member>`` of
# each; ARGV: gen, the period key's TTL, then member and expiry, unix ms, of each), except
# those settled meanwhile. Returns how many were held.
REHOLD = """
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
local n = 0
for i = 3, #ARGV, 2 do
  local m = ARGV[i]
  if redis.call('EXISTS', KEYS[(i - 3) / 2 + 3]) == 0 and redis.call('ZADD', KEYS[2], 'NX', ARGV[i + 1], m) == 1 then
    redis.call('HINCRBY', KEYS[1], 'reserved', string.match(m, ':(%d+)$'))
    n = n + 1
  end
end
if n > 0 and tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
return n
"""
