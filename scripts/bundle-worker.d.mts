/** Bundles the Worker like wrangler does (Lua as text); see bundle-worker.mjs. */
export function bundleWorker(options?: {
  entry?: string;
  outdir?: string;
}): Promise<{ path: string; code: string }>;
