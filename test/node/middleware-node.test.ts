// The Hono middleware in a Node app, where a request has no execution context: a hot identity is still
// decided from leases, renewed and returned in the background, and the count in Redis is exactly what was
// admitted once the leases are back.
import { Hono } from "hono";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import { rateLimit } from "../../src/middleware";
import { awayFromWindowEdge } from "../support/window-edge";

let redis: Awaited<ReturnType<typeof startRedis>>;
let rest: Awaited<ReturnType<typeof startRestServer>>;
let direct: IORedis;

beforeAll(async () => {
  redis = await startRedis();
  rest = await startRestServer({ redisUrl: redis.url });
  direct = new IORedis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  direct.on("error", () => {});
});

afterAll(async () => {
  direct?.disconnect();
  await rest?.close();
  await redis?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const LEASE_MS = 300;

it("decides a hot identity from leases off Workers, and gives back what a lease did not spend", async () => {
  const prefix = `mwnode${Date.now()}`;
  const app = new Hono();
  app.use(
    "*",
    rateLimit({
      redis: { url: rest.url, token: rest.token },
      prefix,
      leaseMs: LEASE_MS,
      rules: [
        { name: "api", key: "header:x-client", algorithm: "fixed-window", limit: 10_000, period: "1h" },
      ],
    }),
  );
  app.get("*", (c) => c.text("ok"));
  const send = async (client: string) => {
    const response = await app.request("/hello", { headers: { "x-client": client } });
    await response.arrayBuffer();
    return { status: response.status, timing: response.headers.get("Server-Timing") ?? "" };
  };

  await awayFromWindowEdge(3_600_000, 10_000); // the returns below must land in the same hour
  let admitted = 0;
  let local = 0;
  for (let i = 0; i < 300; i++) {
    const { status, timing } = await send("hot");
    if (status === 200) admitted++;
    if (timing.includes('desc="lease"')) local++;
  }
  expect(admitted).toBe(300);
  expect(local).toBeGreaterThan(admitted / 2);

  // Every lease expires; the next request (anyone's) sends back what is left, in the background.
  await sleep(LEASE_MS + 200);
  expect((await send("someone-else")).status).toBe(200);
  const key = stateKey(prefix, "api", await hashIdentity("hot"));
  let counted = Number(await direct.get(key));
  for (let i = 0; i < 20 && counted !== admitted; i++) {
    await sleep(50);
    counted = Number(await direct.get(key));
  }
  expect(counted).toBe(admitted);
});
