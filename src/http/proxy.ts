/**
 * Forwards an allowed request to `ORIGIN_URL` and streams the answer back (docs/configuration.md, "Responses").
 * - Only ever `ORIGIN_URL`: the target is built from the origin's scheme/host/port/base path plus the
 *   request's path and query; the client's `Host`, an absolute-form request URL or `//host` paths cannot
 *   change where it goes (no open proxy).
 * - Bodies stream both ways (never buffered); hop-by-hop headers are dropped; redirects are passed back.
 * - `Upgrade: websocket` passes through (the one case where `Upgrade`/`Connection` are kept).
 * - No response headers within `timeoutMs` → 504; a network failure, or a status outside 200–599 → 502.
 * Hand-rolled rather than `hono/proxy` because that helper drops `Upgrade` (no WebSockets) and follows redirects.
 */
import { deadlineAfter, type RunningTimer } from "../util/timer";
import { OriginInvalidStatusError, OriginTimeoutError, OriginUnreachableError } from "./problems";

/** RFC 9110 §7.6.1 hop-by-hop fields, plus the non-standard ones proxies commonly see. */
const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

/** Where and how to proxy. */
export interface ProxyOptions {
  /** Scheme + host [+ port] [+ base path]. */
  originUrl: URL;
  /** Wait at most this long for the origin's response headers, ms. */
  timeoutMs: number;
  /**
   * Request headers the limiter counted by (lower-case): sent on as the one value it read. A client that
   * sends one twice was counted by both values joined; an origin reading only the first line would
   * otherwise see an identity that was never counted.
   */
  counted?: readonly string[];
}

/**
 * Forwards one request, given its already parsed `url` and the client IP from the trusted header
 * (sets `X-Forwarded-For`; `undefined` = not known). `timer`: one already running for this request (the
 * decision budget's); the origin timeout is then armed only once it fires (src/util/timer.ts). Throws
 * `OriginTimeoutError` (504) or `OriginUnreachableError` (502).
 */
export type OriginProxy = (
  request: Request,
  url: URL,
  clientIp: string | undefined,
  timer?: RunningTimer,
) => Promise<Response>;

/** The proxy to one origin; what does not depend on the request is computed here, once. */
export function createProxy({ originUrl, timeoutMs, counted = [] }: ProxyOptions): OriginProxy {
  // Scheme, host, port and base path: a parsed request path always starts with `/`, so appending it can
  // only extend the origin's path, never change its host.
  const base = `${originUrl.origin}${originUrl.pathname.replace(/\/+$/, "")}`;
  return (request, url, clientIp, timer) =>
    forward(request, url, `${base}${url.pathname}${url.search}`, timeoutMs, clientIp, counted, timer);
}

/** The same, for a WebSocket handshake: `Upgrade` and `Connection` are what it rides on. */
const HOP_BY_HOP_BUT_UPGRADE = HOP_BY_HOP.filter((name) => name !== "upgrade" && name !== "connection");

function dropHopByHop(headers: Headers, keepUpgrade: boolean): void {
  // Fields named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
  const connection = headers.get("connection");
  if (connection !== null) {
    for (const name of connection.split(",")) {
      const field = name.trim().toLowerCase();
      if (field && !(keepUpgrade && field === "upgrade")) headers.delete(field);
    }
  }
  for (const name of keepUpgrade ? HOP_BY_HOP_BUT_UPGRADE : HOP_BY_HOP) headers.delete(name);
}

async function forward(
  request: Request,
  url: URL,
  target: string,
  timeoutMs: number,
  clientIp: string | undefined,
  counted: readonly string[],
  running: RunningTimer | undefined,
): Promise<Response> {
  const websocket = request.headers.get("upgrade")?.toLowerCase() === "websocket";

  const headers = new Headers(request.headers);
  dropHopByHop(headers, websocket);
  headers.delete("host"); // fetch sets Host from the target URL: the origin's host
  for (const name of counted) {
    const value = headers.get(name); // several lines read as one, joined by ", "
    if (value?.includes(",")) headers.set(name, value);
  }
  if (clientIp !== undefined) headers.set("X-Forwarded-For", clientIp);
  else headers.delete("X-Forwarded-For"); // a client-supplied chain is never passed on as if we vouched for it
  headers.set("X-Forwarded-Proto", url.protocol.slice(0, -1)); // "https:" → "https"
  headers.set("X-Forwarded-Host", url.host);

  const init: RequestInit = {
    method: request.method,
    headers,
    body: request.method === "GET" || request.method === "HEAD" ? null : request.body,
    redirect: "manual",
  };
  // Only the wait for headers is bounded; the body then streams for as long as it takes. A late answer is
  // dropped rather than aborted: an abort signal on the fetch costs a few % of a request's CPU, and
  // workerd cancels the abandoned subrequest as soon as the 504 has ended the request.
  const response = await new Promise<Response>((resolve, reject) => {
    const cancel = deadlineAfter(timeoutMs, () => reject(new OriginTimeoutError(timeoutMs)), running);
    fetch(target, init).then(
      (answer) => {
        cancel();
        resolve(answer);
      },
      () => {
        cancel();
        reject(new OriginUnreachableError());
      },
    );
  });

  if (response.status === 101) return response; // the WebSocket itself rides on this response
  if (response.status < 200 || response.status > 599) {
    response.body?.cancel().catch(() => undefined); // nothing will read it
    throw new OriginInvalidStatusError(response.status);
  }
  const out = new Response(response.body, response);
  dropHopByHop(out.headers, false);
  return out;
}
