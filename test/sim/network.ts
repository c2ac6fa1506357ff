/**
 * The simulated network between the isolates and Redis: an HTTP proxy in front of the run's REST server that
 * every store of the simulation talks to. It passes each command through untouched, unless a fault is queued:
 * then the next command is held before it reaches Redis (a slow way in: the script runs late), held after
 * Redis answered (a late reply: the script ran, the caller may have given up), answered with a 500 without
 * reaching Redis (an error), or never answered until the caller aborts (lost). Faults act on the real
 * engine's real fetches, whatever client the store uses, so nothing of the engine is mocked.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { RedisScript } from "../../src/engine/redis";
import { DECIDE, DECIDE_WITH_OPTIONS, GIVE_BACK, LEASE, REFUND, SETTLE } from "../../src/engine/script";

/** What a command is, by the script it runs (one per call kind: docs/script.md); `other`: any other command. */
export type CommandKind = "decision" | "lease" | "refund" | "give-back" | "settle" | "other";

/** What happens to one command on its way; `on`: only to a command of that kind (absent: the next one). */
export type Fault = (
  | { kind: "slow-in"; ms: number }
  | { kind: "slow-out"; ms: number }
  | { kind: "error" }
  | { kind: "lost" }
) & { on?: CommandKind | undefined };

const SCRIPT_KINDS: readonly (readonly [RedisScript, CommandKind])[] = [
  [DECIDE, "decision"],
  [DECIDE_WITH_OPTIONS, "decision"],
  [LEASE, "lease"],
  [REFUND, "refund"],
  [GIVE_BACK, "give-back"],
  [SETTLE, "settle"],
];

/** Each script's kind by its SHA (what `EVALSHA` names) and by its source (what `EVAL` sends). */
async function scriptKinds(): Promise<Map<string, CommandKind>> {
  const kinds = new Map<string, CommandKind>();
  for (const [script, kind] of SCRIPT_KINDS) {
    kinds.set(await script.sha(), kind);
    kinds.set(script.source, kind);
  }
  return kinds;
}

/** The kind of a REST command (`["evalsha", sha, …]` or `["eval", source, …]`). */
function kindOf(body: Buffer, kinds: Map<string, CommandKind>): CommandKind {
  try {
    const command = JSON.parse(body.toString()) as unknown[];
    const name = String(command[0]).toLowerCase();
    if (name !== "evalsha" && name !== "eval") return "other";
    return kinds.get(name === "evalsha" ? String(command[1]).toLowerCase() : String(command[1])) ?? "other";
  } catch {
    return "other";
  }
}

/** The proxy: its URL (one per simulated endpoint: `/e0`, `/e1`… all reach the one Redis) and its fault queue. */
export interface Network {
  /** `http://127.0.0.1:<port>/<name>`: an endpoint of its own for the engine's rendezvous hashing. */
  endpoint(name: string): string;
  /** Queues `fault` for the next command that comes through (any endpoint). */
  inject(fault: Fault): void;
  /** Drops the faults not yet used. */
  clear(): void;
  /** Commands passed through (by kind), and faults applied, since the start. */
  readonly stats: { commands: number; faults: number; byKind: Record<CommandKind, number> };
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function bodyOf(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Starts the proxy in front of `restUrl` (the run's REST server). */
export async function startNetwork(restUrl: string): Promise<Network> {
  const queue: Fault[] = [];
  const stats = {
    commands: 0,
    faults: 0,
    byKind: { decision: 0, lease: 0, refund: 0, "give-back": 0, settle: 0, other: 0 } as Record<
      CommandKind,
      number
    >,
  };
  const open = new Set<ServerResponse>();
  const kinds = await scriptKinds();

  async function pass(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await bodyOf(req);
    const kind = kindOf(body, kinds);
    stats.byKind[kind]++;
    const at = queue.findIndex((f) => f.on === undefined || f.on === kind);
    const fault = at >= 0 ? queue.splice(at, 1)[0] : undefined;
    stats.commands++;
    if (fault) stats.faults++;
    if (fault?.kind === "error") {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "ERR simulated failure" }));
      return;
    }
    if (fault?.kind === "lost") {
      open.add(res);
      res.on("close", () => open.delete(res));
      return; // never answered: the caller's own timeout ends it
    }
    if (fault?.kind === "slow-in") await sleep(fault.ms);
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (req.headers.authorization) headers.authorization = req.headers.authorization;
    // `/<endpoint>/pipeline` → `/pipeline`: the endpoint's name is the proxy's, the rest the REST API's.
    const rest = (req.url ?? "/").replace(/^\/[^/?]*/, "");
    const answer = await fetch(`${restUrl}${rest}`, {
      method: req.method ?? "POST",
      headers,
      body: req.method === "GET" ? undefined : body,
    }).catch(() => undefined);
    if (fault?.kind === "slow-out") await sleep(fault.ms);
    if (!answer) {
      res.writeHead(502).end();
      return;
    }
    const text = await answer.text();
    if (res.destroyed) return;
    res.writeHead(answer.status, { "content-type": "application/json" });
    res.end(text);
  }

  const server: Server = createServer((req, res) => {
    pass(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: (name) => `http://127.0.0.1:${port}/${name}`,
    inject: (fault) => {
      queue.push(fault);
    },
    clear: () => {
      queue.length = 0;
    },
    stats,
    close: async () => {
      for (const res of open) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
