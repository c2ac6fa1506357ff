// A concurrency slot is given back once the response body is written (src/middleware/release.ts), whatever the
// handler's body is on workerd: its own IdentityTransformStream or FixedLengthStream (which workerd cannot pipe
// into another native pipe: such a response once never reached the client), a JS stream, a string.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { Hono } from "hono";
import { expect, it } from "vitest";
import { rateLimit } from "../../src/index";
import { baseEnv } from "./proxy-harness";

const BODY = "x".repeat(100_000);
const bytes = () => new TextEncoder().encode(BODY);

/** A body written by the handler after it returns, as a streaming download would be. */
function written(pipe: { readable: ReadableStream; writable: WritableStream }): ReadableStream {
  const writer = pipe.writable.getWriter();
  void (async () => {
    for (let at = 0; at < BODY.length; at += 10_000) await writer.write(bytes().slice(at, at + 10_000));
    await writer.close();
  })();
  return pipe.readable;
}

const BODIES: Record<string, () => BodyInit> = {
  "an IdentityTransformStream": () => written(new IdentityTransformStream()),
  "a FixedLengthStream": () => written(new FixedLengthStream(BODY.length)),
  "a JS ReadableStream": () =>
    new ReadableStream({
      start(controller) {
        controller.enqueue(bytes());
        controller.close();
      },
    }),
  "a string": () => BODY,
};

for (const [kind, body] of Object.entries(BODIES)) {
  it(`passes ${kind} through whole behind a concurrency rule, then gives the slot back`, async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis: { url: baseEnv.UPSTASH_REDIS_REST_URL, token: baseEnv.UPSTASH_REDIS_REST_TOKEN },
        prefix: `slot-bodies-${crypto.randomUUID().slice(0, 12)}`,
        timeoutMs: 5000, // a loaded machine's decision: these tests are about the body, not the budget
        rules: [{ name: "one-at-a-time", key: "global", algorithm: "concurrency", limit: 1 }],
      }),
    );
    app.get("/download", () => new Response(body()));
    // One slot: the second request is admitted only if the first one's slot came back after its body.
    for (let i = 0; i < 2; i++) {
      const ctx = createExecutionContext();
      const response = await app.fetch(new Request("http://app.test/download"), {}, ctx);
      expect(response.status).toBe(200);
      expect(await response.text()).toBe(BODY);
      await waitOnExecutionContext(ctx);
    }
  });
}
