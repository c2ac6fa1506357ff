// Debian's real Prometheus and promtool for the monitoring tests (installed by `npm test`'s setup, as
// redis-server is: scripts/debian-package.mjs). A Prometheus of the test's own: its config, a TSDB in a
// temporary folder removed at the end, a free port on 127.0.0.1.
import { type ChildProcess, execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, spawnTied, stopChild } from "../../redis-rest/index.mjs";
import { ensurePrometheus } from "../../scripts/debian-package.mjs";

export interface PrometheusServer {
  url: string;
  /** An instant query through the HTTP API; throws unless Prometheus answers `success`. */
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>>;
  /** The API's whole answer to an instant query, whatever its status. */
  queryRaw(expr: string): Promise<{ status: string; error?: string; data?: { resultType: string } }>;
  close(): Promise<void>;
}

/** Runs promtool with `args` (and `input` on stdin); resolves to its exit code and output. */
export function promtool(
  args: string[],
  input?: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  ensurePrometheus();
  return new Promise((resolve) => {
    const child = execFile("promtool", args, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
    child.stdin?.end(input ?? "");
  });
}

/** Starts Prometheus with `config` (YAML) and resolves once it is ready. */
export async function startPrometheus(config: string): Promise<PrometheusServer> {
  ensurePrometheus();
  const dir = mkdtempSync(join(tmpdir(), "floodgate-prometheus-"));
  const configFile = join(dir, "prometheus.yml");
  writeFileSync(configFile, config);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawnTied(
    "prometheus",
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    log += chunk.toString("utf8");
  });
  const close = async () => {
    await stopChild(child);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) {
      await close();
      throw new Error(`prometheus exited: ${log.slice(-2000)}`);
    }
    const ready = await fetch(`${url}/-/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await close();
      throw new Error(`prometheus not ready within 20 s: ${log.slice(-2000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const queryRaw = async (expr: string) => {
    const response = await fetch(`${url}/api/v1/query?${new URLSearchParams({ query: expr })}`);
    return (await response.json()) as { status: string; error?: string; data?: { resultType: string } };
  };
  return {
    url,
    queryRaw,
    async query(expr) {
      const answer = (await queryRaw(expr)) as {
        status: string;
        error?: string;
        data?: { result: Array<{ metric: Record<string, string>; value: [number, string] }> };
      };
      if (answer.status !== "success" || !answer.data) throw new Error(`${expr}: ${answer.error}`);
      return answer.data.result;
    },
    close,
  };
}
