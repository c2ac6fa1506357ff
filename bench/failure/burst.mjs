/**
 * How far an attacker can push fail-open (docs/fail-open.md): one identity sends a burst of requests, all at
 * once, spread over two Worker instances (each its own workerd, bundled as for deploy) in front of one
 * redis-server through the local REST server, at the DEFAULT decision budget (200 ms) unless `--timeout-ms`.
 * Per rate algorithm: requests the origin received against the limit; for a concurrency rule: the most at
 * the origin at once against its slots. Each case starts two fresh instances (a fresh isolate: no lease,
 * breaker closed, nothing cached).
 *
 *   node bench/failure/burst.mjs [--rounds 3] [--n 200] [--limit 50] [--slots 5] [--timeout-ms 200]
 *
 * Prints a markdown table (median, min–max over the rounds); writes bench/results/failure-burst.md and .json.
 * Not part of `npm test` (test/node/failopen-burst.test.ts asserts the bound).
 */
import { parseArgs } from "node:util";
import { burstRules, RATE_ALGORITHMS, sendBurst, startBurstStack } from "../../test/support/burst.mjs";
import { machine, median, table, writeResults } from "../lib/report.mjs";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    n: { type: "string", default: "200" },
    limit: { type: "string", default: "50" },
    slots: { type: "string", default: "5" },
    "timeout-ms": { type: "string" },
  },
});
const rounds = Number(values.rounds);
const n = Number(values.n);
const limit = Number(values.limit);
const slots = Number(values.slots);
const timeout = values["timeout-ms"];

const stack = await startBurstStack();
let ipSeq = 0;
/** @type {Record<string, number[]>} */
const seen = {};
try {
  for (let round = 0; round < rounds; round++) {
    for (const name of [...RATE_ALGORITHMS, "concurrency"]) {
      const workers = await stack.start(
        {
          RATE_LIMIT_RULES: burstRules({ limit, slots }),
          RATE_LIMIT_PREFIX: `burst${Date.now()}`,
          ...(timeout === undefined ? {} : { RATE_LIMIT_TIMEOUT_MS: timeout }),
        },
        2,
      );
      const ip = `198.18.${Math.floor(++ipSeq / 250)}.${(ipSeq % 250) + 1}`;
      const path = name === "concurrency" ? "/slow?ms=500" : `/${name}/x`;
      const result = await sendBurst(workers, stack.originUrl, { path, ip, n });
      const value = name === "concurrency" ? result.inFlight : result.admitted;
      seen[name] = [...(seen[name] ?? []), value];
      console.error(`round ${round + 1} ${name}: ${value} ${JSON.stringify(result.statuses)}`);
      await Promise.all(workers.map((w) => w.dispose()));
    }
  }
} finally {
  await stack.close();
}

const rows = Object.entries(seen).map(([name, values]) => [
  name,
  name === "concurrency" ? `${slots} in flight` : `${limit}`,
  String(median(values)),
  `${Math.min(...values)}–${Math.max(...values)}`,
  values.join(", "),
]);
const md = table(["rule", "limit", "median", "min–max", "each round"], rows);
const title = `Burst of ${n} (one identity, two instances), budget ${timeout ?? "200 (default)"} ms`;
console.log(`\n${title}\n\n${md}`);
writeResults("failure-burst", `${title}\n\n${machineOrNone()}\n\n${md}`, {
  title,
  n,
  limit,
  slots,
  timeout,
  seen,
});

/** The machine's description, or none where a tool it names (wrk) is missing. */
function machineOrNone() {
  try {
    return machine();
  } catch {
    return "";
  }
}
