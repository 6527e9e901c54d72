"""The Lua scripts that make multi-step changes atomic on the Redis side.

A session's events are the stream ``{sid}:events``; entry ids are the event
seqs themselves (``<seq>-0``), explicit and monotonic, never time-based. The
hash ``{sid}:meta`` holds the epoch, the last seq given out (``next``), the
last evicted seq (``evicted``, the resync watermark: ``XREAD`` from a trimmed
id silently starts at the oldest entry left), the bytes in the window, and the
newest kept seq (``last``). Each entry names the kept seq before it (``pv``),
so a reader can tell that what it reads follows on from what it delivered.
Redis trims by count only, so the byte cap is enforced here, exactly. An
entry whose JSON is large names its body (``x``) instead of carrying it: the
body is in the hash ``{sid}:bodies`` (``large_bodies.py``), and goes with the
entry when it is evicted.

The run lease is ``{sid}:run`` (the open run's token; no expiry),
``{sid}:lease`` (``<owner>|<token>``, expiring) and ``{sid}:fence`` (the
token counter, only ever incremented). A write is fenced by comparing its
token with ``{sid}:fence``: a takeover increments it, so a stale holder's
writes fail with ``FENCED``.
"""

from __future__ import annotations

# Makes sure the meta hash exists; a stream left without one (its meta
# expired first) is dropped, so ids never restart under an old epoch.
_ENSURE_META = """
local function ensure_meta(stream, meta, candidate)
  local epoch = redis.call('HGET', meta, 'epoch')
  if not epoch then
    epoch = candidate
    redis.call('DEL', stream)
    redis.call('HSET', meta, 'epoch', epoch, 'next', 0, 'evicted', 0, 'bytes', 0, 'ver', 0,
      'last', 0)
  end
  return epoch
end
local function keep_for(stream, meta, run, ttl, bodies)
  if redis.call('EXISTS', run) == 1 then
    redis.call('PERSIST', stream)
    redis.call('PERSIST', meta)
    redis.call('PERSIST', bodies)
  else
    redis.call('PEXPIRE', stream, ttl)
    redis.call('PEXPIRE', meta, ttl)
    redis.call('PEXPIRE', bodies, ttl)
  end
end
"""

# KEYS: events, meta, fence, lease, run, runs, bodies
# ARGV: the batch's small fields packed, then n times: data, protobuf bytes; or,
#       for an event of kind M or S (a message or server event whose text is in
#       the bodies hash, ``large_bodies.py``), its reference and ''.
#       Packed, big-endian (``PUBLISH_HEAD``): max_count (4 bytes), max_bytes (8), the
#       epoch candidate (after its 2-byte length), the idle ttl in ms (8), the session id
#       (after its 2-byte length), the token ('' for none, after its 2-byte length),
#       end_run (1 byte, 0|1), n (4); then each event's (``PUBLISH_EVENT``): its kind
#       (1 byte, m|s), whether it bumps the state version (1 byte, 0|1), its size (4),
#       then its failure code, failure message and abort kind, each after its length
#       (2, 4 and 2 bytes; 0 when absent), then its record number (4; 0 for none).
# A batch whose record numbers do not each follow the last (the meta's 'rec',
# then the batch's own) is refused whole: 'RECORD <number> <last>'.
# Returns {epoch, the batch's first seq, the kept seq before it ('' when the meta
# predates it)}.
#
# The cost of a batch in Redis commands is fixed but for one XADD per event
# (tests/test_redis_commands.py holds it): the fence and the meta are read in
# one command each, seqs are counted here and written back once, and the
# oldest entries are read a chunk at a time and trimmed in one XTRIM. The
# small fields travel packed in one argument, so that the replica encodes
# eight arguments for a batch and two per event, not seventeen and eight
# (``struct`` is built into Redis's Lua).
PUBLISH_HEAD = ">I4I8I2c0I8I2c0I2c0BI4"
PUBLISH_EVENT = ">c1BI4I2c0I4c0I2c0I4"
PUBLISH = """
local max_count, max_bytes, candidate, ttl, session, token, end_run, n, pos =
  struct.unpack('HEAD', ARGV[1])
-- An evicted entry's body stored beside the stream goes with it.
local function drop_body(ref)
  local nonce, count = string.match(ref, '^(.*):(%d+)$')
  local names = {}
  for c = 0, tonumber(count) - 1 do names[#names + 1] = nonce .. '.' .. c end
  redis.call('HDEL', KEYS[7], unpack(names))
end
ttl = string.format('%d', ttl)
local held = redis.call('MGET', KEYS[3], KEYS[5])
-- A run's events are taken while its run is open under this token: not
-- after another replica took it over, nor after the run was closed.
if token ~= '' and (held[1] ~= token or held[2] ~= token) then
  return redis.error_reply('FENCED')
end
local meta = redis.call('HMGET', KEYS[2], 'epoch', 'next', 'bytes', 'last', 'ver', 'rec')
local epoch = meta[1]
local fresh = not epoch
-- The trace and the log are one journal: a record number must follow the
-- log's last (none yet: a new log, or one 0.3 wrote), checked for the whole
-- batch before anything of it is written.
local rec = nil
if not fresh and meta[6] then rec = tonumber(meta[6]) end
do
  local at = pos
  for i = 0, n - 1 do
    local k, b, z, c, m, a, number
    k, b, z, c, m, a, number, at = struct.unpack('EVENT', ARGV[1], at)
    if number > 0 then
      if rec and number ~= rec + 1 then
        return redis.error_reply('RECORD ' .. number .. ' ' .. rec)
      end
      rec = number
    end
  end
end
local seq, bytes, last, ver = 0, 0, '0', 0
if fresh then
  -- A stream left without its meta (the meta expired first) is dropped, so
  -- ids never restart under an old epoch.
  epoch = candidate
  redis.call('DEL', KEYS[1])
else
  seq, bytes, ver = tonumber(meta[2]), tonumber(meta[3]), tonumber(meta[5])
  -- Absent in a meta written before entries named their predecessor.
  last = meta[4]
end
-- The kept seq the batch follows on from: a replica that has handed its
-- readers exactly that one hands them the batch at once (event_log.py).
local before = last or ''
local len = redis.call('XLEN', KEYS[1])
local oldest, taken, after = {}, 1, '-'
local evicted = nil
local first = nil
local bump = false
local staged = false
for i = 0, n - 1 do
  local kind, bumps, size, code, message, abort_kind, number
  kind, bumps, size, code, message, abort_kind, number, pos =
    struct.unpack('EVENT', ARGV[1], pos)
  -- Evict first: the incoming event always gets in, even alone over the cap.
  while len > 0 and (len + 1 > max_count or bytes + size > max_bytes) do
    if taken > #oldest then
      local want = math.max(16, len + n - i - max_count)
      oldest = redis.call('XRANGE', KEYS[1], after, '+', 'COUNT', want)
      taken = 1
      if #oldest == 0 then break end
    end
    local entry = oldest[taken]
    taken = taken + 1
    after = '(' .. entry[1]
    local fields = entry[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'n' then
        bytes = bytes - tonumber(fields[j + 1])
      elseif fields[j] == 'x' then
        drop_body(fields[j + 1])
      end
    end
    len = len - 1
    evicted = string.match(entry[1], '^(%d+)')
  end
  seq = seq + 1
  if not first then first = seq end
  local fields
  if kind == 'M' or kind == 'S' then
    -- Stored beside the stream (large_bodies.py): the entry names it.
    staged = true
    fields = {'k', string.lower(kind), 'n', size, 'x', ARGV[2 + 2 * i]}
  else
    fields = {'k', kind, 'n', size, 'd', ARGV[2 + 2 * i], 'p', ARGV[3 + 2 * i]}
  end
  if last then
    table.insert(fields, 'pv'); table.insert(fields, last)
  end
  last = string.format('%d', seq)
  if code ~= '' then
    table.insert(fields, 'fc'); table.insert(fields, code)
    table.insert(fields, 'fm'); table.insert(fields, message)
  end
  if abort_kind ~= '' then
    table.insert(fields, 'ak'); table.insert(fields, abort_kind)
  end
  if number > 0 then
    table.insert(fields, 'r'); table.insert(fields, string.format('%d', number))
  end
  redis.call('XADD', KEYS[1], last .. '-0', unpack(fields))
  if bumps == 1 then bump = true end
  bytes = bytes + size
  len = len + 1
end
if evicted then
  redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d', tonumber(evicted) + 1))
end
if bump then ver = ver + 1 end
local changed = {'next', string.format('%d', seq), 'bytes', string.format('%d', bytes),
  'last', last}
if bump or fresh then
  table.insert(changed, 'ver'); table.insert(changed, string.format('%d', ver))
end
if evicted then
  table.insert(changed, 'evicted'); table.insert(changed, evicted)
elseif fresh then
  table.insert(changed, 'evicted'); table.insert(changed, '0')
end
if fresh then
  table.insert(changed, 'epoch'); table.insert(changed, epoch)
end
if rec then
  table.insert(changed, 'rec'); table.insert(changed, string.format('%d', rec))
end
redis.call('HSET', KEYS[2], unpack(changed))
local open = held[2]
if end_run == 1 and token ~= '' then
  redis.call('DEL', KEYS[5], KEYS[4])
  redis.call('SREM', KEYS[6], session)
  open = false
end
if open then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
  -- The bodies hash lives as the stream does; while the run is open it is
  -- made to persist by the writes that add to it (a command per batch less).
  if staged then redis.call('PERSIST', KEYS[7]) end
else
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[7], ttl)
end
return {epoch, first, before}
""".replace("'HEAD'", repr(PUBLISH_HEAD)).replace("'EVENT'", repr(PUBLISH_EVENT))
# KEYS: events, meta, run, bodies
# ARGV: epoch candidate, replay 0|1, after epoch, after seq, n initial, expected ver|'', ttl
# Returns {'retry'} when a state-changing event overtook the caller's initial
# events, else {'ok', epoch, resync seq (0: none), first initial seq, top seq, entries,
# newest kept seq ('' when the meta predates it)}.
SUBSCRIBE = (
    _ENSURE_META
    + """
local epoch = ensure_meta(KEYS[1], KEYS[2], ARGV[1])
if ARGV[6] ~= '' and redis.call('HGET', KEYS[2], 'ver') ~= ARGV[6] then
  return {'retry'}
end
local top = tonumber(redis.call('HGET', KEYS[2], 'next'))
local entries = {}
local resync = 0
if ARGV[2] == '1' then
  local seq = tonumber(ARGV[4])
  local evicted = tonumber(redis.call('HGET', KEYS[2], 'evicted'))
  if ARGV[3] == epoch and seq ~= nil and seq >= evicted and seq <= top then
    entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[4] .. '-0', '+')
  else
    resync = redis.call('HINCRBY', KEYS[2], 'next', 1)
  end
end
local first = 0
local n = tonumber(ARGV[5])
if n > 0 then
  first = redis.call('HINCRBY', KEYS[2], 'next', n) - n + 1
end
keep_for(KEYS[1], KEYS[2], KEYS[3], ARGV[7], KEYS[4])
return {'ok', epoch, resync, first, redis.call('HGET', KEYS[2], 'next'), entries,
  redis.call('HGET', KEYS[2], 'last') or ''}
"""
)

# KEYS: events, meta. ARGV: after epoch, after seq.
REPLAY = """
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch or ARGV[1] ~= epoch then return {0} end
local seq = tonumber(ARGV[2])
local top = tonumber(redis.call('HGET', KEYS[2], 'next'))
local evicted = tonumber(redis.call('HGET', KEYS[2], 'evicted'))
if seq == nil or seq < evicted or seq > top then return {0} end
return {1, redis.call('XRANGE', KEYS[1], '(' .. ARGV[2] .. '-0', '+')}
"""

# The holder key names the replica that last held or renewed a session's
# lease, and outlives the lease (HOLDER_LIVES times its TTL, then it expires
# by itself): the replica taking an orphaned run over tells its clients whose
# run it was and how long ago that replica last renewed it.
HOLDER_LIVES = 8

# The beat key counts a session's lease grants and renewals (it lives as
# the holder key does): a replica looking for orphaned runs takes one over
# only when the count stood still for a while by its own clock, not merely
# because Redis's clock says the lease ran out (a Redis that was down or
# stalled lets every lease run out at once while their owners are alive).
_BEAT = f"""
local function beat(key, ttl)
  redis.call('INCR', key)
  redis.call('PEXPIRE', key, ttl * {HOLDER_LIVES})
end
"""

# A session's record is the hash ``session:<sid>``; its ``state`` field is its
# lifecycle (``vocabulary.SessionLifecycle``). A record written before there
# were lifecycles has no state and is live; a hash without ``created_at`` is
# no record at all (a version before these scripts could leave one behind,
# holding only a late count), and is taken for absent.
_LIFECYCLE = """
local function lifecycle(record)
  local state = redis.call('HGET', record, 'state')
  if state then return state end
  if redis.call('HEXISTS', record, 'created_at') == 1 then return 'live' end
  return false
end
"""

# KEYS: fence, lease, run, runs, holder, beat, the session's record.
# ARGV: owner, ttl ms, session id, the lifecycle check: '' (none: a bare
# lease), 'live' (a run on a live session), 'new' (the Run that created the
# session: created or live, and it is live from here).
# The token; 0 when a run is open; -1 when the session may not run (unknown,
# being deleted, deleted): checked in the same step as the claim, so no run
# starts once a delete has begun.
ACQUIRE = (
    _BEAT
    + _LIFECYCLE
    + f"""
if ARGV[4] ~= '' then
  local state = lifecycle(KEYS[7])
  if not (state == 'live' or (ARGV[4] == 'new' and state == 'created')) then return -1 end
end
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if ARGV[4] == 'new' then redis.call('HSET', KEYS[7], 'state', 'live') end
local token = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[3], token)
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[2] * {HOLDER_LIVES})
beat(KEYS[6], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[3])
return token
"""
)

# KEYS: fence, lease, run, holder, beat. ARGV: token, owner, ttl ms.
# Renews while the token is current, even after the key expired: a holder that
# was merely slow keeps its run unless another replica has taken it over.
RENEW = (
    _BEAT
    + f"""
local token = ARGV[1]
if redis.call('GET', KEYS[1]) ~= token or redis.call('GET', KEYS[3]) ~= token then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2] .. '|' .. token, 'PX', ARGV[3])
redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[3] * {HOLDER_LIVES})
beat(KEYS[5], ARGV[3])
return 1
"""
)

# KEYS: fence, lease, run, runs, holder. ARGV: token, session id.
RELEASE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[3], KEYS[2], KEYS[5])
redis.call('SREM', KEYS[4], ARGV[2])
return 1
"""

# KEYS: fence, lease, run, runs, holder. ARGV: owner, session id, token to keep|''.
# Releases the open run if ``owner`` holds its lease (and it is not the run
# with the token to keep): a claim whose reply was lost (Redis ran ACQUIRE,
# the replica never heard), which no task runs.
RELEASE_CLAIM = """
local held = redis.call('GET', KEYS[2])
local token = redis.call('GET', KEYS[3])
if not held or not token or held ~= ARGV[1] .. '|' .. token or token == ARGV[3] then
  return 0
end
redis.call('DEL', KEYS[3], KEYS[2], KEYS[5])
redis.call('SREM', KEYS[4], ARGV[2])
return 1
"""

# KEYS: fence, lease, run, holder, beat. ARGV: owner, ttl ms, the beat the
# taker saw stand still ('' for any).
# {token, the replica that held it ('' if unknown), ms since it last renewed
# (-1 if unknown)}, or {0}: the run is not orphaned, or it was renewed since
# the taker looked.
TAKE_OVER = (
    _BEAT
    + f"""
if redis.call('EXISTS', KEYS[3]) == 0 or redis.call('EXISTS', KEYS[2]) == 1 then return {{0}} end
if ARGV[3] ~= '' and (redis.call('GET', KEYS[5]) or '0') ~= ARGV[3] then return {{0}} end
local holder = redis.call('GET', KEYS[4]) or ''
local left = redis.call('PTTL', KEYS[4])
local ago = -1
if holder ~= '' and left >= 0 then ago = ARGV[2] * {HOLDER_LIVES} - left end
local token = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[3], token)
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2] * {HOLDER_LIVES})
beat(KEYS[5], ARGV[2])
return {{token, holder, ago}}
"""
)

# KEYS: the session's record. ARGV: field/value pairs.
# Sets the fields of a session that exists (never revives a deleted one as a
# record of a field or two): 1, or 0 for an unknown session.
INDEX_SET = (
    _LIFECYCLE
    + """
if not lifecycle(KEYS[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""
)

# KEYS: the session's record. ARGV: the trace's record count, its last write's
# time. Never lowers the count (a trace only grows): an owner paused past its
# lease that comes back does not undo the count of the replica that took its
# run over (the next run's record numbers start from it). 1 when set.
INDEX_RECORDED = (
    _LIFECYCLE
    + """
if not lifecycle(KEYS[1]) then return 0 end
local had = tonumber(redis.call('HGET', KEYS[1], 'count') or '0') or 0
if tonumber(ARGV[1]) < had then return 0 end
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'updated_at', ARGV[2])
return 1
"""
)

# KEYS: the session's record, all-sessions set. ARGV: session id, the lifecycle
# it must be in, the one it moves to ('deleted': the record and its member go).
# 1 when it moved, else 0.
INDEX_ADVANCE = (
    _LIFECYCLE
    + """
if lifecycle(KEYS[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == 'deleted' then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], 'state', ARGV[3])
end
return 1
"""
)

# KEYS: session hash, all-sessions set. ARGV: session id, the most sessions the
# index may hold (0: no limit; -1 is returned when it is reached), then
# field/value pairs.
INDEX_ADD = (
    _LIFECYCLE
    + """
if lifecycle(KEYS[1]) then return 0 end
local limit = tonumber(ARGV[2])
if limit > 0 and redis.call('SCARD', KEYS[2]) >= limit then return -1 end
redis.call('DEL', KEYS[1])  -- what a record written half left, if anything
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""
)

# KEYS: asks hash, decided hash. ARGV: tool_call_id, decision ('' for the owner
# forgetting a decided ask, which drops a recorded decision too).
# 1 when the ask was pending (and the decision is recorded), else 0.
APPROVAL_TAKE = """
local taken = redis.call('HDEL', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[2], ARGV[1])
elseif taken == 1 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], 3600000)
end
return taken
"""

# KEYS: asks hash, decided hash. ARGV: tool_call_id. The wait ran out: nil when
# the ask was still pending (now removed), else the decision recorded with it.
APPROVAL_EXPIRE = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then return false end
local decision = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return decision
"""

# The task index (``redis/task_index.py``). A run's hash is ``task:<sid>:<eid>``;
# the sorted sets (score: when its state last changed) are ``tasks``,
# ``tasks:state:<state>``, ``tasks:ctx:<sid>`` and ``tasks:ctx:<sid>:state:<state>``.
# The state sets to leave are known only once the hash is read, so the keys are
# made here from the prefix (ARGV[1]); the index's keys are global ones, as the
# session index's are.
# KEYS: the run's hash. ARGV: prefix, session id, member, score, state, then the
# hash's other field/value pairs.
TASK_PUT = """
local p, sid, member, score, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local ctx = p .. 'tasks:ctx:' .. sid
local old = redis.call('HGET', KEYS[1], 'state')
if old and old ~= state then
  redis.call('ZREM', p .. 'tasks:state:' .. old, member)
  redis.call('ZREM', ctx .. ':state:' .. old, member)
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', state, unpack(ARGV, 6))
redis.call('ZADD', p .. 'tasks', score, member)
redis.call('ZADD', p .. 'tasks:state:' .. state, score, member)
redis.call('ZADD', ctx, score, member)
redis.call('ZADD', ctx .. ':state:' .. state, score, member)
return 1
"""

# ARGV: prefix, session id. Removes the session's runs from every set, and their hashes.
TASK_REMOVE_SESSION = """
local p, sid = ARGV[1], ARGV[2]
local ctx = p .. 'tasks:ctx:' .. sid
for _, member in ipairs(redis.call('ZRANGE', ctx, 0, -1)) do
  local hash = p .. 'task:' .. member
  local state = redis.call('HGET', hash, 'state')
  redis.call('ZREM', p .. 'tasks', member)
  if state then
    redis.call('ZREM', p .. 'tasks:state:' .. state, member)
    redis.call('DEL', ctx .. ':state:' .. state)
  end
  redis.call('DEL', hash)
end
redis.call('DEL', ctx)
return 1
"""
