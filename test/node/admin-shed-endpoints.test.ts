// A shed budget split over sub-keys that live on different databases (the real Worker in Miniflare over
// three redis-servers, each behind its own REST server): the admin keys routes find every sub-key on the
// database rendezvous hashing puts it on, count all of them, and a reset frees them all.
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import { startWorkerOverDatabases, type WorkerOverDatabases } from "./worker-over-databases";

const PREFIX = `shed-endpoints${Date.now()}`;
const ADMIN = "shed-endpoints-admin";
/** 8 in flight per tenant over 4 sub-keys of 2. */
const RULE = {
  name: "origin",
  key: "header:x-tenant",
  algorithm: "shed",
  limit: 8,
  shards: 4,
  priority: "header:x-priority",
  priorities: { critical: 1 },
};

let stack: WorkerOverDatabases;
let direct: IORedis[];

beforeAll(async () => {
  stack = await startWorkerOverDatabases(3, {
    RATE_LIMIT_RULES: JSON.stringify([RULE]),
    RATE_LIMIT_PREFIX: PREFIX,
    RATE_LIMIT_TIMEOUT_MS: "5000",
    RATE_LIMIT_ADMIN_TOKEN: ADMIN,
  });
  ({ direct } = stack);
}, 60_000);

afterAll(() => stack?.close());

const admin = (path: string, method = "GET") =>
  stack.worker.fetch(`/__floodgate/keys/origin/${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}` },
  });

/** The hashes of a tenant's sub-keys and the database each belongs on, by the Worker's own rule. */
async function subKeysOf(tenant: string) {
  const hashes = await Promise.all([0, 1, 2, 3].map((n) => hashIdentity(`${tenant}#${n}`)));
  return hashes.map((hash) => ({ hash, database: stack.databaseOfHash(hash) }));
}

describe("a shed budget over three databases", () => {
  it("counts and resets the sub-keys of one budget on every database they live on", async () => {
    // A tenant whose four sub-keys are not all on one database.
    let tenant = "t0";
    for (let i = 1; new Set((await subKeysOf(tenant)).map((k) => k.database)).size < 2; i++) tenant = `t${i}`;
    const subKeys = await subKeysOf(tenant);

    // 60 slow requests at once: each sub-key gets more than its 2 slots, so 8 are held 4 s and 52 are shed
    // at once. Once those have answered, every request has been decided.
    let answered = 0;
    const pending = Array.from({ length: 60 }, async () => {
      const response = await stack.worker.fetch("/slow?ms=4000", {
        headers: { "x-tenant": tenant, "x-priority": "critical" },
      });
      await response.text();
      answered++;
      return response.status;
    });
    for (let waited = 0; answered < 52 && waited < 3000; waited += 50) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(answered).toBe(52);
    for (const { hash, database } of subKeys) {
      const holders = await Promise.all(direct.map((redis) => redis.zcard(stateKey(PREFIX, "origin", hash))));
      expect(holders).toEqual([0, 1, 2].map((i) => (i === database ? 2 : 0)));
    }

    const full = (await (await admin(tenant)).json()) as {
      allowed: boolean;
      in_flight: number;
      sub_keys: { identity: string; in_flight: number }[];
    };
    expect(full).toMatchObject({ allowed: false, limit: 8, in_flight: 8, remaining: 0 });
    expect(full.sub_keys).toEqual(
      subKeys.map(({ hash }) => ({ identity: `hash:${hash}`, limit: 2, in_flight: 2 })),
    );

    const reset = await admin(tenant, "DELETE");
    expect(await reset.json()).toMatchObject({ identity: `hash:${await hashIdentity(tenant)}`, reset: true });
    for (const { hash } of subKeys) {
      const left = await Promise.all(direct.map((redis) => redis.exists(stateKey(PREFIX, "origin", hash))));
      expect(left).toEqual([0, 0, 0]);
    }
    expect(await (await admin(tenant)).json()).toMatchObject({ allowed: true, in_flight: 0, remaining: 8 });
    expect((await Promise.all(pending)).filter((status) => status === 200)).toHaveLength(8);
  }, 30_000);
});
