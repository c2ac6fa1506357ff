#!/usr/bin/env node
/**
 * Where a target's workerd CPU goes: runs one overhead target under `workerd serve --inspector-addr`,
 * loads it with wrk while the V8 sampling profiler runs, and prints the functions with the most self
 * time (by bundled module). A diagnostic, not part of `npm run bench`; the inspector itself adds overhead,
 * so read the shares, not the absolute times. With `--perf`, the whole process instead (`perf record` on
 * the software clock, which needs no hardware counters; JIT code named through V8's `--perf-basic-prof`):
 * workerd's own C++, V8's runtime and the kernel beside the Worker's JavaScript, in µs per request.
 *
 *   node bench/profile.mjs [c|d|b|b+|b'|e|c-cold|c-cold-off] [seconds] [--perf]     (TOP=n: rows per table)
 *
 * c-cold / c-cold-off: target (c) with a never-seen identity per request, leases on / off.
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDebianCommand } from "../scripts/debian-package.mjs";
import { IP_HEADER, startFloodgate } from "./lib/floodgate.mjs";
import { freePort, stopAll } from "./lib/procs.mjs";
import { COLD_SCRIPT } from "./overhead.mjs";
import { restCommand, startOrigin, startRedis, startRest } from "./lib/stack.mjs";
import { bundle, startWorker } from "./lib/workerd.mjs";
import { ensureWrk, runWrk } from "./lib/wrk.mjs";

const [target = "c", secondsArg = "4"] = process.argv.slice(2).filter((arg) => !arg.startsWith("--"));
const seconds = Number(secondsArg);
const wholeProcess = process.argv.includes("--perf");
/** Rows printed per table: `TOP` from the environment, else each table's own default. */
const top = (fallback) => Number(process.env.TOP ?? fallback);
const HEADERS = { [IP_HEADER]: "203.0.113.7", "x-api-key": "bench-key" };
const rule = (name, key, algorithm) => ({ name, key, algorithm, limit: 1_000_000, period: "60s" });

/** For the cold targets, wrk's script sending each request from a never-seen IP (bench/overhead.mjs); else none. */
function coldScript() {
  if (!target.startsWith("c-cold")) return undefined;
  const path = join(tmpdir(), `floodgate-profile-cold-${process.pid}.lua`);
  writeFileSync(path, COLD_SCRIPT);
  process.once("exit", () => rmSync(path, { force: true }));
  return path;
}

/** A minimal Chrome DevTools Protocol client over the inspector's WebSocket. */
async function connect(inspectorPort) {
  const list = await (await fetch(`http://127.0.0.1:${inspectorPort}/json/list`)).json();
  const socket = new WebSocket(list[0].webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = reject;
  });
  let id = 0;
  const waiting = new Map();
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.id && waiting.has(message.id)) {
      waiting.get(message.id)(message);
      waiting.delete(message.id);
    }
  };
  const send = (method, params = {}) =>
    new Promise((resolve) => {
      const messageId = ++id;
      waiting.set(messageId, resolve);
      socket.send(JSON.stringify({ id: messageId, method, params }));
    });
  return { send, close: () => socket.close() };
}

/**
 * The source module of each line of an esbuild bundle: esbuild (not minified) opens every module's code
 * with a `// <path>` comment.
 */
function moduleOfLine(bundlePath) {
  const starts = [];
  readFileSync(bundlePath, "utf8")
    .split("\n")
    .forEach((line, index) => {
      const match = /^\/\/ ((?:src|bench|node_modules)\/\S+)$/.exec(line);
      if (match) starts.push([index, match[1].replace(/^node_modules\/(@[^/]+\/[^/]+|[^/]+)\/.*/, "$1")]);
    });
  return (line) => {
    let found = "(bundle)";
    for (const [start, path] of starts) {
      if (start > line) break;
      found = path;
    }
    return found;
  };
}

/** Self time from a V8 CPU profile, in % of all samples, per function and per source module. */
function selfTimes(profile, moduleOf) {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
  /** Native work (fetch, Headers, crypto…) is charged to the nearest bundled caller's module. */
  const owner = (id) => {
    for (let at = id; at !== undefined; at = parentOf.get(at)) {
      const { url, lineNumber } = byId.get(at).callFrame;
      if (url.endsWith("worker.js")) return moduleOf(lineNumber);
    }
    return `(${byId.get(id).callFrame.functionName || "native"})`;
  };
  const functions = new Map();
  const modules = new Map();
  const add = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);
  for (const id of profile.samples) {
    const { functionName, url, lineNumber } = byId.get(id).callFrame;
    const module = url.endsWith("worker.js") ? moduleOf(lineNumber) : `(native ${functionName || "code"})`;
    add(functions, `${functionName || "(anonymous)"} [${module}]`);
    add(modules, owner(id));
  }
  // Inclusive: a sample counts once for every bundled function on its stack.
  const inclusive = new Map();
  for (const id of profile.samples) {
    const seen = new Set();
    for (let at = id; at !== undefined; at = parentOf.get(at)) {
      const { functionName, url, lineNumber } = byId.get(at).callFrame;
      if (!url.endsWith("worker.js")) continue;
      const key = `${functionName || "(anonymous)"} [${moduleOf(lineNumber)}]`;
      if (!seen.has(key)) {
        seen.add(key);
        add(inclusive, key);
      }
    }
  }
  const total = profile.samples.length;
  const sorted = (map) => [...map].sort((a, b) => b[1] - a[1]).map(([name, n]) => [name, (100 * n) / total]);
  return { functions: sorted(functions), modules: sorted(modules), inclusive: sorted(inclusive) };
}

/**
 * Samples all of `worker`'s threads while `wrk` loads it; prints the symbols costing the most, µs per
 * request (samples × the sampling interval ÷ the requests of the same stretch).
 */
async function perfProfile(worker) {
  const data = join(tmpdir(), `floodgate-perf-${process.pid}.data`);
  const hz = 4000;
  const args = ["record", "-q", "-e", "cpu-clock", "-F", String(hz), "-p", String(worker.pid), "-o", data];
  const recording = spawn("perf", [...args, "--", "sleep", String(seconds)], { stdio: "ignore" });
  const load = await runWrk(`${worker.url}/`, { durationS: seconds, headers: HEADERS, script: coldScript() });
  await once(recording, "exit");
  const report = execFileSync(
    "perf",
    ["report", "-i", data, "--no-children", "--sort", "dso,sym", "-g", "none", "-q", "-F", "sample,dso,sym"],
    { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] },
  );
  rmSync(data, { force: true });
  rmSync(`/tmp/perf-${worker.pid}.map`, { force: true }); // V8's names for JIT code
  const usPerSample = 1e6 / hz;
  const rows = [];
  for (const line of report.split("\n")) {
    const match = /^\s*(\d+)\s+(\S.*?)\s{2,}\[.\]\s+(.*)$/.exec(line);
    if (match) rows.push([Number(match[1]), match[2].trim(), match[3].trim()]);
  }
  const total = rows.reduce((sum, [samples]) => sum + samples, 0);
  console.log(
    `target ${target}: ${Math.round(load.rps)} req/s under perf, ${((total * usPerSample) / load.requests).toFixed(0)} µs sampled per request`,
  );
  console.log("µs per request by symbol (JIT = the Worker's JavaScript):");
  for (const [samples, dso, symbol] of rows.sort((a, b) => b[0] - a[0]).slice(0, top(40))) {
    const where = dso.startsWith("[JIT]") ? "JIT" : dso;
    console.log(
      `${((samples * usPerSample) / load.requests).toFixed(2).padStart(7)}  ${where.padEnd(16)} ${symbol.slice(0, 110)}`,
    );
  }
}

/** The V8 sampling profile of `worker` under load: self and total time by function and by source module. */
async function inspectorProfile(worker, inspectorPort) {
  const inspector = await connect(inspectorPort);
  await inspector.send("Profiler.enable");
  await inspector.send("Profiler.setSamplingInterval", { interval: 100 });
  await inspector.send("Profiler.start");
  const load = await runWrk(`${worker.url}/`, {
    durationS: seconds,
    headers: HEADERS,
    pids: { workerd: worker.pid },
    script: coldScript(),
  });
  const { result } = await inspector.send("Profiler.stop");
  inspector.close();
  console.log(
    `target ${target}: ${Math.round(load.rps)} req/s, ${Math.round(load.cpu.workerd.usPerRequest)} µs workerd CPU per request (inspector attached)`,
  );
  const entry = {
    c: "src/worker.ts",
    "c-cold": "src/worker.ts",
    "c-cold-off": "src/worker.ts",
    d: "src/worker.ts",
    b: "bench/workers/bare-proxy.mjs",
    "b+": "bench/workers/contract-proxy.mjs",
    "b'": "bench/workers/evalsha-proxy.mjs",
  }[target];
  const times = selfTimes(
    result.profile,
    moduleOfLine(await bundle(entry ?? "bench/workers/upstash-ratelimit.mjs")),
  );
  console.log("time by source module (native work charged to its bundled caller), % of samples:");
  for (const [name, percent] of times.modules.slice(0, top(25)))
    console.log(`${percent.toFixed(1).padStart(6)}  ${name}`);
  console.log("total time by bundled function (its callees included), % of samples:");
  for (const [name, percent] of times.inclusive.slice(0, top(25)))
    console.log(`${percent.toFixed(1).padStart(6)}  ${name}`);
  console.log("self time by function, % of samples:");
  for (const [name, percent] of times.functions.slice(0, top(25)))
    console.log(`${percent.toFixed(1).padStart(6)}  ${name}`);
}

try {
  ensureWrk();
  if (wholeProcess) ensureDebianCommand("perf", "linux-perf");
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  const origin = await startOrigin();
  const inspectorPort = await freePort();
  const extraArgs = wholeProcess ? [] : [`--inspector-addr=127.0.0.1:${inspectorPort}`];
  const v8 = wholeProcess ? { v8Flags: ["--perf-basic-prof"] } : undefined;
  const common = {
    ORIGIN_URL: origin.url,
    UPSTASH_REDIS_REST_URL: rest.url,
    UPSTASH_REDIS_REST_TOKEN: rest.token,
  };
  let worker;
  if (target === "c" || target === "d" || target.startsWith("c-cold")) {
    const rules =
      target !== "d"
        ? [rule("bench-ip", "ip", "sliding-window")]
        : [
            rule("bench-ip", "ip", "sliding-window"),
            rule("bench-key", "header:x-api-key", "token-bucket"),
            rule("bench-global", "global", "gcra"),
          ];
    // c-cold-off: a never-seen identity per request with RATE_LIMIT_LEASES=off (c-cold: leases on).
    const bindings = target === "c-cold-off" ? { RATE_LIMIT_LEASES: "off" } : {};
    worker = await startFloodgate("profile", {
      rest,
      origin,
      rules,
      prefix: "profile",
      extraArgs,
      v8,
      bindings,
    });
  } else if (target === "b'") {
    const script = readFileSync(new URL("workers/fixed-window.lua", import.meta.url), "utf8");
    const sha = await restCommand(rest, ["SCRIPT", "LOAD", script]);
    worker = await startWorker(
      "profile",
      "bench/workers/evalsha-proxy.mjs",
      { ...common, EVALSHA_SHA: sha, LIMIT: "1000000" },
      extraArgs,
      v8,
    );
  } else if (target === "b" || target === "b+") {
    const entry = target === "b" ? "bench/workers/bare-proxy.mjs" : "bench/workers/contract-proxy.mjs";
    worker = await startWorker("profile", entry, common, extraArgs, v8);
  } else {
    worker = await startWorker(
      "profile",
      "bench/workers/upstash-ratelimit.mjs",
      { ...common, LIMIT: "1000000" },
      extraArgs,
      v8,
    );
  }
  await runWrk(`${worker.url}/`, { durationS: 1, headers: HEADERS, script: coldScript() });
  if (wholeProcess) await perfProfile(worker);
  else await inspectorProfile(worker, inspectorPort);
} finally {
  await stopAll();
}
