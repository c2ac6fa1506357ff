/** Target (b): a bare Hono proxy Worker, no limiting at all. */
import { Hono } from "hono";
import { forward } from "./forward.mjs";

const app = new Hono();
app.all("*", forward);
export default app;
