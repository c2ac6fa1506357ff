/**
 * One request's facts: its URL, canonical path, client IP, id and verified JWT, each read from the request at
 * most once and fixed from then on. How a rule turns them into an identity is src/identity/resolve.ts.
 */
import type { JWTPayload } from "jose";
import type { KeyPart } from "../config";
import type { WaitUntil } from "../engine/types";
import { methodOverrides } from "../rules/method";
import { canonicalPath } from "../rules/path";
import type { CfFacts } from "../rules/match";
import { type AddressBits, addressBits } from "../util/address";
import { ProblemError } from "../util/problem";
import { cfFact, cfOf } from "./cf";
import { cookieValue } from "./cookie";
import { canonicalIp, clientIpFrom, ipPrefix64, UNKNOWN_IP } from "./ip";
import { bearerToken, claimValue, JwksUnavailableError, type JwtVerifier } from "./jwt";

/** What identity resolution needs besides the request; built once per isolate or middleware. */
export interface IdentityOptions {
  /**
   * The one header trusted for the client IP; absent = none (the middleware off Cloudflare): the IP is the
   * connection's address, from the request's `connectionAddress`.
   */
  clientIpHeader?: string | undefined;
  /** Verifies bearer tokens for `jwt:` parts (absent = such parts are always missing). */
  verifyJwt?: JwtVerifier | undefined;
  /** Called the first time a request arrives without the trusted IP header (log once per isolate). */
  onUnknownIp?: (() => void) | undefined;
}

/**
 * One request's facts: its parsed URL, canonical path, client IP, id and verified JWT. Nothing here can be
 * set from outside: each fact is computed at most once per request, when something first reads it, and
 * never changes after. The limiter puts them on `c.var` once (`floodgateRequest`, `FloodgateVariables` in
 * src/middleware/options.ts) so later steps (the Worker's proxy, a log line) read the same values.
 */
export class RequestFacts {
  private payload?: Promise<JWTPayload | undefined>;
  private ip?: string | null;
  private uuid?: string;
  private canonical?: string;
  private overrides?: readonly string[];
  private uncheckable?: JwksUnavailableError;
  private address?: AddressBits | null;
  readonly url: URL;

  /**
   * @param waitUntil the request's, for work that may outlive it (a JWKS fetch it stopped waiting for)
   * @param connectionAddress the address of the connection the request came on, read when no header is
   *   trusted (`IdentityOptions.clientIpHeader` absent)
   */
  constructor(
    readonly request: Request,
    private readonly options: IdentityOptions,
    private readonly waitUntil?: WaitUntil,
    private readonly connectionAddress?: () => string | undefined,
  ) {
    this.url = parseUrl(request.url);
  }

  /**
   * Why the request's token could not be checked, once `jwtPayload()` found the JWKS unreachable: its `jwt:`
   * parts are then missing through no fault of the client (docs/failure-modes.md). `undefined` otherwise.
   */
  get jwksUnavailable(): JwksUnavailableError | undefined {
    return this.uncheckable;
  }

  /** The path in the form rules and the admin prefix are tested in (src/rules/path.ts). */
  get path(): string {
    if (this.canonical === undefined) this.canonical = canonicalPath(this.url.pathname);
    return this.canonical;
  }

  /** The methods the request tunnels through a header or `_method` (src/rules/method.ts): read once, when a rule asks. */
  get methodOverrides(): readonly string[] {
    this.overrides ??= methodOverrides(this.request.headers, this.url);
    return this.overrides;
  }

  /** The canonical client IP, or `unknown` (one shared bucket) when the trusted header (or address) is absent. */
  clientIp(): string {
    const ip = this.trustedIp();
    if (ip === undefined) this.options.onUnknownIp?.();
    return ip ?? UNKNOWN_IP;
  }

  /**
   * The canonical IP from the trusted header (its trimmed text when that is not an IP), or without one the
   * connection's address; `undefined` when there is neither.
   */
  trustedIp(): string | undefined {
    if (this.ip === undefined) {
      const header = this.options.clientIpHeader;
      const ip = header === undefined ? this.addressIp() : clientIpFrom(this.request.headers, header);
      this.ip = ip ?? null;
    }
    return this.ip ?? undefined;
  }

  /** The trusted client IP as bits (`match.ip`, live lists: docs/lists.md), parsed once; `undefined` when there is none. */
  clientAddress(): AddressBits | undefined {
    if (this.address === undefined) {
      const ip = this.trustedIp();
      this.address = (ip === undefined ? undefined : addressBits(ip)) ?? null;
    }
    return this.address ?? undefined;
  }

  /** What Cloudflare knows of the request (`request.cf`: country, ASN, …); `undefined` off Cloudflare. */
  get cf(): CfFacts | undefined {
    return cfOf(this.request);
  }

  /** The `User-Agent` header, or `undefined` without one. */
  get userAgent(): string | undefined {
    return this.request.headers.get("user-agent") ?? undefined;
  }

  /** The connection's address, canonical (`::ffff:127.0.0.1` from Node is the IPv4 client it carries). */
  private addressIp(): string | undefined {
    const address = this.connectionAddress?.();
    return address === undefined ? undefined : canonicalIp(address);
  }

  /**
   * The request's id (a concurrency slot's member, a log line's `request_id`): a random UUID made on first
   * use, per request (Workers forbid randomness at module scope).
   */
  id(): string {
    this.uuid ??= crypto.randomUUID();
    return this.uuid;
  }

  /** The value of one key part, or `undefined` when the request has none. */
  async part(part: KeyPart): Promise<string | undefined> {
    if (part.kind !== "jwt") return this.plainPart(part);
    const payload = await this.jwtPayload();
    return payload === undefined ? undefined : claimValue(payload, part.claim);
  }

  /** The value of a part read straight from the request (every kind but `jwt`, which needs verifying). */
  plainPart(part: Exclude<KeyPart, { kind: "jwt" }>): string | undefined {
    switch (part.kind) {
      case "ip":
        return this.clientIp();
      case "ip64":
        return ipPrefix64(this.clientIp());
      case "global":
        return "global";
      case "header":
        return nonEmpty(this.request.headers.get(part.name));
      case "query": {
        // Given twice, it is no one identity: origins read the first (most) or the last (PHP, Rails).
        const values = this.url.searchParams.getAll(part.name);
        return values.length === 1 ? nonEmpty(values[0] ?? null) : undefined;
      }
      case "cf":
        return cfFact(this.request, part.field);
      case "cookie":
        return cookieValue(this.request.headers, part.name);
    }
  }

  /** The verified payload of the bearer token, or `undefined` (none, invalid, or uncheckable: see `jwksUnavailable`). */
  jwtPayload(): Promise<JWTPayload | undefined> {
    if (this.payload === undefined) {
      const token = bearerToken(this.request.headers);
      const verify = this.options.verifyJwt;
      this.payload =
        token === undefined || verify === undefined
          ? Promise.resolve(undefined)
          : verify(token, this.waitUntil).catch((error: unknown) => {
              if (!(error instanceof JwksUnavailableError)) throw error;
              this.uncheckable = error;
              return undefined;
            });
    }
    return this.payload;
  }
}

/**
 * A value trimmed, or `undefined` when nothing is left. Header values arrive trimmed (fetch strips their
 * whitespace); a query value is trimmed here alike, so `?key=Q1%20` is not a bucket apart from `?key=Q1`.
 */
const nonEmpty = (value: string | null): string | undefined => {
  const trimmed = value?.trim();
  return trimmed === "" ? undefined : trimmed;
};

/** 400: a request URL the runtime passed on unparseable (`Host: a b` through `workerd serve`). */
export class UnparseableUrlError extends ProblemError {
  override readonly name = "UnparseableUrlError";
  constructor() {
    super(400, "about:blank", "Bad Request", "The request's URL or Host cannot be parsed.");
  }
}

/** The request's URL; one that cannot be parsed is the client's 400. */
function parseUrl(url: string): URL {
  try {
    return new URL(url);
  } catch {
    throw new UnparseableUrlError();
  }
}
