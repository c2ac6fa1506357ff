// The REST server when Redis fails: it answers fast with 503 instead of queueing, recovers on its own, and
// its CLI leaves no process behind. Each test owns its redis-server, since it kills or freezes it.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { type AddressInfo, connect, createServer } from "node:net";
import { promisify } from "node:util";
import { Redis } from "@upstash/redis";
import { afterEach, describe, expect, it } from "vitest";
import {
  freePort,
  type RedisHandle,
  type RestServer,
  startRedis,
  startRestServer,
  stopChild,
  waitForOutput,
} from "../../redis-rest/index.mjs";

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function stack(options: { commandTimeoutMs?: number } = {}) {
  const redis = await startRedis();
  const rest = await startRestServer({ redisUrl: redis.url, ...options });
  cleanups.push(
    () => redis.close(),
    () => rest.close(),
  );
  return { redis, rest };
}

async function command(rest: RestServer, body: unknown[]) {
  const started = performance.now();
  const res = await fetch(rest.url, {
    method: "POST",
    headers: { authorization: `Bearer ${rest.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as { result?: unknown; error?: string };
  return { status: res.status, body: json, elapsedMs: performance.now() - started };
}

/** Polls until Redis answers through the REST server again. */
async function untilAnswering(rest: RestServer, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await command(rest, ["PING"])).status === 200) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("Redis did not come back");
}

/** Whether the process runs (a zombie, killed but not yet reaped by its new parent, counts as gone). */
const alive = (pid: number | undefined) => {
  if (pid === undefined) return false;
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

describe("when Redis goes away", () => {
  it("answers 503 at once while Redis is down, and serves again after it restarts", async () => {
    // "At once" = far sooner than the command timeout a queued command would wait out; the margin is wide
    // because parallel test files load this machine.
    const { redis, rest } = await stack({ commandTimeoutMs: 10_000 });
    expect((await command(rest, ["SET", "f:k", "1"])).status).toBe(200);
    await redis.kill();
    const down = await Promise.all(Array.from({ length: 20 }, () => command(rest, ["INCR", "f:k"])));
    for (const res of down) {
      expect(res.status).toBe(503);
      expect(res.body.error).toMatch(/unavailable/i);
      expect(res.elapsedMs).toBeLessThan(2_000);
    }
    await redis.restart();
    await untilAnswering(rest);
    expect((await command(rest, ["INCR", "f:k"])).body).toEqual({ result: 1 }); // a fresh, empty Redis
  });

  it("fails a command in flight when Redis dies, instead of hanging or resending it", async () => {
    const { redis, rest } = await stack();
    const busy =
      "local t = redis.call('TIME'); repeat until tonumber(redis.call('TIME')[1]) > tonumber(t[1]) + 1";
    const pending = command(rest, ["EVAL", busy, 0]);
    await new Promise((r) => setTimeout(r, 200));
    await redis.kill();
    const res = await pending;
    expect(res.status).toBe(503);
    expect(res.elapsedMs).toBeLessThan(1500);
  });

  it("times out against a frozen Redis (SIGSTOP) and recovers after SIGCONT", async () => {
    const { redis, rest } = await stack({ commandTimeoutMs: 300 });
    redis.stop();
    const frozen = await command(rest, ["PING"]);
    expect(frozen.status).toBe(503);
    expect(frozen.elapsedMs).toBeLessThan(1000);
    redis.cont();
    await untilAnswering(rest);
  });

  it("lets NOSCRIPT through after a restart, so a flagged script reloads", async () => {
    const { redis, rest } = await stack();
    const body = "#!lua flags=allow-key-locking\nreturn redis.call('INCR', KEYS[1])";
    const sha = createHash("sha1").update(body).digest("hex");
    const client = new Redis({
      url: rest.url,
      token: rest.token,
      enableTelemetry: false,
      retry: { retries: 0 },
    });
    const script = client.createScript<number>(body);
    expect(await script.exec(["f:n"], [])).toBe(1);
    await redis.restart();
    await untilAnswering(rest);
    await expect(client.evalsha(sha, ["f:n"], [])).rejects.toThrow(/NOSCRIPT/);
    expect(await script.exec(["f:n"], [])).toBe(1);
  });
});

describe("npm run redis-rest (the CLI)", () => {
  async function startCli(extra: string[] = []) {
    const port = await freePort();
    const child = spawn(
      process.execPath,
      ["redis-rest/cli.mjs", "--port", String(port), "--token", "cli-token", ...extra],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    cleanups.push(() => stopChild(child, { signal: "SIGKILL" }));
    await waitForOutput(child, new RegExp(`listening on http://127\\.0\\.0\\.1:${port}\\n`), 15_000);
    const rest = { url: `http://127.0.0.1:${port}`, token: "cli-token" } as RestServer;
    const info = await command(rest, ["INFO", "server"]);
    const redisPid = Number(/process_id:(\d+)/.exec(String(info.body.result))?.[1]);
    // The redis-server's working directory: a temporary folder when the CLI started it.
    const [, dir] = (await command(rest, ["CONFIG", "GET", "dir"])).body.result as [string, string];
    return { child, rest, redisPid, dir };
  }
  const exited = (child: ChildProcess) =>
    new Promise<number | null>((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode);
      else child.once("exit", (code) => resolve(code));
    });

  it("serves its own redis-server and stops it on SIGTERM", async () => {
    const { child, rest, redisPid } = await startCli();
    expect((await command(rest, ["SET", "cli:k", "v"])).body).toEqual({ result: "OK" });
    expect(alive(redisPid)).toBe(true);
    child.kill("SIGTERM");
    expect(await exited(child)).toBe(0);
    expect(alive(redisPid)).toBe(false);
  });

  it("takes its redis-server and its folder down with it even when killed with SIGKILL", async () => {
    const { child, redisPid, dir } = await startCli();
    expect(dir).toMatch(/floodgate-redis-/);
    expect(existsSync(dir)).toBe(true);
    child.kill("SIGKILL");
    await exited(child);
    const deadline = Date.now() + 3000;
    while ((alive(redisPid) || existsSync(dir)) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    expect(alive(redisPid)).toBe(false);
    expect(existsSync(dir)).toBe(false);
  });

  it("stops cleanly on SIGHUP (a closed terminal): redis-server gone, folder removed", async () => {
    const { child, redisPid, dir } = await startCli();
    child.kill("SIGHUP");
    expect(await exited(child)).toBe(0);
    expect(alive(redisPid)).toBe(false);
    expect(existsSync(dir)).toBe(false);
  });

  it("exits 1 with a message when its port is taken, instead of lingering", async () => {
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => squatter.close(() => resolve())));
    const child = spawn(
      process.execPath,
      ["redis-rest/cli.mjs", "--port", String((squatter.address() as AddressInfo).port)],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    cleanups.push(() => stopChild(child, { signal: "SIGKILL" }));
    await expect(
      waitForOutput(child, /cannot start the REST server: .*EADDRINUSE/, 15_000),
    ).resolves.toBeTruthy();
    expect(await exited(child)).toBe(1);
  });

  it("fronts an existing Redis with --redis and starts none of its own", async () => {
    const redis: RedisHandle = await startRedis();
    cleanups.push(() => redis.close());
    const { rest, redisPid } = await startCli(["--redis", redis.url]);
    expect(redisPid).toBe(redis.pid());
    expect((await command(rest, ["PING"])).body).toEqual({ result: "PONG" });
  });
});

describe("a REST server that cannot listen", () => {
  it("rejects when its port is taken and leaves nothing keeping the process alive", async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.close());
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => squatter.close(() => resolve())));
    // In a process of its own: it must end by itself once the promise has rejected (a Redis connection left
    // open would keep it running until the timeout kills it).
    const script = `import { startRestServer } from ${JSON.stringify(new URL("../../redis-rest/index.mjs", import.meta.url).href)};
      await startRestServer({ redisUrl: process.argv[1], port: Number(process.argv[2]) })
        .then(() => console.log("listening"), (error) => console.log("rejected", error.code));`;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--input-type=module", "-e", script, redis.url, String((squatter.address() as AddressInfo).port)],
      { timeout: 15_000 },
    );
    expect(stdout.trim()).toBe("rejected EADDRINUSE");
  });
});

describe("a throwaway redis-server's ports", () => {
  it("starts on other ports when a second port its arguments name (a cluster bus port) was taken meanwhile", async () => {
    // What a concurrent process's connection did to a cluster node's bus port between probing and binding.
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => squatter.close(() => resolve())));
    const taken = (squatter.address() as AddressInfo).port;
    const busPorts: number[] = [];
    const redis = await startRedis({
      args: async () => {
        busPorts.push(busPorts.length === 0 ? taken : await freePort());
        return ["--cluster-enabled", "yes", "--cluster-port", String(busPorts.at(-1))];
      },
    });
    cleanups.push(() => redis.close());
    expect(busPorts.length).toBe(2);
    const info = await new Promise<string>((resolve, reject) => {
      const socket = connect(redis.port, "127.0.0.1", () => socket.write("INFO cluster\r\n"));
      socket.once("data", (data) => {
        socket.end();
        resolve(data.toString());
      });
      socket.once("error", reject);
    });
    expect(info).toContain("cluster_enabled:1");
  });
});
