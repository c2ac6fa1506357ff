/** The test origin (see echo-origin.mjs for what each path does). */
export interface EchoOrigin {
  /** `http://127.0.0.1:<port>` */
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Starts the echo origin on 127.0.0.1 (default: a free port). */
export function startEchoOrigin(options?: { port?: number }): Promise<EchoOrigin>;
