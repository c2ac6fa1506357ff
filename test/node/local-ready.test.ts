// `npm start`'s readiness check (local/ready.mjs): a Worker serving the 500 of an invalid configuration is
// reported at once with its detail, rather than after the 90 s a Worker that never answers gets.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, expect, it } from "vitest";
import { waitUntilServing } from "../../local/ready.mjs";

let server: Server | undefined;
afterEach(() => new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined))));

/** A server answering every request with `status` and `body`; its base URL. */
async function answering(status: number, body: unknown): Promise<string> {
  server = createServer((_req, res) => {
    res.writeHead(status, { "content-type": "application/problem+json" });
    res.end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

it("stops at once on the Worker's invalid-configuration 500, naming the field", async () => {
  const detail = 'Invalid configuration: RATE_LIMIT_RULES[0].limit: expected a whole number, got "ten"';
  const url = await answering(500, { status: 500, title: "Internal Server Error", detail });
  const startedAt = Date.now();
  await expect(waitUntilServing(url, 30_000, () => false)).rejects.toThrow(detail);
  expect(Date.now() - startedAt).toBeLessThan(10_000);
});

it("keeps waiting through another 500 (a Worker still starting), until its own deadline", async () => {
  const url = await answering(500, { detail: "An unexpected error occurred." });
  await expect(waitUntilServing(url, 1_000, () => false)).rejects.toThrow(/did not answer within 1 s/);
});
