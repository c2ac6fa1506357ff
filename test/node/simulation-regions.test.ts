// Model-based simulation of regional databases (docs/regions.md, docs/exactness.md "Regional pools"): a primary and
// three regional redis-servers of this file's own (each behind its own REST server and simulated network),
// isolates pinned to the regions through the real RegionalDecider, random requests, admin changes, faults, a
// region's database killed and restarted, the primary frozen; what the clients were let through is checked
// against the reference model. The fast profile runs here; `npm run simulate -- --regions --minutes N` runs the
// same property for N minutes (SIM_MINUTES), and SIM_SEED / SIM_PATH replay a reported failure.
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type RestServer, startRedisServers, startRestServer } from "../../redis-rest/index.mjs";
import { startNetwork } from "../sim/network";
import type { Database, RegionsSetup } from "../sim/regions-types";
import { type RegionStats, simulateRegions } from "../sim/regions-profile";
import { FAST, LONG, NAMED } from "../sim/regions-scenarios";

const TOKEN = "simulation-regions-token";
const minutes = Number(process.env.SIM_MINUTES ?? 0);
const seed = process.env.SIM_SEED === undefined ? undefined : Number(process.env.SIM_SEED);
const path = process.env.SIM_PATH;
/** `SIM_SCENARIO=<name>[,<name>…]`: these named scenarios (test/sim/regions-scenarios.ts), 3 times each, alone. */
const named = process.env.SIM_SCENARIO?.split(",").map((name) => {
  const scenario = NAMED[name];
  if (!scenario) throw new Error(`SIM_SCENARIO: no scenario "${name}" (${Object.keys(NAMED).join(", ")})`);
  return scenario;
});
/** Lanes side by side, each with databases of its own (a lane kills and freezes its own). */
const lanes = seed !== undefined ? 1 : Number(process.env.SIM_LANES ?? (minutes > 0 ? 3 : 1));

const setups: RegionsSetup[] = [];
const closers: (() => Promise<unknown>)[] = [];

/** A primary and three regions, each a redis-server, a REST server, a simulated network and a direct client. */
async function startSetup(): Promise<RegionsSetup> {
  const servers = await startRedisServers(4);
  closers.push(() => Promise.all(servers.map((s) => s.close())));
  const databases: Database[] = [];
  for (const server of servers) {
    const rest: RestServer = await startRestServer({ redisUrl: server.url, token: TOKEN });
    const network = await startNetwork(rest.url);
    const redis = new IORedis(server.url, { maxRetriesPerRequest: 0, lazyConnect: true });
    redis.on("error", () => undefined); // a run kills and freezes its servers
    closers.unshift(async () => {
      redis.disconnect();
      await network.close();
      await rest.close();
    });
    databases.push({ server, network, redis });
  }
  const [primary, ...regions] = databases as [Database, ...Database[]];
  return { primary, regions, token: TOKEN };
}

beforeAll(async () => {
  for (let i = 0; i < lanes; i++) setups.push(await startSetup());
}, 60_000);

afterAll(async () => {
  for (const close of closers) await close().catch(() => undefined);
});

it(
  minutes > 0
    ? `keeps every region within the limit for ${minutes} minute(s) of random scenarios`
    : "keeps every region within the limit over random scenarios (fast profile)",
  async () => {
    const untilMs = minutes > 0 ? Date.now() + minutes * 60_000 : undefined;
    const all = await Promise.allSettled(
      setups.map((setup, lane) =>
        simulateRegions(setup, minutes > 0 ? LONG : FAST, {
          numRuns: named ? 0 : Number(process.env.SIM_RUNS ?? (minutes > 0 ? 1_000_000 : 3)),
          ...(named && { scenarios: named.flatMap((n) => [n, n, n]) }),
          shrinkMs: minutes > 0 ? 600_000 : 60_000,
          corpus: lane === 0 && process.env.SIM_CORPUS !== "0",
          lane: String(lane),
          ...(untilMs !== undefined && { untilMs }),
          ...(seed !== undefined && { seed }),
          ...(path !== undefined && { path }),
        }),
      ),
    );
    const failed = all.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed) throw failed.reason;
    const stats = all.map((s) => (s as PromiseFulfilledResult<RegionStats>).value);
    const sum = (f: (s: RegionStats) => number) => stats.reduce((n, s) => n + f(s), 0);
    const elapsedMs = Math.max(...stats.map((s) => s.elapsedMs));
    console.log(
      `simulation (regions): ${sum((s) => s.runs)} runs, ${sum((s) => s.operations)} operations ` +
        `(${sum((s) => s.admitted)} admitted, ${sum((s) => s.fromPools)} from regional pools; ` +
        `${sum((s) => s.changes)} admin changes, ${sum((s) => s.unchecked)} of them left unchecked after; ` +
        `${sum((s) => s.restarts)} regional databases restarted, the primary frozen ${sum((s) => s.freezes)} times) ` +
        `in ${(elapsedMs / 1000).toFixed(1)} s: ` +
        `${((sum((s) => s.operations) / elapsedMs) * 1000).toFixed(0)} operations/s, 0 violations`,
    );
    expect(sum((s) => s.runs)).toBeGreaterThan(0);
  },
  (minutes > 0 ? minutes * 60_000 + 900_000 : 30_000 + 60_000) + 60_000,
);
