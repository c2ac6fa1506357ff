/**
 * Target (l): no origin at all, a Hono app that answers `ok` itself after reading what any limiter reads
 * (the client IP header and the parsed URL). With (l+) beside it, what the limiter costs a request in
 * `workerd serve` under load, without the origin's round trip and its noise in the way.
 */
import { Hono } from "hono";
import { clientIp } from "./forward.mjs";

const app = new Hono();
app.get("*", (c) => c.text(clientIp(c) && new URL(c.req.url).pathname ? "ok" : "no"));
export default app;
