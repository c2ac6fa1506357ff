/** A Worker running under `workerd serve` (see workerd.mjs). */
export interface ServedWorker {
  /** `http://127.0.0.1:<port>` */
  url: string;
  port: number;
  pid: number;
  /** Its last output (stdout and stderr). */
  output(): string;
  stop(): Promise<void>;
}

/** Bundles `entry` and starts `workerd serve` for it; resolves once it answers HTTP. */
export function startWorker(
  name: string,
  entry: string,
  bindings: Record<string, unknown>,
  extraArgs?: string[],
  options?: { v8Flags?: string[]; onOutput?: (chunk: string) => void },
): Promise<ServedWorker>;

/** Bundles `entry` (path relative to the repo) into one ES module; resolves to its path. */
export function bundle(entry: string): Promise<string>;

/** The workerd binary it runs. */
export const workerdBinary: string;
