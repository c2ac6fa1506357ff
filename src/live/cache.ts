/**
 * The isolate's copy of the live modes. A request never waits for Redis to learn the mode. A fresh isolate's
 * first read (with the override index) starts with its first limited request, which the Worker decides under
 * the configured modes while the read is on its way (src/middleware/first-read.ts): decided again only if the
 * read shows a switch of one of its rules, so a new isolate never ignores a switch made long ago, and pays
 * one round trip for it only while such a switch is in force. After that the copy is refreshed at most once
 * per `refreshIntervalMs`, in the background (`waitUntil`), so a switch is in effect everywhere within about
 * one interval plus one Redis read, at no extra Redis round trip on the request path.
 *
 * Why not read the mode inside the decision script: a key that every request's script touches is locked by
 * every call on Upstash (key locking), which would serialize all clients of all rules behind one key.
 */
import { DEFAULTS } from "../engine/defaults";
import type { WaitUntil } from "../engine/types";
import { deadlineAfter, within } from "../util/timer";
import { type LiveModes, NO_LIVE_MODES } from "./modes";
import type { OverrideIndex } from "./overrides";

/** How the isolate's copy of the live modes is kept. */
export interface LiveModeCacheOptions {
  /** Reads the live modes from Redis. */
  load: () => Promise<LiveModes>;
  /** Minimum time between two refreshes of one isolate, ms. @default 1000 */
  refreshIntervalMs?: number;
  /** How long the first request of a fresh isolate waits for the live modes before it goes on without them, ms. @default 200 */
  coldLoadTimeoutMs?: number;
  /** A refresh still running after this long is presumed lost (its request was cancelled) and retried, ms. @default 5000 */
  staleRefreshMs?: number;
  /**
   * Called in the background when the admin change count moved since this isolate last looked; handles the
   * changes after `seenEpoch` (e.g. forgets those identities' cached denials) and returns the epoch it got to.
   */
  catchUp?: (seenEpoch: number, epoch: number) => Promise<number>;
  /** Clock, ms. @default Date.now */
  now?: () => number;
  /** The isolate's override index, handed on with every copy of the live modes (overrides.ts). */
  overrides?: OverrideIndex;
}

/** Counters for measuring what live modes cost (reads per isolate). */
export interface LiveModeCacheStats {
  /** Reads made while a request waited (fresh isolate). */
  coldLoads: number;
  /** Reads made in the background. */
  backgroundRefreshes: number;
  /** Reads that failed or timed out (the previous copy, or no live switch, stayed in force). */
  failures: number;
}

/** One isolate's copy of the live modes; see the module comment for the freshness guarantee. */
export class LiveModeCache {
  readonly stats: LiveModeCacheStats = { coldLoads: 0, backgroundRefreshes: 0, failures: 0 };
  private snapshot: LiveModes | undefined;
  private loadedAt = Number.NEGATIVE_INFINITY;
  private refreshStartedAt: number | undefined;
  /** The fresh isolate's one read on its way, which its other first requests wait for; cleared once in. */
  private coldRead: { modes: Promise<LiveModes>; untilMs: number } | undefined;
  private seenEpoch: number | undefined;
  private readonly catchUp: LiveModeCacheOptions["catchUp"];
  private readonly load: () => Promise<LiveModes>;
  private readonly refreshIntervalMs: number;
  private readonly coldLoadTimeoutMs: number;
  private readonly staleRefreshMs: number;
  private readonly now: () => number;
  /** Which identities have an override; the admin API updates it at once for overrides it writes. */
  readonly overrides: OverrideIndex | undefined;

  constructor(options: LiveModeCacheOptions) {
    this.overrides = options.overrides;
    this.load = options.load;
    this.refreshIntervalMs = options.refreshIntervalMs ?? 1000;
    this.coldLoadTimeoutMs = options.coldLoadTimeoutMs ?? DEFAULTS.timeoutMs;
    this.staleRefreshMs = options.staleRefreshMs ?? 5000;
    this.now = options.now ?? Date.now;
    this.catchUp = options.catchUp;
  }

  /**
   * The live modes for this request. Warm: answers at once and, when the copy is older than the refresh
   * interval, starts one background refresh through `waitUntil`. Cold: the first read's promise, which the
   * Worker's limiter decides beside, not after. Answers warm requests without a promise, so the request path
   * awaits nothing for its modes.
   */
  current(waitUntil: WaitUntil): LiveModes | Promise<LiveModes> {
    if (this.snapshot === undefined) return this.coldLoad();
    const now = this.now();
    const refreshing =
      this.refreshStartedAt !== undefined && now - this.refreshStartedAt < this.staleRefreshMs;
    if (!refreshing && now - this.loadedAt >= this.refreshIntervalMs) {
      this.refreshStartedAt = now;
      this.stats.backgroundRefreshes++;
      waitUntil(this.refresh());
    }
    return this.snapshot;
  }

  /**
   * The live modes as read at most `maxAgeMs` ago: an older copy is read again first (within the cold-load
   * budget; a failed read leaves the copy as it was). For the rare caller that must not act on a copy an idle
   * isolate kept for minutes (the dashboard's session check): requests go on with `current`.
   */
  async fresh(maxAgeMs = this.refreshIntervalMs): Promise<LiveModes> {
    if (this.snapshot !== undefined && this.now() - this.loadedAt < maxAgeMs) return this.snapshot;
    if (this.snapshot === undefined) return this.coldLoad();
    const modes = await this.read(this.coldLoadTimeoutMs);
    // The admin changes since the last read are caught up with by the next background refresh.
    if (modes) {
      this.snapshot = this.withOverrides(modes);
      this.loadedAt = this.now();
    }
    return this.snapshot;
  }

  /** Takes modes just read from Redis (after a switch made by this isolate), so its next request obeys them. */
  replace(modes: LiveModes): void {
    this.snapshot = this.withOverrides(modes);
    this.loadedAt = this.now();
  }

  /**
   * The first requests of a fresh isolate share ONE read: a burst into a new isolate would otherwise send a read
   * per request, and the reads' queue would spend the budget its decisions need. Each waits within its own
   * bound (the read runs in the first request's context, which may be cancelled and take it along).
   */
  private async coldLoad(): Promise<LiveModes> {
    const now = this.now();
    const shared = this.coldRead;
    // Past its own bound it was lost with its request: the next request reads again.
    if (shared === undefined || now >= shared.untilMs) {
      const read = { modes: this.firstRead(), untilMs: now + this.coldLoadTimeoutMs };
      this.coldRead = read;
      void read.modes.finally(() => {
        if (this.coldRead === read) this.coldRead = undefined;
      });
      return read.modes;
    }
    const modes = await within(shared.modes, shared.untilMs - now);
    return modes ?? this.snapshot ?? this.withOverrides(NO_LIVE_MODES);
  }

  private async firstRead(): Promise<LiveModes> {
    this.stats.coldLoads++;
    const modes = await this.read(this.coldLoadTimeoutMs);
    if (modes) {
      this.snapshot = this.withOverrides(modes);
      // A fresh isolate has no cached denials: changes made before it started are no concern of its.
      this.seenEpoch ??= modes.epoch ?? 0;
    } else {
      // A failed first read still counts as loaded: the next try is in the background, never on the path.
      this.snapshot ??= this.withOverrides(NO_LIVE_MODES);
    }
    this.loadedAt = this.now();
    return this.snapshot;
  }

  private async refresh(): Promise<void> {
    const modes = await this.read(this.staleRefreshMs);
    if (modes) {
      this.snapshot = this.withOverrides(modes);
      await this.follow(modes.epoch ?? 0);
    }
    this.loadedAt = this.now();
    this.refreshStartedAt = undefined;
  }

  private withOverrides(modes: LiveModes): LiveModes {
    return this.overrides ? { ...modes, overrides: this.overrides } : modes;
  }

  private async follow(epoch: number): Promise<void> {
    if (this.seenEpoch === undefined || epoch < this.seenEpoch || !this.catchUp) {
      this.seenEpoch = epoch;
      return;
    }
    if (epoch === this.seenEpoch) return;
    try {
      this.seenEpoch = await this.catchUp(this.seenEpoch, epoch);
    } catch {
      // Tried again on the next refresh.
    }
  }

  private async read(timeoutMs: number): Promise<LiveModes | undefined> {
    let cancel = (): void => undefined;
    const timeout = new Promise<undefined>((resolve) => {
      cancel = deadlineAfter(timeoutMs, () => resolve(undefined));
    });
    try {
      const load = this.load();
      // A read that loses the race may still fail later: that failure is expected, not an unhandled one.
      load.catch(() => undefined);
      const modes = await Promise.race([load, timeout]);
      if (!modes) this.stats.failures++;
      return modes;
    } catch {
      this.stats.failures++;
      return undefined;
    } finally {
      cancel();
    }
  }
}
