/** A running Worker in Miniflare (see miniflare-worker.mjs). */
export interface MiniflareWorker {
  /** A request to the Worker; `path` is relative to http://floodgate.test. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  /** Where it serves real HTTP (with `port`; otherwise Miniflare's own loopback address). */
  url: string;
  /** Every line the Worker logged so far. */
  logs: string[];
  dispose(): Promise<void>;
}

/** Bundles the Worker (once per process) and starts it with these bindings (non-strings JSON-encoded). */
export function startWorker(options: {
  bindings: Record<string, unknown>;
  entry?: string;
  /** Also serve real HTTP on 127.0.0.1:<port>, e.g. for a browser. */
  port?: number;
}): Promise<MiniflareWorker>;
