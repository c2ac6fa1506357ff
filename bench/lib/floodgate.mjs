/**
 * Floodgate itself (src/worker.ts) under `workerd serve`, configured through its bindings exactly as a
 * deployment would be (README: "Configuration"), with a check that it really proxies before it is measured.
 */
import { startWorker } from "./workerd.mjs";

/** The one identity header Floodgate trusts by default (README: "Configuration"). */
export const IP_HEADER = "CF-Connecting-IP";

/**
 * Starts Floodgate with `rules` in front of `origin`, deciding through `rest`. `prefix` isolates its Redis
 * keys from every other target's; `entry` is another checkout's Worker (a baseline revision); `v8`: V8
 * flags and where their output goes (`startWorker`).
 */
export function startFloodgate(
  name,
  { rest, origin, rules, prefix, bindings = {}, extraArgs = [], entry = "src/worker.ts", v8 },
) {
  return startWorker(
    name,
    entry,
    {
      ORIGIN_URL: origin.url,
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: rest.token,
      RATE_LIMIT_RULES: rules,
      RATE_LIMIT_PREFIX: prefix,
      ...bindings,
    },
    extraArgs,
    v8,
  );
}

/**
 * Resolves to `null` when one request through `worker` reaches the origin (200, body `ok`), otherwise
 * to why not: Floodgate is being written while this harness is, so a target may not proxy yet.
 */
export async function whyNotProxying(worker, headers) {
  try {
    const response = await fetch(`${worker.url}/bench/probe`, {
      headers,
      signal: AbortSignal.timeout(5_000),
    });
    const body = await response.text();
    if (response.status === 200 && body === "ok") return null;
    return `answered ${response.status}: ${body.slice(0, 160).replace(/\s+/g, " ")}`;
  } catch (error) {
    return `request failed: ${error.message}`;
  }
}

/** Starts Floodgate and checks it proxies; on failure stops it and returns `{ skipped: reason }`. */
export async function startProxyingFloodgate(name, options, headers) {
  let worker;
  try {
    worker = await startFloodgate(name, options);
  } catch (error) {
    return { skipped: `did not start: ${error.message.split("\n").slice(0, 3).join(" ")}` };
  }
  const reason = await whyNotProxying(worker, headers);
  if (reason === null) return { worker };
  await worker.stop();
  return { skipped: reason };
}
