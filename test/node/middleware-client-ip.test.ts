// The middleware off Cloudflare: no header is trusted for the client IP by default (a client sets any header it
// likes, `CF-Connecting-IP` included); an `ip` key is the connection's address as the runtime's Hono adapter
// hands it over (@hono/node-server's `env.incoming`, Bun's `requestIP`, Deno's `remoteAddr`) or as a
// `getConnInfo` option reads it. Real Node HTTP server, real Redis behind the local REST server.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import { describe, expect, inject, it, vi } from "vitest";
import { type RateLimitOptions, rateLimit } from "../../src/middleware";

// The run's redis-server behind the local REST server (test/global-setup.ts); a unique key prefix per app.
const rest = { url: inject("redisRestUrl"), token: inject("redisRestToken") };

const perIp = (extra: Partial<RateLimitOptions> = {}): RateLimitOptions => ({
  redis: { url: rest.url, token: rest.token },
  prefix: `cip${crypto.randomUUID().slice(0, 8)}`,
  leases: "off",
  // A loaded machine can take longer than the 200 ms default: a decision that times out fails open, which this
  // test is not about.
  timeoutMs: 5000,
  rules: [{ name: "per-ip", key: "ip", algorithm: "sliding-log", limit: 2, period: "1h" }],
  ...extra,
});

/** The app served the way @hono/node-server serves it: the Node request and response as `c.env`. */
async function serveAsNodeServer(app: Hono): Promise<{ url: string; server: Server }> {
  const server = createServer((incoming: IncomingMessage, outgoing: ServerResponse) => {
    const headers = new Headers();
    for (const [name, value] of Object.entries(incoming.headers))
      if (typeof value === "string") headers.set(name, value);
    const request = new Request(`http://${incoming.headers.host}${incoming.url}`, { headers });
    Promise.resolve(app.fetch(request, { incoming, outgoing }))
      .then(async (response) => {
        outgoing.writeHead(response.status, Object.fromEntries(response.headers));
        outgoing.end(await response.text());
      })
      .catch(() => outgoing.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

const statusesOf = async (
  send: (i: number) => Response | Promise<Response>,
  count: number,
): Promise<number[]> => {
  const statuses: number[] = [];
  for (let i = 0; i < count; i++) {
    const response = await send(i);
    await response.arrayBuffer();
    statuses.push(response.status);
  }
  return statuses;
};

describe("the middleware on Node", () => {
  it("keys `ip` on the connection, not on a CF-Connecting-IP the client made up", async () => {
    const app = new Hono();
    app.use("*", rateLimit(perIp()));
    app.get("*", (c) => c.text("ok"));
    const { url, server } = await serveAsNodeServer(app);
    try {
      const statuses = await statusesOf(
        (i) => fetch(`${url}/x`, { headers: { "CF-Connecting-IP": `203.0.113.${i + 1}` } }),
        6,
      );
      expect(statuses).toEqual([200, 200, 429, 429, 429, 429]);
    } finally {
      server.close();
    }
  });

  it("trusts a header only when told to (clientIpHeader), as behind a proxy that sets it", async () => {
    const app = new Hono();
    app.use("*", rateLimit(perIp({ clientIpHeader: "X-Real-IP" })));
    app.get("*", (c) => c.text("ok"));
    const { url, server } = await serveAsNodeServer(app);
    try {
      const statuses = await statusesOf(
        (i) => fetch(`${url}/x`, { headers: { "X-Real-IP": `203.0.113.${i + 1}` } }),
        3,
      );
      expect(statuses).toEqual([200, 200, 200]);
    } finally {
      server.close();
    }
  });

  it("reads the address with a given getConnInfo (hono/bun, hono/deno, …)", async () => {
    const app = new Hono();
    let address = "198.51.100.1";
    app.use("*", rateLimit(perIp({ getConnInfo: () => ({ remote: { address } }) })));
    app.get("*", (c) => c.text("ok"));
    const send = () => app.request("/x", { headers: { "CF-Connecting-IP": "203.0.113.9" } });
    expect(await statusesOf(send, 3)).toEqual([200, 200, 429]);
    address = "198.51.100.2";
    expect(await statusesOf(send, 1)).toEqual([200]);
  });

  it("says once in the log when an `ip` rule has no address to read, and counts those requests together", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const app = new Hono();
      app.use("*", rateLimit(perIp()));
      app.get("*", (c) => c.text("ok"));
      // `app.request` has no connection: nothing tells who the client is.
      const send = (i: number) =>
        app.request("/x", { headers: { "CF-Connecting-IP": `203.0.113.${i + 1}` } });
      expect(await statusesOf(send, 4)).toEqual([200, 200, 429, 429]);
      const lines = warn.mock.calls
        .map((call) => String(call[0]))
        .filter((line) => line.includes("getConnInfo"));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/no connection address/);
    } finally {
      warn.mockRestore();
    }
  });
});
