/**
 * Starts the demo origin on 127.0.0.1 (default port: a free one the OS picks): a hello endpoint, and an
 * OpenAI-compatible `POST /v1/chat/completions` with `GET /v1/usage` (local/demo-origin.mjs).
 */
export function startDemoOrigin(options?: {
  port?: number;
}): Promise<{ url: string; close: () => Promise<void> }>;
