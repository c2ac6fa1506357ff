/** How the limiter hands background work to the runtime. */
import type { Context } from "hono";
import type { WaitUntil } from "../engine/types";

/**
 * `executionCtx.waitUntil` on Workers; elsewhere (Node, Bun) the promise simply runs on. Looked up only
 * when something is handed over (rarely: a lease renewal or return, a refresh): off Workers, Hono's getter
 * throws, and an error made for every request cost a Node app more than the rest of a leased decision.
 */
export function waitUntilOf(c: Context): WaitUntil {
  return (promise) => {
    let ctx: { waitUntil(promise: Promise<unknown>): void } | undefined;
    try {
      ctx = c.executionCtx;
    } catch {
      // Not on Workers: Hono's getter throws.
    }
    if (ctx) ctx.waitUntil(promise);
    else void promise.catch(() => undefined);
  };
}
