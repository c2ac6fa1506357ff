#!lua flags=allow-key-locking
--[[
Floodgate: decides ALL of a request's rules in one atomic call. The only place limiting logic lives.

The shebang tells Upstash to lock only the keys in KEYS (not the whole database), which is why every key
this script touches arrives in KEYS and no key is shared by all identities. Stock Redis rejects the flag;
the local REST server strips it (and maps the SHA) the way Upstash accepts it.

Upstash bills the EVALSHA plus every command run inside it, so the allowed path of each algorithm is kept
to the fewest commands (docs/algorithms.md, "What a decision costs"): no per-call extras, TIME only when
some rule needs the clock, and an override read only for the identities the caller knows to have one.

KEYS:
  KEYS[i]      state key of rule i = 1..n   <prefix>:<rule>:{<hash>} (layout per algorithm below)
  KEYS[n + k]  override of the k-th rule whose mode slot says "with override", in rule order:
               <prefix>:override:<rule>:{<hash>}, hash: limit, period (MILLISECONDS), burst; read only;
               absent burst = the override's limit
  a LEASE call (below) ends, where a split decision's refund can reach this database (a Redis Cluster, or one
               of several databases), with one more key per rule, its lease mark
               <prefix>:<rule>:{<hash>}:leased: when a lease of that token bucket/gcra state was last granted
               or returned (µs; below, "The refund ledger"); written by a bucket's lease only, and only then
  a REFUND call (below) ends with, where a split decision's refund can reach this database (always for such
  a refund), all rules' refund ledgers <prefix>:<rule>:{<hash>}:refunded (below, "The refund ledger") and
  then all their lease marks; then (always) all their reset fences <prefix>:<rule>:{<hash>}:reset: present
  for a while after an admin reset of that state (below, "Why a reset's fence may be short"), read only.
  The script tells by the number of keys: with them a REFUND call has at least 4n, without at most 3n; a
  LEASE call has keys after its overrides
ARGV:
  ARGV[1]  call: "0" a plain decision | "1" the same, and ARGV[2] is the request id (a sliding-log,
           concurrency or shed rule needs it) | "2" with options: ARGV[2] request id, ARGV[3] "1" peek (evaluate
           with the given cost but write nothing: the admin API) | "2" stamped (the reply carries the stamps,
           below, whenever the request is allowed: a split decision's refund needs them) | "0" neither,
           ARGV[4] time offset, ms added to Redis
           TIME (tests that travel in time; fixed-window counters expire on Redis's real clock, so for them
           only offsets within one window hold)
           | "3" REFUND: give back units consumed earlier: ARGV[2] the request id they were consumed under
           ("" if none), ARGV[3] when, µs on Redis's clock, they were consumed ("0" = unknown: the current
           window; token-bucket/gcra: the TAT their lease wrote, or "0"); each rule's cost
           slot is the number of units to give back (mode and override slots as in a decision: the limits in
           force decide the window and the emission interval; the edge sends the limits the units were
           taken under (a lease's return, a split decision undone: src/engine/results.ts, refundOf), so they
           are priced as they were taken, whatever an override changed since, and no override, or mode
           5 | 4 for a fixed window's units taken under an override's own period: below, "Returned units")
           | "4" LEASE: a decision (ARGV[2] the request id, ARGV[3] the longest lease life, ms) in which each
           rule may take more units than the request's cost; after the rule groups one slot per rule: the
           units wanted (this request's cost included; <= cost, a concurrency/shed rule or one with a delay = no
           lease)
           | "5" give back a delayed request's reservation (below, "Give-back call")
           | "6" re-aim a fixed-window counter at the period now in force (below, "Re-aim call")
           | "7" fence: raise one identity's reset fence, and for an admin reset delete its state behind it
           (below, "Fence call")
  then 7 per rule, rule i's at ARGV[first + 7(i-1) + slot] (first = 2 for call "0", 3 for "1", 5 for "2",
  4 for "3" and "4"),
  and for a LEASE call, rule i's units wanted at ARGV[first + 7n + i - 1],
  and for a split decision's REFUND, rule i's stamp at ARGV[first + 7n + 3(i-1)] (STAMP_WORDS slots): the TAT
  its decision wrote (µs; "0" = none), Redis's clock then (µs), and the TAT it replaced (µs) (in this order,
  STAMP_TAT, STAMP_AT, STAMP_REPLACED; the reply's stamps come in another: written, replaced, clock):
    slot 0 algorithm  1 fixed-window | 2 sliding-window | 3 sliding-log | 4 token-bucket | 5 gcra | 6 concurrency
                      | 7 shed: priority load shedding, a concurrency budget (below) whose limit the edge sets
                        per request to its priority class's share of one sub-key's capacity
    slot 1 mode       1 on (can deny) | 0 monitor (reported, never denies); 3 | 2: the same, with an override key;
                      5 | 4, REFUND only: with an override key, and the slots' limits are that override's
    slot 2 limit      units per period (concurrency: requests in flight), tier already applied by the edge
    slot 3 period     ms (concurrency: lease after which an unreleased slot is freed)
    slot 4 burst      token-bucket capacity / gcra burst (units a fresh identity may spend at once)
    slot 5 cost       units this request consumes, >= 1 (ignored by concurrency: one slot)
    slot 6 delay      ms a token-bucket/gcra request over the rate may be held for its slot; "0" = deny;
                      (a REFUND's: the rule's, as in its decision)

Returns an array of integers only: { allowed, then 5 per rule }
  [1]          1 if every `on` rule allows (and then every allowing rule was written), else 0
  [2 + 5(i-1)] outcome: 0 denied | 1 allowed | 2 cost exceeds what the rule can ever grant
               | 3 delayed: allowed from a reserved slot `retry_after_ms` from now (delay > 0 only)
  [3 + 5(i-1)] limit in force (after override)
  [4 + 5(i-1)] remaining: units available after this call (after consumption if written, else as now)
  [5 + 5(i-1)] reset_after_ms: until the rule is fully reset (window end, bucket full); 0 when untouched
  [6 + 5(i-1)] retry_after_ms: denied: when the same request would be allowed absent other traffic
               (cost exceeds capacity: never, so until more quota is available, as allowed; a limit of
               0: one period; a rule with a delay: when it would fit in the queue);
               allowed: until more quota is available, 0 when full; delayed: the wait until its slot
  A reply where some rule was delayed, or a stamped call's (ARGV[3] "2") with some token-bucket/gcra rule,
  and the request allowed (so written), carries 3 more per rule after the groups (and after a LEASE call's
  appendix, below, when there is one): for rule i, the TAT this call wrote, the TAT it replaced, and Redis's
  clock when it wrote (µs), zeros for a rule that is not token-bucket/gcra or was not written: the stamps of
  a give-back call, and of a split decision's refund.
  A fixed-window rule allowed without the clock (below) answers -1 in [5] and [6]: "the end of the
  current epoch-aligned window", which the caller works out (src/engine/reply.ts).
  A reply where an override of the identity applied to some rule carries, last of all (after the stamps,
  when there are some), the period in force of every rule, ms, 1 per rule (the call's own where no override
  applied), negative where an override applied: the window the caller advertises, and whether the limits in
  force are an override's. The caller tells the appendices apart by their lengths (a LEASE call's 4n + 1,
  the stamps' 3n, the periods' n: every combination has its own length).
A LEASE call returns the decision's reply with, appended, { units, life_ms, tat_us, period_ms } per rule
  (0, 0, 0, 0 = no lease; units include this request's cost; tat_us: token-bucket/gcra, the TAT the lease
  wrote, the "when" of its return, else 0; period_ms: the period in force, with the group's limit the limits
  its return is priced at) and then Redis's now in µs (the "when" of a window's return; a log's is now +
  life_ms × 1000, where its members are scored). The rule's group reports as for the request's cost alone, but
  for a leased token-bucket/gcra rule what the written TAT leaves plus the lease's units still to spend. A
  rule leases at most min(wanted, max(cost, avail / 2)), so the last units of a window are decided one by one,
  and only for at least 10 ms. A cost of 0 in a LEASE call is a renewal: it takes only the lease (none when
  nothing is left), and counts no request. Why no leased unit can be spent where Redis would not have admitted
  it (the caller spends a lease only within life_ms, measured from before it sent the call, so every spend
  happens between the grant and the grant + life on Redis's clock):
    fixed-window    the units are counted in the current window and life ends before its edge: every unit
                    is spent in the window that counts it, as if its requests had all arrived at the grant
    sliding-window  the same (the current window's count, life within the window); the estimate only
                    shrinks as the window advances, so units that fit at the grant fit at any later instant
    sliding-log     the units are recorded at grant + life (scored in the future), the latest instant they
                    can be spent: every window that contains a spend contains its record, and ZCOUNT counts
                    future scores, so later grants see them at once
    token-bucket,   the grant must fit now (units <= available), and the TAT is recorded as if every unit were
    gcra            spent at grant + life: GCRA's TAT only grows with later arrivals, so that is the largest
                    TAT any spending of them could give; life <= a quarter of the bucket's capacity (the
                    refill until then is lost: a quarter bounds it)
  All of which holds while the limits stay those of the grant. An override with a ttl ends with no admin call
  to revoke leases (an admin change revokes them: src/leases/index.ts), and after it a window's counter is
  re-aimed at the rule's period, a sliding window's state read under another, a bucket priced at another
  interval: so a lease granted under an override lives no longer than the override has left (its PTTL, read
  by LEASE calls only: one command more per lease call of an identity with an override).
  Returned units (REFUND) only undo units never spent: counters and sorted sets are additive; a TAT moves
  back only while the lease's write is still the TAT (no arrival, other lease, reset or refill past it
  since: then its top units are exactly the lease's unspent ones), never below now.
  And they go back only into the state that counted them, though an override may have changed the period
  since: a return is priced at the period P its lease was granted under (src/engine/results.ts), not the
  one in force. A fixed-window counter C that counted units at `when` was live then; the next counter for
  the key exists only once C is gone. Were the window test alone asked ("is now in `when`'s window of P"),
  a counter created after C in that window under a shorter period Q (the override removed, or one set,
  and the counter re-aimed at Q's window, then expired) would pass it, and the DECRBY would give units to
  a counter that never counted them: over-admission. So the counter must also END where `when`'s window of
  P ends (E): one created under Q ends at the end of a window of Q, elsewhere (a longer Q's ends later; a
  shorter one's earlier, save the last window of Q inside P's). And a counter created under P ends at E
  only if created in `when`'s window, after C was gone: C, aimed at E or not, was re-aimed since or was
  already aimed elsewhere when it counted; a reset is fenced. What remains is a period changed twice within
  a return's reach (P, Q, then P again, or Q's last window inside P's): an override's set or removal is
  fenced like a reset, for the limits it replaces and those it sets, and no change shortens a fence
  (src/admin/fence.ts). An override that ends by its ttl makes no admin call and raises no fence, and a
  decision then re-aims the counter at the rule's window, whose last one inside Q's may end with it. So a
  return priced at an override's period (mode 5 | 4) gives back only while an override of those very limits
  is in force: the one it was priced at, or one the admin API set since, whose fence (for the limits it
  sets) stands until every return of units taken before it has landed. (An override without a period of its
  own leaves the counter's aim alone, and needs no such test.)
  A sliding window's state is of the window index floor(t / period): under another period the index differs
  by far more than one for any realistic now, and a state rewritten under P again is the fenced case.
A REFUND call returns one integer per rule instead: the units actually given back, never more than the
  state still holds from that time, and none into a counter or TAT while its reset fence stands (the state
  was reset since: units from before would enlarge the fresh quota; why the fence stands long enough is
  below, "Why a reset's fence may be short"):
    fixed-window    DECRBY, only while the counter is still that of the window `when` falls in, and ends
                    where that window ends (PTTL, within REAIM_SLACK_MS): below, "Returned units"
    sliding-window  the current window's count, only if `when` falls in the window the state is of and that
                    window is still the current one
    token-bucket,   the TAT moves back by units * emission interval, never below now (what has refilled since
    gcra            stays refilled); `when` > 0 is the TAT the units' lease wrote, and the TAT moves back only
                    while it is still that one. A split decision's refund gives back at most W - now - G (its
                    stamp: the TAT W the decision wrote, at Redis's time d; G: what refunds of split decisions
                    made at or before d gave back since d, from the refund ledger below), and nothing at all without
                    a stamp, or once a lease of the bucket was granted or returned since d (its lease mark); to a
                    rule with a delay, the TAT P the decision replaced, while W is still the TAT (below). Why: the
                    TAT is a stack; each write lays its units' time on top (the decision's: the span up to W),
                    and what lies below now has refilled. A split refund lifts
                    its units out of its own span, which moves everything above it down by what it gave. A
                    refund of an earlier decision moves this one's span down (by G in all); a later decision's
                    lies above it; an arrival above it was admitted at its own instant, which the move never
                    passes (its span stays above now, where this refund's did). So what is left of the
                    decision's units is the part of its span still above now, at most W - G - now; the rest may
                    have refilled a full bucket, the refill been spent, and given back again it would admit
                    those arrivals twice. But a write pinned to a later instant must not move: a held request
                    (a delay) leaves at the slot it was given, a lease's units are recorded at its end, and
                    moving them down would let the next request through beside them; a give-back or a lease's
                    return that finds its own TAT (to the µs, which another write may have rebuilt) may lie
                    below a later decision and move it unrecorded. Only rules with a delay hold requests or
                    are given back (src/middleware/delay.ts); leases mark the bucket. A rule with a delay gets
                    a compare-and-set instead, as a give-back: it is never leased (the LEASE call refuses it)
                    and gets no refund by the ledger, so besides a reset (fenced, below) and its own expiry
                    only another compare-and-set lowers its TAT, which leaves it as if that request had never
                    come; so while W is still the TAT the state is as the decision left it, and P again leaves
                    it as if this request had never come too (otherwise the units stay taken)
    sliding-log     ZREM of the members `<request id>:<when>:1..units` (the names every write gives its units);
                    with `when` unknown, the request id's members still in the window
    concurrency     ZREM of the request id's slot (units ignored)
  The refund ledger of a token bucket: a ZSET, one member per split decision's refund that gave back time,
    `<µs the TAT moved back>:<its decision's d>:<request id>`, scored by Redis's time then (µs). A split
    refund sums the members scored at or after its own decision's d whose decision came no later (G: one in
    the same µs may have come before it, and counting more only gives back less), and adds its own. Its lease
    mark holds the time of the bucket's last lease grant or return. Decisions pay nothing for either (d is the
    clock a bucket's decision reads anyway); a bucket's lease call and a lease's return that gives back pay one
    SET, where split decisions can be refunded (a database alone splits no request: it has no ledger and no
    mark). A split decision is refunded within STAMP_HORIZON_MS of d or not at all, so ledger members older
    than that are dropped, and ledger and mark expire that long after their last write.
  A negative `when`, "-<age>", means "at most <age> µs ago" (a split decision undone, src/resilience/sharded.ts):
    the span is taken from its earliest instant, so a window edge that may lie inside it refunds nothing.
Why a reset's fence may be short. An admin reset deletes the state and sets its fence in one step (call "7",
  at one instant r), for resetFenceMs (src/engine/keys.ts) of every limit the units may have been taken under
  (the rule's, its tiers', the identity's override's), never more than 30 s: so it never outlives the window
  of the reset by more than one period. A refund of units taken before r ("pre-reset") must give nothing to the
  fresh state; until the fence falls it cannot; afterwards, per algorithm:
    fixed-window,   the fence stands one period P. A refund lands only while now lies in the window its `when`
    sliding-window  falls in (the sliding state's window index must be that one too), and `when` is no later
                    than the units were taken: a lease's is its grant, on Redis's clock, and a lease never
                    outlives its window; a split decision's "-<age>" its earliest instant. So a pre-reset refund
                    lands only before the end of a window that holds an instant before r: before r + P.
    token-bucket,   the fence stands capacity + capacity / 4 (the longest lease) + the rule's delay. A lease's
    gcra            return moves the TAT only while the TAT is exactly the one the lease wrote AND lies ahead of
                    now. A post-reset arrival may write that very µs value (TATs are sums of arrival times and
                    intervals, nothing keeps them apart), but a pre-reset lease wrote at most life + capacity
                    after its grant (the lease fits the bucket at its grant, recorded at grant + life), so once
                    the fence falls that TAT lies behind now and the return gives nothing, whatever the TAT is.
                    Likewise a held request's decision wrote at most capacity + delay after it: its split
                    refund (a compare-and-set, as a give-back) needs that TAT ahead of now too.
    sliding-log,    no fence: a refund removes members by name (`<request id>:<when>:<unit>`, or a slot's request
    concurrency     id), names no post-reset write uses, and the reset removed the pre-reset ones.
  A refund with `when` "-<age>" (a split decision undone) knows its units only to within age: the edge sends
  no window's whose age exceeds the fence of the call's own limits (src/engine/store.ts), so a pre-reset one
  arrives while the fence stands (units taken after now - age > now - fence, before r: the fence, from r,
  still stands). For a window priced at its own period that drops nothing the window test would have let
  through. A bucket's needs no such bound when its stamp W lies at most the rule's own capacity plus its delay
  after d (the edge sends it then, and only then without the bound: src/engine/store.ts `withinFence`): a reset
  after d fences for at least that plus a quarter, so once the fence falls W lies behind now and the refund
  gives nothing; or, where the fence was cut to 30 s, the refund is older than STAMP_HORIZON_MS (no longer than
  that cut) and gives nothing either. The longest fence (30 s) is long enough for every refund the edge sends: a
  lease's return no later than 15 s after its expiry (src/leases/returns.ts), a split decision's within its
  timeout (5 s). These bounds hold for limits (and a delay) known at the reset. A bucket's reset (call "7") also
  fences until the TAT the state held: a rule with a delay has its TAT lowered only by compare-and-sets, which
  restore earlier states, so every TAT a held request's give-back or refund may still compare lay at or below
  it, and a deploy that shortened the rule's capacity or delay since cannot make the fence fall first. Unless
  isolates without the delay (a deploy under way) gave a split decision back through the refund ledger, which
  may lower the TAT below a held request's write: a reset that finds the ledger fences for the longest, 30 s,
  after which STAMP_HORIZON_MS keeps every stamp from before it out. A lease granted under an override replaced
  before the reset may still be returned after it (an isolate sends its returns before it hears of the change):
  the override's set or removal left a fence sized for the limits it replaced, and a reset only raises a fence,
  never shortens one (src/admin/fence.ts, and call "7"). One that ended by its ttl left no fence, and a reset
  after it fences for the rule's own limits only: units priced at such an override give nothing where that could
  matter (mode 5 | 4: a fixed window under its period, a bucket), unless an override of the same limit and
  period is set again, whose burst may differ (mode 5 | 4 compares limit and period only): so a bucket's set
  fences for the longest reach, 30 s.
Short replies, for ONE rule allowed on a fast path (an array costs Redis more to send, per element):
  fixed-window on a live counter: the remaining units, an integer     (= { 1, 1, limit, remaining, -1, -1 })
  token-bucket, gcra, sliding-window: { remaining, reset_after_ms, retry_after_ms }
                                           (= { 1, 1, limit, remaining, reset_after_ms, retry_after_ms })

Give-back call (ARGV[1] = "5"), for a delayed request whose client went away before its slot (a rule with a
  delay only: src/middleware/delay.ts): KEYS[1] the rule's state key, KEYS[2] its reset fence; ARGV[2] the
  TAT the decision wrote, ARGV[3] the TAT it replaced, ARGV[4] Redis's clock when it wrote (µs: its stamp).
  If the TAT is still the one written, no later request wrote behind it, so putting back the replaced TAT
  leaves the state exactly as if the request had never come (no over-admission). Otherwise the slot stays
  taken (giving it back would let a later slot leave early). Nothing while the fence stands (an
  admin reset's or override change's), nor once the decision is older than STAMP_HORIZON_MS: a reset since
  may have let fresh requests rebuild that very TAT (to the µs), and the replaced one belongs to the state
  the reset threw away. A reset after the decision fences for the capacity and a quarter plus the delay, or
  30 s (src/engine/keys.ts); the TAT written lay at most the capacity plus the delay ahead of the decision
  (the edge sends the call only then: src/engine/store.ts `withinFence`), so once that fence falls the TAT
  written lies behind now, where putting back an earlier one changes nothing (both leave the bucket full),
  and a fence cut to 30 s falls only after STAMP_HORIZON_MS. Returns 1 if given back, else 0.

Re-aim call (ARGV[1] = "6"), by the admin API once it has set or removed an override (docs/operating.md,
  "How soon an override applies"): KEYS[1] a fixed-window rule's state key, ARGV[2] the period now in force (ms). A live
  counter whose expiry is not the end of that period's current window (it was created under another period)
  is made to expire there, keeping its count. Returns 1 if re-aimed, else 0.

Fence call (ARGV[1] = "7"), by the admin API (src/admin/fence.ts): KEYS[1] the identity's reset fence, for an
  admin reset of a token-bucket/gcra state KEYS[2] its refund ledger, then for a reset the state keys; ARGV[2]
  how long the fence must stand (ms: resetFenceMs of every limit the admin's config knows the units may have
  been taken under, src/engine/keys.ts), ARGV[3] "1" for a token-bucket/gcra reset, ARGV[4] the longest a fence
  stands (ms, RESET_FENCE_MAX_MS). Raises the fence, never shortening one that stands, and deletes the state
  keys (not the ledger), in one step: an override's set or removal raises it alone. A bucket's reset also fences
  until the TAT the state held (its PTTL), up to the longest, and for the longest while its refund ledger exists
  (above, "Why a reset's fence may be short"). Returns the number of state keys deleted.

Semantics: phase 1 evaluates every rule without writing. Only if every `on` rule allows does phase 2
write each ALLOWING rule: a denied request consumes nothing anywhere (no partial counting), and a
`monitor` rule that would deny is reported but not written, exactly as if it were enforcing alone.
One exception, invisible from outside (the script is atomic): a fixed-window counter is incremented in
phase 1 (INCRBY instead of GET now and INCRBY later) and decremented again, or deleted if phase 1 created
it, when its rule or the request is denied; a counter it creates gets its expiry in the same step.

Time: Redis's, never the edge's. TIME is read at most once per call, and not at all when every rule is a
fixed window whose counter is live: the counter expires AT its window's end on Redis's clock, and Redis
checks expiry against the time the script started, so a counter this script can see IS the counter of the
window the script runs in (a boundary crossed while the script runs changes nothing: the script is one
instant). Only creating a counter needs the clock (to set its expiry), and a denial asks the counter its
PTTL, so Retry-After stays on Redis's clock.
That holds only while every counter was created under the period in force. An override that changes the
period breaks it: a counter created under the rule's period lives on under the override's, and one created
under the override's outlives its removal (or its `ttl`). So a call that reads an override (the clock is read
then anyway) asks a live counter its PTTL and, when its expiry is not the end of the window in force,
re-aims it there (PEXPIREAT), keeping its count: what was counted before the change still counts in the
window in force, as a token bucket's TAT carries the time owed across a change of limits. An override's
removal stops the override reads, so the admin API re-aims the counter itself then, with the re-aim call
(and after a set, so that a longer window does not lose the count when the shorter one would have ended).
The common call, which reads no override, pays nothing for any of this.

State layout per algorithm (one key per identity; every write carries a TTL within one period of its window):
  fixed-window    integer counter, expires AT the epoch-aligned window end
  sliding-window  string "window:prev:cur" (window = floor(now / period)), lives until the next window ends
                  (a write within the same window keeps the expiry the window's first write set)
  sliding-log     ZSET, one member per unit, `<request id>:<score>:<unit>`, score = time in µs (a lease's:
                  its end); expires one period plus min(period, 10 s) after the last write (the furthest a lease's
                  members can be scored ahead)
  token-bucket,   integer TAT (theoretical arrival time, µs): both algorithms ARE the same state;
  gcra            emission interval = ceil(period / limit) in whole µs; expires when the bucket is full.
                  <key>:refunded, the refund ledger, and <key>:leased, the lease mark (above, "The refund
                  ledger"): only where split decisions can be refunded (a Redis Cluster, several databases),
                  once one was refunded or a lease granted or returned
  concurrency,    ZSET of request ids scored by lease expiry (µs); expired leases dropped on acquire. A shed
  shed            rule's budget is split over sub-keys (one per identity the edge derives), so no one key is
                  touched by every request; each is a concurrency set, admitting while fewer than `limit` hold
]]

-- Slots of one rule's ARGV group (see the header).
local ALGORITHM, MODE, LIMIT, PERIOD, BURST, COST, DELAY, PER_RULE = 0, 1, 2, 3, 4, 5, 6, 7
-- A split decision's refund: each rule's stamp after the rule groups, STAMP_WORDS slots (see the header).
local STAMP_TAT, STAMP_AT, STAMP_REPLACED, STAMP_WORDS = 0, 1, 2, 3
-- The longest a lease lives (RATE_LIMIT_LEASE_MS is validated to at most this), ms.
local LEASE_HORIZON_MS = 10000
-- The oldest stamp that proves anything, ms: a split decision's refund or a give-back whose decision is older
-- gives nothing (the longest reset fence may have fallen since); also how long a refund ledger keeps a member
-- and a lease mark stands (see the header).
local STAMP_HORIZON_MS = 30000
-- How far a fixed-window counter's expiry may lie from its window's end before it is re-aimed, ms: PTTL and
-- TIME are read a moment apart, while the ends of windows of whole-second periods lie whole seconds apart.
local REAIM_SLACK_MS = 100
-- Algorithm codes, compared as the strings they arrive as (cheaper than tonumber).
local FIXED, SLIDING, LOG, BUCKET, GCRA, CONCURRENCY, SHED = "1", "2", "3", "4", "5", "6", "7"
-- Every code above (src/engine/algorithms.ts holds the same, and a test compares them).
local KNOWN = { [FIXED] = true, [SLIDING] = true, [LOG] = true, [BUCKET] = true, [GCRA] = true,
  [CONCURRENCY] = true, [SHED] = true }

-- Give-back call (see the header): compare-and-set of a delayed request's reservation.
if ARGV[1] == "5" then
  local state, fence = KEYS[1], KEYS[2]
  local written, replaced, decided = ARGV[2], ARGV[3], tonumber(ARGV[4]) -- µs: the decision's stamp
  if redis.call("GET", state) ~= written or redis.call("EXISTS", fence) == 1 then
    return 0
  end
  local time = redis.call("TIME")
  if tonumber(time[1]) * 1000000 + tonumber(time[2]) - decided > STAMP_HORIZON_MS * 1000 then
    return 0
  end
  redis.call("SET", state, replaced, "PXAT", string.format("%d", math.ceil(tonumber(replaced) / 1000)))
  return 1
end

-- Fast path: ONE fixed-window rule, no override, no options: the commonest call, and the cheapest. It is the
-- general path below for that case with nothing else to do (the same values; the short reply when allowed on
-- a live counter); anything unusual (another algorithm's state under this key, cost over the limit) goes on
-- to the general path untouched.
-- (A plain call's rule 1 starts at ARGV[2].)
if #ARGV == 1 + PER_RULE and ARGV[1] == "0" and ARGV[2 + ALGORITHM] == FIXED and ARGV[2 + MODE] == "1" then
  local limit, cost_arg = tonumber(ARGV[2 + LIMIT]), ARGV[2 + COST] -- units
  local cost = tonumber(cost_arg) -- units
  if limit > 0 and cost <= limit then
    local counted = redis.pcall("INCRBY", KEYS[1], cost_arg)
    if type(counted) == "number" and counted - cost <= 1e13 then
      if counted == cost then -- a new counter: its expiry is its window's end, on Redis's clock
        local time = redis.call("TIME")
        local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) -- ms
        local period = tonumber(ARGV[2 + PERIOD]) -- ms
        local end_ms = now_ms - now_ms % period + period -- ms
        redis.call("PEXPIREAT", KEYS[1], string.format("%d", end_ms))
        local reset_after = math.ceil(end_ms - (tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000))
        return { 1, 1, limit, limit - cost, reset_after, reset_after }
      elseif counted <= limit then
        return limit - counted -- the short reply (see the header)
      end
      redis.call("DECRBY", KEYS[1], cost_arg) -- denied: nothing counted, Retry-After on Redis's clock
      local reset = redis.call("PTTL", KEYS[1])
      return { 0, 0, limit, limit - counted + cost, reset, reset }
    elseif type(counted) == "number" then
      redis.call("DECRBY", KEYS[1], cost_arg) -- a token-bucket/gcra TAT: the general path replaces it
    end
  end
end

local call = ARGV[1]
local request_id = call ~= "0" and ARGV[2] or "" -- only sliding-log, concurrency and shed rules use it
local peek = call == "2" and ARGV[3] == "1"
local stamped = call == "2" and ARGV[3] == "2" -- the reply carries every written bucket's stamps
local offset_ms = call == "2" and tonumber(ARGV[4]) or 0 -- ms; 0 in production
local first = call == "0" and 2 or call == "1" and 3 or (call == "3" or call == "4") and 4 or 5 -- rule 1's first slot
local lease = call == "4" -- a LEASE call: one more slot per rule after the groups (see the header)
local split_refund = call == "3" and tonumber(ARGV[3]) < 0 -- "-<age>": STAMP_WORDS more slots per rule, its stamp
local n = (#ARGV - first + 1) / (lease and PER_RULE + 1 or split_refund and PER_RULE + STAMP_WORDS or PER_RULE)

-- Measured (redis-server 7.0, INFO commandstats): EVALSHA itself about 2 µs plus ~0.27 per argument, a
-- redis.call about 0.7-1 µs (TIME 1.2 + 0.9 for its tonumbers, INCRBY 3.0, HGETALL of a missing key 1.8),
-- a table with 9 fields 1.3, string.format 0.4, tonumber 0.2, while arithmetic is nearly free. So: the
-- fewest commands on the allowed path, no functions on the fast paths (a chunk-level function is re-created
-- by every EVALSHA that reaches its definition: the script's one function is defined after them), no table
-- for a single rule's pending write, and µs rounded up to ms inline.
local floor, ceil, format = math.floor, math.ceil, string.format
local now_us, now_ms -- µs, ms: Redis's clock (plus the test offset), read below only if a rule needs it
local clock = call == "2" or lease -- peek and time travel always read it; a lease's life is on the clock

-- Re-aim (call "6", see the header): the admin API's, after an override was set or removed.
if call == "6" then
  local time = redis.call("TIME")
  local now = tonumber(time[1]) * 1000 + floor(tonumber(time[2]) / 1000) -- ms
  local period = tonumber(ARGV[2]) -- ms, the period in force
  local until_end = period - now % period -- ms until the window in force ends
  local ttl = redis.call("PTTL", KEYS[1]) -- ms; -2: no counter, -1: none of its own
  -- In a window's first instant the counter still visible may be the previous window's, about to expire:
  -- its PTTL gives it away (as in the decision below), and it is left to expire, count and all.
  local dying = now % period < 2 and ttl >= 0 and ttl < period / 2
  if ttl == -2 or dying or math.abs(ttl - until_end) <= REAIM_SLACK_MS then
    return 0
  end
  redis.call("PEXPIREAT", KEYS[1], format("%d", now + until_end))
  return 1
end

-- Fence (call "7", see the header): the admin API's, for a reset and an override's set or removal.
if call == "7" then
  local fence = KEYS[1]
  local fence_ms, longest_ms = tonumber(ARGV[2]), tonumber(ARGV[4]) -- ms
  local states_at = 2 -- KEYS index of the first state key
  if ARGV[3] == "1" then -- a bucket: KEYS[2] its refund ledger, then its state
    states_at = 3
    if redis.call("EXISTS", KEYS[2]) == 1 then
      fence_ms = longest_ms -- a split refund lowered its TAT lately, maybe below a write still pending
    else
      for i = states_at, #KEYS do -- until its TAT too (+1: Redis counts the PX from its whole ms)
        fence_ms = math.max(fence_ms, math.min(redis.call("PTTL", KEYS[i]) + 1, longest_ms))
      end
    end
  end
  if fence_ms > 0 and redis.call("PTTL", fence) < fence_ms then -- never shorter (-2: none yet)
    redis.call("SET", fence, "1", "PX", fence_ms)
  end
  return #KEYS >= states_at and redis.call("DEL", unpack(KEYS, states_at)) or 0
end

-- Fast paths for ONE rule without override or options, the commonest call: token-bucket / gcra and the
-- sliding window's allowed path, the general path below for that case with nothing else to do (the same
-- values; the short reply when allowed). A sliding-window denial goes on to the general path with the clock
-- already read.
local single_algorithm = n == 1 and call == "0" and ARGV[2 + MODE] == "1" and ARGV[2 + ALGORITHM]
if single_algorithm == BUCKET or single_algorithm == GCRA or single_algorithm == SLIDING then
  local time = redis.call("TIME")
  now_us = time[1] * 1000000 + time[2] -- Lua's own string arithmetic: cheaper than two tonumber calls
  now_ms = floor(now_us / 1000)
  local limit, cost_arg = tonumber(ARGV[2 + LIMIT]), ARGV[2 + COST] -- units
  local cost = cost_arg == "1" and 1 or tonumber(cost_arg) -- units
  local period_us = tonumber(ARGV[2 + PERIOD]) * 1000 -- µs
  local key = KEYS[1]
  if single_algorithm ~= SLIDING then
    local burst = tonumber(ARGV[2 + BURST]) -- units
    if limit > 0 and cost <= burst then
      local interval_us = ceil(period_us / limit)
      local capacity_us = burst * interval_us
      local tat_us = tonumber(redis.pcall("GET", key)) or 0
      if tat_us < now_us then
        tat_us = now_us
      end
      local tat_after_us = tat_us + cost * interval_us
      if tat_after_us - now_us <= capacity_us then
        redis.call("SET", key, format("%d", tat_after_us), "PXAT", format("%d", ceil(tat_after_us / 1000)))
        local avail_after = floor((now_us + capacity_us - tat_after_us) / interval_us)
        local wait_us = tat_after_us - capacity_us + (avail_after + 1) * interval_us - now_us
        return { avail_after, ceil((tat_after_us - now_us) / 1000), wait_us > 0 and ceil(wait_us / 1000) or 0 }
      end
      local wait_us = tat_after_us - capacity_us - now_us -- > 0: over the rate
      local delay_us = ARGV[2 + DELAY] * 1000
      if wait_us <= delay_us then -- delayed: the slot is reserved now, the caller waits for it
        redis.call("SET", key, format("%d", tat_after_us), "PXAT", format("%d", ceil(tat_after_us / 1000)))
        local wait_ms = ceil(wait_us / 1000)
        return { 1, 3, limit, 0, ceil((tat_after_us - now_us) / 1000), wait_ms, tat_after_us, tat_us, now_us }
      end
      wait_us = wait_us - delay_us -- a rule with a delay: when the request would fit in the queue
      return {
        0,
        0,
        limit,
        floor((now_us + capacity_us - tat_us) / interval_us),
        tat_us > now_us and ceil((tat_us - now_us) / 1000) or 0,
        wait_us > 0 and ceil(wait_us / 1000) or 0,
      }
    end
  elseif limit > 0 and cost <= limit then
    local period = period_us / 1000 -- ms
    local window = floor(now_ms / period)
    local start_us = window * period_us
    local end_us = start_us + period_us
    local prev, cur, same = 0, 0, nil
    local raw = redis.pcall("GET", key)
    if type(raw) == "string" then
      local head, w, p, c = string.match(raw, "^((%d+):(%d+):)(%d+)$")
      w = tonumber(w)
      if w == window then
        same, prev, cur = head, tonumber(p), tonumber(c)
      elseif w == window - 1 then
        prev = tonumber(c)
      end
    end
    local in_view_us = end_us - now_us -- µs of the previous window still in view
    if prev * in_view_us + (cur + cost) * period_us <= limit * period_us then
      if same then
        redis.call("SET", key, same .. (cur + cost), "KEEPTTL")
      else
        local expire_ms = format("%d", ceil((end_us + period_us) / 1000))
        redis.call("SET", key, format("%d:%d:%d", window, prev, cur + cost), "PXAT", expire_ms)
      end
      local c = cur + cost
      local avail_after = floor(limit - prev * in_view_us / period_us - c + 1e-9)
      local need, wait_us = avail_after + 1, 0 -- ms until one more unit fits
      if c + need <= limit then
        if prev > 0 then
          wait_us = start_us + period_us * (1 - (limit - need - c) / prev) - now_us
        end
      else
        wait_us = end_us + period_us * (1 - (limit - need) / c) - now_us
      end
      return { avail_after, ceil((end_us + period_us - now_us) / 1000), wait_us > 0 and ceil(wait_us / 1000) or 0 }
    end
  end
end

-- The identity's override under a rule (KEYS[key]): whether there is one, then its limit, period (ms) and
-- burst, nil where it sets none. HGETALL, not HMGET: an override may have expired since the caller learnt of
-- it, and an empty reply is the cheapest. (Defined here, past the fast paths: they never read an override.)
local function read_override(key)
  local o = redis.call("HGETALL", key)
  local limit, period, burst
  for j = 1, #o, 2 do
    local field = o[j]
    if field == "limit" then
      limit = tonumber(o[j + 1])
    elseif field == "period" then
      period = tonumber(o[j + 1])
    elseif field == "burst" then
      burst = tonumber(o[j + 1])
    end
  end
  return o[1] ~= nil, limit, period, burst
end

-- Refund (call "3"): give back `cost` units each rule consumed at `when` (see the header). Its own block, so
-- the decision paths below stay as they are; rare (lease returns, undoing a split decision), so it reads
-- the clock unconditionally. Never gives back more than the state still holds.
if call == "3" then
  local time = redis.call("TIME")
  now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local when_us = tonumber(ARGV[3]) -- µs; 0 = unknown: "the current window"
  if when_us < 0 then
    -- "At most -when µs ago" (a split decision undone): the earliest instant the units can have been taken,
    -- so a window boundary crossed since then refunds nothing rather than the next window's units.
    when_us = now_us + when_us
  elseif when_us == 0 then
    when_us = now_us
  end
  local returned = {}
  local marked = #KEYS >= 4 * n -- the refund ledgers and lease marks are there (see the header)
  local override_at = n
  for i = 1, n do
    local at = first + (i - 1) * PER_RULE
    local algorithm, mode = ARGV[at + ALGORITHM], ARGV[at + MODE]
    local limit, period = tonumber(ARGV[at + LIMIT]), tonumber(ARGV[at + PERIOD]) -- units, ms
    local units = tonumber(ARGV[at + COST]) -- units to give back
    local key = KEYS[i]
    if mode == "3" or mode == "2" then -- the limits in force are the override's (as a decision reads them)
      override_at = override_at + 1
      local _, o_limit, o_period = read_override(KEYS[override_at])
      limit, period = o_limit or limit, o_period or period
    elseif mode == "5" or mode == "4" then
      -- Priced at an override: its units go back only while that override is still in force. One that ended
      -- by its ttl since (no admin call, no fence) may have left a counter that never counted them, ending
      -- where the units' window ends (see the header, "Returned units"); one set again since is fenced.
      override_at = override_at + 1
      local exists, o_limit, o_period = read_override(KEYS[override_at])
      if not (exists and o_limit == limit and (o_period or period) == period) then
        units = 0
      end
    end
    local period_us = period * 1000 -- µs
    local given = 0 -- units actually given back
    local fence = KEYS[#KEYS - n + i] -- the state's reset fence (after the ledgers and the lease marks)
    if limit <= 0 or units <= 0 then -- nothing was consumed under a blocking override
    elseif (algorithm == FIXED or algorithm == SLIDING or algorithm == BUCKET or algorithm == GCRA)
      and redis.call("EXISTS", fence) == 1 then
      -- Reset since: what was taken before belongs to the state the reset threw away. After the fence, the
      -- tests below refuse it (see the header, "Why a reset's fence may be short"). (Sliding-log and
      -- concurrency refunds remove members by name, and a reset already removed those.)
    elseif algorithm == FIXED then
      -- Only the counter of the window the units were taken in, while it is that window's, and only if it
      -- ends where that window ends: one created or re-aimed under another period (an override set, removed
      -- or ended since) ends elsewhere, and did not count them (see the header, "Returned units").
      local window = floor(when_us / period_us)
      if window == floor(now_us / period_us)
        and math.abs(redis.call("PTTL", key) - ((window + 1) * period_us - now_us) / 1000) <= REAIM_SLACK_MS then
        local used = tonumber(redis.pcall("GET", key))
        if used and used <= 1e13 then
          given = math.min(units, used)
          if given > 0 then
            redis.call("DECRBY", key, given)
          end
        end
      end
    elseif algorithm == SLIDING then
      local raw = redis.pcall("GET", key)
      if type(raw) == "string" then
        local head, w, c = string.match(raw, "^((%d+):%d+:)(%d+)$")
        w, c = tonumber(w), tonumber(c)
        if w and w == floor(when_us / period_us) and w == floor(now_us / period_us) then
          given = math.min(units, c)
          redis.call("SET", key, head .. (c - given), "KEEPTTL")
        end
      end
    elseif algorithm == BUCKET or algorithm == GCRA then
      -- The TAT moves back by the units' emission intervals, never below now: what has refilled since stays
      -- refilled. A lease's return (`when` > 0: the TAT the lease wrote) only while that write is still the
      -- TAT: after any other arrival, a reset, or a refill past it, its units may stand for someone else's.
      -- A split decision's refund (its stamp: the TAT W it wrote at d, replacing P) gives back at most W - now,
      -- less what refunds of earlier split decisions gave back since d (its refund ledger), and enters what it
      -- gives in the ledger; nothing without a stamp, or after a lease since d. To a rule with a delay it is a
      -- compare-and-set instead: P again while W is still the TAT (see the header).
      local tat_us = tonumber(redis.pcall("GET", key))
      local written_us = tonumber(ARGV[3]) -- > 0: a lease's return, the TAT its lease wrote
      local stamp_at = first + n * PER_RULE + STAMP_WORDS * (i - 1) -- a split refund's stamp
      local stamp_us = split_refund and tonumber(ARGV[stamp_at + STAMP_TAT]) or 0 -- µs, W
      local held = split_refund and ARGV[at + DELAY] ~= "0" -- a rule whose requests may be held
      local expected_us = held and stamp_us or written_us -- compared with the TAT when > 0
      if expected_us > 0 and tat_us ~= expected_us or split_refund and stamp_us == 0 then
        tat_us = nil -- no longer the write the units' call made, or nothing known owed
      end
      if tat_us and tat_us > now_us then
        local interval_us = ceil(period_us / limit)
        local owed_us = units * interval_us
        local ledger, leased = KEYS[#KEYS - 3 * n + i], KEYS[#KEYS - 2 * n + i]
        local decided_us = split_refund and tonumber(ARGV[stamp_at + STAMP_AT]) -- d
        if split_refund and now_us - decided_us > STAMP_HORIZON_MS * 1000 then
          owed_us = 0 -- older than the ledger keeps (and than the longest reset fence): nothing known owed
        elseif held then
          owed_us = math.min(owed_us, tat_us - tonumber(ARGV[stamp_at + STAMP_REPLACED])) -- back to P
        elseif split_refund then
          local leased_us = marked and tonumber(redis.call("GET", leased)) or 0 -- the last lease grant or return
          if leased_us >= decided_us or not marked then
            owed_us = 0 -- a lease may lie above its units (or the keys telling are missing): nothing known owed
          else
            local since_us = 0 -- µs that refunds of split decisions made at or before d gave back since d
            for _, entry in ipairs(redis.call("ZRANGEBYSCORE", ledger, ARGV[stamp_at + STAMP_AT], "+inf")) do
              local moved_us, entry_decided_us = string.match(entry, "^(%d+):(%d+):")
              if tonumber(entry_decided_us) <= decided_us then
                since_us = since_us + tonumber(moved_us)
              end
            end
            owed_us = math.min(owed_us, stamp_us - now_us - since_us)
          end
        end
        if owed_us > 0 then
          local back_us = math.max(tat_us - owed_us, now_us)
          given = math.min(units, ceil((tat_us - back_us) / interval_us))
          redis.call("SET", key, format("%d", back_us), "PXAT", format("%d", ceil(back_us / 1000) + 1))
          if split_refund and not held then
            local entry = format("%d:%s:%s", tat_us - back_us, ARGV[stamp_at + STAMP_AT], request_id)
            redis.call("ZADD", ledger, format("%d", now_us), entry)
            redis.call("ZREMRANGEBYSCORE", ledger, "-inf", format("%d", now_us - STAMP_HORIZON_MS * 1000))
            redis.call("PEXPIRE", ledger, STAMP_HORIZON_MS)
          elseif written_us > 0 and marked then -- a lease's return: a split refund of a decision before it gives nothing
            redis.call("SET", leased, format("%d", now_us), "PX", STAMP_HORIZON_MS)
          end
        end
      end
    elseif algorithm == LOG then
      -- The members this call's request id recorded at `when` (`<id>:<when µs>:<unit>`); when unknown, any
      -- of the id's members still in the window.
      local members = {}
      if tonumber(ARGV[3]) > 0 then
        local prefix = request_id .. ":" .. format("%d", when_us) .. ":"
        for unit = 1, units do
          members[unit] = prefix .. unit
        end
      else
        local since = "(" .. format("%d", now_us - period_us)
        local prefix = request_id .. ":"
        local all = redis.pcall("ZRANGEBYSCORE", key, since, "+inf")
        if type(all) == "table" then
          for _, member in ipairs(all) do
            if #members < units and string.sub(member, 1, #prefix) == prefix then
              members[#members + 1] = member
            end
          end
        end
      end
      for j = 1, #members, 1000 do -- unpack() has a stack limit
        local removed = redis.pcall("ZREM", key, unpack(members, j, math.min(j + 999, #members)))
        given = given + (type(removed) == "number" and removed or 0)
      end
    elseif algorithm == CONCURRENCY then
      local removed = redis.pcall("ZREM", key, request_id)
      given = type(removed) == "number" and removed or 0
    end
    returned[i] = given
  end
  return returned
end

for i = 1, n do
  local at = first + (i - 1) * PER_RULE
  local mode = ARGV[at + MODE]
  local algorithm = ARGV[at + ALGORITHM]
  if algorithm ~= FIXED or mode == "3" or mode == "2" then
    clock = true -- every other algorithm works from now; an override may change the period
  end
  if not KNOWN[algorithm] then
    -- A code this script does not know: an error before anything is written, never a silent verdict.
    return redis.error_reply("ERR unknown algorithm code " .. tostring(algorithm))
  end
end
if clock and not now_us then
  local time = redis.call("TIME")
  now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000
  now_ms = floor(now_us / 1000)
end
-- (Lua numbers given to redis.call are formatted by Redis, which costs more than passing strings.)

-- Phase 1: evaluate every rule. The reply gets each rule's values as things stand now; an allowing rule
-- also leaves its write, and its values after that write, for phase 2: the first such rule in locals (with
-- one rule, no table at all), any further one as an array { i, period_us, value, expire_us, clear,
-- avail_after, reset_after, more_after, undo } in `more_pending`.
-- The one exception is the fixed-window counter, which phase 1 increments at once (one command instead of
-- GET now and INCRBY later) and takes back if the rule denies or, in phase 2, if the request is denied.
local reply = n == 1 and { 1, 0, 0, 0, 0, 0 } or { 1 } -- sized at once for the common single rule
-- Leases granted by this call (call "4"): rule index -> units (this request's cost included), life ms,
-- the period in force (ms), and for token-bucket/gcra the TAT written.
local lease_ms = lease and tonumber(ARGV[3]) or 0 -- ms, the longest life a lease may have
local lease_units, lease_life, lease_period, lease_tat = {}, {}, {}, {} -- lease_tat: token-bucket/gcra (µs)
local p_i, p_period_us, p_value, p_expire_us, p_clear, p_avail_after, p_reset_after, p_more_after, p_undo
local more_pending
local stamps -- rule index -> { TAT written, TAT replaced } of token-bucket/gcra rules, once one is delayed
local delayed_any = false
local periods -- rule index -> the period in force, where an override applied (the reply's last appendix)
local allowed = true
local override_at = n -- KEYS index of the last override key used
for i = 1, n do
  local at = first + (i - 1) * PER_RULE
  local algorithm = ARGV[at + ALGORITHM]
  local mode = ARGV[at + MODE]
  local limit = tonumber(ARGV[at + LIMIT]) -- units
  local period = tonumber(ARGV[at + PERIOD]) -- ms
  local burst -- units; parsed only by the algorithms that use it
  local cost_arg = ARGV[at + COST]
  local cost = cost_arg == "1" and 1 or tonumber(cost_arg) -- units
  local key = KEYS[i]
  local override_left -- ms the override in force has left (a lease never outlives it); -1: no ttl
  if mode == "3" or mode == "2" then
    -- Read here, in the same atomic call, so "read override" and "apply limit" cannot race.
    override_at = override_at + 1
    local exists, o_limit, o_period, o_burst = read_override(KEYS[override_at])
    if exists then
      if lease then
        override_left = redis.call("PTTL", KEYS[override_at])
      end
      if o_limit then
        limit = o_limit
        burst = o_burst or o_limit
      elseif o_burst then
        burst = o_burst
      end
      period = o_period or period
      periods = periods or {}
      periods[i] = period
    end
  end
  local period_us = period * 1000 -- µs
  if algorithm == SHED then
    algorithm = CONCURRENCY -- the same slots; only the edge's limit (the class's share) differs
  end
  if algorithm == CONCURRENCY then
    cost = 1 -- one slot per request
  end
  local capacity = limit
  if algorithm == BUCKET or algorithm == GCRA then
    burst = burst or tonumber(ARGV[at + BURST])
    capacity = burst
  end
  -- More than the rule can ever grant: denied with a clear outcome, never counted, never a Lua error.
  local impossible = limit <= 0 or cost > capacity

  -- What each algorithm works out; "after" = once this request is consumed.
  local allow = false
  local avail, avail_after = 0, 0 -- units available
  local reset, reset_after = 0, 0 -- ms until fully reset
  local more, more_after = 0, 0 -- ms until more quota is available, 0 when full
  local retry = period -- ms until this request would fit
  local value, expire_us -- the write of string-state algorithms: SET key value PXAT expire
  -- State of another shape (the rule changed algorithm under the same name) reads as empty and is replaced:
  -- SET overwrites any type, the sorted-set algorithms delete it first. Hence pcall on the first read.
  local clear = false
  -- Set when phase 1 already wrote (fixed window): "del" (it created the counter) or "decr" takes it back.
  local undo = false
  -- Sorted sets: the "now" reset is only worth a command if the rule is not going to be written.
  local deferred = false
  local delayed = false -- token-bucket/gcra with a delay: allowed from a reserved slot, `retry` ms from now

  if limit <= 0 then -- an override of limit 0 blocks the identity: nothing to read
  elseif algorithm == FIXED then
    local used
    if not peek and not impossible then
      -- Optimistic: count first, take back below if this rule denies (nothing else runs in between).
      local counted = redis.pcall("INCRBY", key, cost_arg)
      if type(counted) == "number" and counted - cost <= 1e13 then
        used = counted - cost
        if used == 0 then
          -- A new counter: it must never exist without its expiry, so it gets it at once, on Redis's clock.
          if not now_us then
            local time = redis.call("TIME")
            now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000
            now_ms = floor(now_us / 1000)
          end
          redis.call("PEXPIREAT", key, format("%d", now_ms - now_ms % period + period - offset_ms))
          undo = "del"
        elseif now_us and now_us % period_us < 2000 and redis.call("PTTL", key) < period / 2 then
          -- With the clock read (TIME comes a moment after the instant the script's keys expire at), in the
          -- first instant of a window the previous window's counter may still be visible. Its PTTL gives it
          -- away: take the increment back and start this window's counter with SET below.
          redis.call("DECRBY", key, cost_arg)
          used = 0
        else
          undo = "decr"
          if mode == "3" or mode == "2" then
            -- Created under another period, maybe (an override set, removed or ended by its ttl since):
            -- re-aimed at the end of the window in force, its count kept (see the header's "Time:").
            local until_end = period - now_ms % period -- ms
            if math.abs(redis.call("PTTL", key) - until_end) > REAIM_SLACK_MS then
              redis.call("PEXPIREAT", key, format("%d", now_ms + until_end - offset_ms))
            end
          end
        end
      elseif type(counted) == "number" then
        -- A µs timestamp (TAT) left by token-bucket/gcra under this rule name: no count. SET replaces it.
        redis.call("DECRBY", key, cost_arg)
        used = 0
      end
    end
    if not used or not undo and not now_us then
      -- Peek, cost over capacity, another algorithm's state, or a SET ahead: those work from the clock.
      if not now_us then
        local time = redis.call("TIME")
        now_us = tonumber(time[1]) * 1000000 + tonumber(time[2]) + offset_ms * 1000
        now_ms = floor(now_us / 1000)
      end
    end
    if not used then
      -- Read only.
      used = tonumber(redis.pcall("GET", key)) or 0
      if used > 1e13 then -- no count: a µs timestamp (TAT) left by token-bucket/gcra under this rule name
        used = 0
      end
      if used > 0 and now_us % period_us < 2000 and redis.call("PTTL", key) < period / 2 then
        used = 0 -- the previous window's counter, see above
      end
    end
    allow = used + cost <= limit
    avail, avail_after = limit - used, limit - used - cost
    if now_us then
      reset_after = ceil(((now_ms - now_ms % period + period) * 1000 - now_us) / 1000)
    elseif allow then
      reset_after = -1 -- the end of the current window, worked out by the caller (see the header)
    else
      reset_after = redis.call("PTTL", key) -- a denial answers on Redis's clock
    end
    if used > 0 then
      reset = reset_after
    end
    more, more_after = reset, reset_after
    retry = reset_after -- the next window grants the whole limit (and cost <= limit, or it is outcome 2)
    if not undo then
      value, expire_us = tostring(used + cost), (now_ms - now_ms % period + period) * 1000
    end
  elseif algorithm == SLIDING then
    local window = floor(now_ms / period)
    local start_us = window * period_us
    local end_us = start_us + period_us
    local prev, cur = 0, 0
    local same -- "window:prev:" as stored, when the state is of this window: reused, not re-formatted
    local raw = redis.pcall("GET", key)
    if type(raw) == "string" then
      local head, w, p, c = string.match(raw, "^((%d+):(%d+):)(%d+)$")
      w = tonumber(w)
      if w == window then
        same, prev, cur = head, tonumber(p), tonumber(c)
      elseif w == window - 1 then
        prev = tonumber(c)
      end
    end
    local in_view_us = end_us - now_us -- µs of the previous window still in view
    -- prev * in_view + (cur + cost) * period <= limit * period: exact in doubles for sane sizes.
    allow = prev * in_view_us + (cur + cost) * period_us <= limit * period_us
    local estimate = prev * in_view_us / period_us + cur
    avail = floor(limit - estimate + 1e-9)
    avail_after = floor(limit - estimate - cost + 1e-9)
    if cur > 0 then
      reset = ceil((end_us + period_us - now_us) / 1000)
    elseif prev > 0 then
      reset = ceil(in_view_us / 1000)
    end
    reset_after = ceil((end_us + period_us - now_us) / 1000)
    -- µs until prev * (share of the previous window still in view) + c + need <= limit, three times
    -- (k = 1: more now, 2: more after this request, 3: this request), unrolled in a loop, not a function.
    for k = avail < limit and 1 or 2, 3 do
      local c, need = cur, cost
      if k == 1 then
        need = avail + 1
      elseif k == 2 then
        c, need = cur + cost, avail_after + 1
      end
      local wait_us = 0
      if c + need <= limit then
        if prev > 0 then
          -- prev * (period - e) / period <= limit - need - c, solved for e (µs into the current window)
          wait_us = start_us + period_us * (1 - (limit - need - c) / prev) - now_us
        end
      else -- only the next window can fit it: there c becomes prev
        wait_us = start_us + period_us + period_us * (1 - (limit - need) / c) - now_us
      end
      wait_us = wait_us > 0 and ceil(wait_us / 1000) or 0
      if k == 1 then
        more = wait_us
      elseif k == 2 then
        more_after = wait_us
      else
        -- +1 ms: rounding the exact instant up to whole ms must never land on "still denied".
        retry = wait_us + 1
      end
    end
    -- The state of this window already expires where this write would make it expire (the end of the
    -- next window): SET keeps that expiry (KEEPTTL), which costs Redis half as much as setting it again.
    if same then
      value, expire_us = same .. (cur + cost), "keep"
    else
      value, expire_us = format("%d:%d:%d", window, prev, cur + cost), end_us + period_us
    end
  elseif algorithm == BUCKET or algorithm == GCRA then
    -- One TAT (theoretical arrival time); tokens available = (now + capacity - TAT) / interval.
    local interval_us = ceil(period_us / limit) -- whole µs keep the arithmetic exact
    local capacity_us = burst * interval_us
    local tat_us = tonumber(redis.pcall("GET", key)) or 0
    if tat_us < now_us then
      tat_us = now_us
    end
    local tat_after_us = tat_us + cost * interval_us
    local delay_us = ARGV[at + DELAY] * 1000 -- µs a request over the rate may wait for its slot
    allow = tat_after_us - now_us <= capacity_us + delay_us
    delayed = allow and not impossible and tat_after_us - now_us > capacity_us
    avail = floor((now_us + capacity_us - tat_us) / interval_us)
    avail_after = floor((now_us + capacity_us - tat_after_us) / interval_us)
    reset = tat_us > now_us and ceil((tat_us - now_us) / 1000) or 0
    reset_after = ceil((tat_after_us - now_us) / 1000)
    -- The next whole unit arrives when now + capacity - TAT reaches (avail + 1) intervals.
    if avail < burst then
      local wait_us = tat_us - capacity_us + (avail + 1) * interval_us - now_us
      more = wait_us > 0 and ceil(wait_us / 1000) or 0
    end
    local wait_us = tat_after_us - capacity_us + (avail_after + 1) * interval_us - now_us
    more_after = wait_us > 0 and ceil(wait_us / 1000) or 0
    wait_us = tat_after_us - capacity_us - now_us
    if delayed then
      retry = ceil(wait_us / 1000)
      more_after, delayed_any = retry, true -- what phase 2 reports: the wait until its slot
    else
      wait_us = wait_us - delay_us -- denied with a delay: when it would fit in the queue
      retry = wait_us > 0 and ceil(wait_us / 1000) or 0
    end
    if allow and not impossible then
      stamps = stamps or {}
      stamps[i] = { tat_after_us, tat_us }
    end
    value, expire_us = format("%d", tat_after_us), tat_after_us
  elseif algorithm == LOG then
    local since = "(" .. format("%d", now_us - period_us) -- members newer than this are in the window
    local used = redis.pcall("ZCOUNT", key, since, "+inf")
    if type(used) ~= "number" then
      used, clear = 0, true
    end
    allow = used + cost <= limit
    avail, avail_after = limit - used, limit - used - cost
    reset_after, more_after = period, period
    if used > 0 then
      local oldest = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", 0, 1)
      more = ceil((oldest[2] + period_us - now_us) / 1000)
      more_after = more
      if allow and not peek and not impossible then
        deferred = true -- written after all, unless the request is denied: then phase 2 reads it
      else
        local newest = redis.call("ZREVRANGEBYSCORE", key, "+inf", since, "WITHSCORES", "LIMIT", 0, 1)
        reset = ceil((newest[2] + period_us - now_us) / 1000)
      end
    end
    if not allow and cost <= limit then
      -- The request fits once the (used + cost - limit)-th oldest unit has left the window.
      local nth = redis.call("ZRANGEBYSCORE", key, since, "+inf", "WITHSCORES", "LIMIT", used + cost - limit - 1, 1)
      retry = ceil((nth[2] + period_us - now_us) / 1000)
    end
  elseif algorithm == CONCURRENCY then
    local live = "(" .. format("%d", now_us) -- leases expiring after now still hold a slot
    local held = redis.pcall("ZCOUNT", key, live, "+inf")
    if type(held) ~= "number" then
      held, clear = 0, true
    end
    allow = held < limit
    avail, avail_after = limit - held, limit - held - 1
    reset_after = period
    if held > 0 then
      if allow and not peek then
        deferred = true -- written after all, unless the request is denied: then phase 2 reads it
      else
        local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", live, "WITHSCORES", "LIMIT", 0, 1)
        reset = ceil((last[2] - now_us) / 1000)
        -- Absent other traffic (no release), a slot is certain to free when the earliest lease runs out.
        local first = redis.call("ZRANGEBYSCORE", key, live, "+inf", "WITHSCORES", "LIMIT", 0, 1)
        local wait_us = first[2] - now_us
        retry = wait_us > 0 and ceil(wait_us / 1000) or 0
      end
    end
    -- more stays 0: a slot frees on release, which no clock can predict
  end

  -- LEASE (call "4"): an allowing rule asked for more than this request's cost takes up to that many units
  -- now, as if that many requests were admitted at this instant (see the header for why no unit can be
  -- spent where Redis would not have admitted it). Half of what is left at most, so that the last units of a
  -- window go one by one, centrally.
  -- Never a rule with a delay: its give-backs and split refunds are compare-and-sets that no lease may write
  -- between (see the header, REFUND).
  local wanted = lease and tonumber(ARGV[first + n * PER_RULE + i - 1]) or 0 -- units
  local leasable = ARGV[at + DELAY] == "0" and algorithm ~= CONCURRENCY -- (a shed rule is CONCURRENCY here)
  if wanted > cost and allow and leasable and not impossible then
    local life = lease_ms -- ms
    if algorithm == FIXED or algorithm == SLIDING then
      life = math.min(life, now_ms - now_ms % period + period - now_ms - 1) -- never past the window's edge
    elseif algorithm == BUCKET or algorithm == GCRA then
      -- A quarter of the bucket at most: the lease's units are recorded at its end (below), so the refill
      -- between now and then is lost to everyone; a quarter bounds that loss.
      life = math.min(life, floor(burst * ceil(period_us / limit) / 4000))
    else -- sliding-log: within the extra life every write gives the key (phase 2)
      life = math.min(life, period, LEASE_HORIZON_MS)
    end
    if override_left and override_left >= 0 then
      life = math.min(life, override_left) -- spent only under the limits it was granted under
    end
    local units = math.min(wanted, math.max(cost, floor(avail / 2)), avail)
    if life >= 10 and units > cost then
      lease_units[i], lease_life[i], lease_period[i] = units, life, period
      if algorithm == FIXED and value then -- a SET ahead (phase 1 did not count): it sets the lease's units
        value = tostring(tonumber(value) + units - cost)
      elseif algorithm == SLIDING then
        local head, c = string.match(value, "^(.*:)(%d+)$")
        value = head .. (tonumber(c) + units - cost)
      elseif algorithm == BUCKET or algorithm == GCRA then
        -- Recorded as if every unit were spent at the lease's end, the latest it can be spent.
        local interval_us = ceil(period_us / limit)
        local tat_us = math.max(tonumber(value) - cost * interval_us, now_us + life * 1000)
        expire_us = tat_us + units * interval_us
        value = format("%d", expire_us)
        lease_tat[i] = expire_us
        -- The figures it reports are the written TAT's, plus the lease's own units still to spend: never
        -- more than a client can get.
        local capacity_us = burst * interval_us
        local free = math.max(0, floor((now_us + capacity_us - expire_us) / interval_us))
        avail_after, reset_after = free + units - cost, ceil((expire_us - now_us) / 1000)
        local wait_us = expire_us - capacity_us + (free + 1) * interval_us - now_us
        more_after = wait_us > 0 and ceil(wait_us / 1000) or 0
      end
    end
  end
  local outcome = delayed and 3 or allow and 1 or 0
  if impossible then
    -- No wait lets this request in: the rule reports, as for an allowed request, when more quota is available
    -- (0 when full); the caller's Retry-After is one full period. A limit of 0 never frees any: one period.
    outcome, allow, retry = 2, false, limit > 0 and more or period
  end
  if not allow and (mode == "1" or mode == "3") then
    allowed = false
  end
  if undo and not allow then
    -- This rule denies (a monitor rule that would deny is not written either): take the count back.
    if undo == "del" then
      redis.call("DEL", key)
    else
      redis.call("DECRBY", key, cost_arg)
    end
  end
  local r = 1 + (i - 1) * 5 -- the rule's reply group follows this index
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = outcome, limit, avail, reset
  reply[r + 5] = allow and not delayed and more or retry
  if allow and not peek then
    if not p_i then
      p_i, p_period_us, p_value, p_expire_us, p_clear = i, period_us, value or false, expire_us or false, clear
      p_avail_after, p_reset_after, p_more_after, p_undo = avail_after, reset_after, more_after, undo or deferred
    else
      more_pending = more_pending or {}
      more_pending[#more_pending + 1] = {
        i,
        period_us,
        value or false,
        expire_us or false,
        clear,
        avail_after,
        reset_after,
        more_after,
        undo or deferred,
      }
    end
  end
end

-- Phase 2: write only if the request as a whole is allowed (a denied request consumes nothing anywhere).
if not allowed then
  reply[1] = 0
end
for k = 0, more_pending and #more_pending or 0 do
  if not p_i then
    break
  end
  local i, period_us, value, expire_us, clear, avail_after, reset_after, more_after, undo =
    p_i, p_period_us, p_value, p_expire_us, p_clear, p_avail_after, p_reset_after, p_more_after, p_undo
  if k > 0 then
    i, period_us, value, expire_us, clear, avail_after, reset_after, more_after, undo = unpack(more_pending[k])
  end
  local at = first + (i - 1) * PER_RULE
  local algorithm = ARGV[at + ALGORITHM]
  if algorithm == SHED then
    algorithm = CONCURRENCY
  end
  local key = KEYS[i]
  local r = 1 + (i - 1) * 5
  if not allowed then
    if undo == "del" then
      redis.call("DEL", key)
    elseif undo == "decr" then
      redis.call("DECRBY", key, ARGV[at + COST])
    elseif undo then -- a sorted set whose "now" reset phase 1 left for here
      local since_us = algorithm == LOG and now_us - period_us or now_us
      local last = redis.call("ZREVRANGEBYSCORE", key, "+inf", "(" .. format("%d", since_us), "WITHSCORES", "LIMIT", 0, 1)
      local wait_us = last[2] + (algorithm == LOG and period_us or 0) - now_us
      reply[r + 4] = wait_us > 0 and ceil(wait_us / 1000) or 0
    end
  else
    if expire_us == "keep" then
      redis.call("SET", key, value, "KEEPTTL")
    elseif value then
      -- Expiry is on Redis's own clock, which knows nothing of the test offset.
      redis.call("SET", key, value, "PXAT", format("%d", ceil(expire_us / 1000) - offset_ms))
      if lease_tat[i] and #KEYS > override_at then -- a bucket's lease: its lease mark, if sent (see the header)
        redis.call("SET", KEYS[#KEYS - n + i], format("%d", now_us), "PX", STAMP_HORIZON_MS)
      end
    elseif algorithm == LOG then
      if clear then
        redis.call("DEL", key)
      end
      local score = format("%d", now_us + (lease_life[i] or 0) * 1000) -- a lease's units: at its end
      redis.call("ZREMRANGEBYSCORE", key, "-inf", format("%d", now_us - period_us))
      local cost = lease_units[i] or tonumber(ARGV[at + COST])
      local members, prefix = {}, request_id .. ":" .. score .. ":"
      for unit = 1, cost do
        members[#members + 1] = score
        members[#members + 1] = prefix .. unit
        if #members >= 1000 or unit == cost then -- unpack() has a stack limit
          redis.call("ZADD", key, unpack(members))
          members = {}
        end
      end
      -- A lease's members are scored up to min(period, LEASE_HORIZON_MS) ahead: every write keeps the
      -- key that much longer than its newest member needs, so no write can cut a lease's members short.
      local horizon_ms = math.min(period_us / 1000, LEASE_HORIZON_MS)
      redis.call("PEXPIREAT", key, format("%d", ceil((now_us + period_us) / 1000) + horizon_ms - offset_ms))
    elseif algorithm == CONCURRENCY then
      if clear then
        redis.call("DEL", key)
      end
      redis.call("ZREMRANGEBYSCORE", key, "-inf", format("%d", now_us))
      redis.call("ZADD", key, format("%d", now_us + period_us), request_id)
      redis.call("PEXPIREAT", key, format("%d", ceil((now_us + period_us) / 1000) - offset_ms))
    elseif lease_units[i] then -- a fixed-window counter phase 1 incremented by the cost: now the rest
      redis.call("INCRBY", key, lease_units[i] - tonumber(ARGV[at + COST]))
    end
    reply[r + 3], reply[r + 4], reply[r + 5] = avail_after, reset_after, more_after
  end
end
if lease then -- after the groups: units, life, TAT and period of each rule's lease (0 = none), then Redis's now
  local at = 1 + 5 * n
  for i = 1, n do
    local granted = allowed and lease_units[i]
    reply[at + 4 * i - 3] = granted or 0
    reply[at + 4 * i - 2] = granted and lease_life[i] or 0
    reply[at + 4 * i - 1] = granted and lease_tat[i] or 0
    reply[at + 4 * i] = granted and lease_period[i] or 0
  end
  reply[at + 4 * n + 1] = now_us
end
if (delayed_any or stamped and stamps) and allowed and not peek then
  -- The stamps a give-back call or a split decision's refund needs (see the header), after the groups.
  for i = 1, n do
    local stamp = stamps[i]
    reply[#reply + 1] = stamp and stamp[1] or 0
    reply[#reply + 1] = stamp and stamp[2] or 0
    reply[#reply + 1] = stamp and now_us or 0
  end
end
if periods then -- last: every rule's period in force, negative where an override applied (see the header)
  for i = 1, n do
    reply[#reply + 1] = periods[i] and -periods[i] or tonumber(ARGV[first + (i - 1) * PER_RULE + PERIOD])
  end
end
return reply
