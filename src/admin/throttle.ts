/**
 * Slows guessing of the admin token (docs/security.md): a client (an IP; an IPv6 /64, which one host usually
 * owns whole) that sent `ADMIN_FAILURES_PER_WINDOW` wrong tokens, sign-ins or session cookies within
 * `ADMIN_FAILURE_WINDOW_MS` is answered 429 with `Retry-After` until that window is over, whatever it sends,
 * so a right guess among the later tries tells it nothing. Counted per isolate, in memory, at no Redis call:
 * a client reaching N isolates gets N × that many tries a minute, far too few against a token of 16 or more
 * random characters, which is the real defence.
 */
import { clientIpFrom, ipPrefix64, UNKNOWN_IP } from "../identity";
import { BoundedMap } from "../util/bounded-map";
import { AdminError } from "./problem";

/** Wrong tries one client may make per window before it is held up. */
export const ADMIN_FAILURES_PER_WINDOW = 10;
/** The window, ms: a held-up client waits for its end. */
export const ADMIN_FAILURE_WINDOW_MS = 60_000;
/** Clients remembered per isolate: the oldest are forgotten first. */
const CLIENTS = 4096;

/** One isolate's count of wrong admin tries, per client. */
export class AdminThrottle {
  private readonly failures = new BoundedMap<string, { count: number; sinceMs: number }>(CLIENTS);

  constructor(private readonly now: () => number = Date.now) {}

  /** The client a request counts against: its IP as the trusted header gives it, an IPv6 address by its /64. */
  static clientOf(request: Request, clientIpHeader: string): string {
    return ipPrefix64(clientIpFrom(request.headers, clientIpHeader) ?? UNKNOWN_IP);
  }

  /** Throws the 429 for a client held up until its window is over; otherwise returns. */
  check(client: string): void {
    const entry = this.current(client);
    if (entry === undefined || entry.count < ADMIN_FAILURES_PER_WINDOW) return;
    const retryAfterSeconds = Math.max(
      1,
      Math.ceil((entry.sinceMs + ADMIN_FAILURE_WINDOW_MS - this.now()) / 1000),
    );
    throw new AdminError(
      429,
      "Too Many Requests",
      `Too many wrong admin tokens from this client: try again in ${retryAfterSeconds} s.`,
      { "Retry-After": String(retryAfterSeconds) },
    );
  }

  /** Counts one wrong try of `client`. */
  failed(client: string): void {
    const entry = this.current(client);
    if (entry === undefined) this.failures.set(client, { count: 1, sinceMs: this.now() });
    else entry.count++;
  }

  private current(client: string): { count: number; sinceMs: number } | undefined {
    const entry = this.failures.get(client);
    if (entry !== undefined && this.now() - entry.sinceMs >= ADMIN_FAILURE_WINDOW_MS) {
      this.failures.delete(client);
      return undefined;
    }
    return entry;
  }
}
