/** A running Worker in Miniflare (see miniflare-worker.mjs). */
export interface MiniflareWorker {
  /** A request to the Worker; `path` is relative to http://floodgate.test. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  /** Every line the Worker logged so far. */
  logs: string[];
  dispose(): Promise<void>;
}

/** Bundles the Worker (once per process) and starts it with these bindings (non-strings JSON-encoded). */
export function startWorker(options: {
  bindings: Record<string, unknown>;
  entry?: string;
}): Promise<MiniflareWorker>;
