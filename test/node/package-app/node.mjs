import { serve } from "@hono/node-server";
import { makeApp } from "./app.mjs";

const app = makeApp(
  () => ({ url: process.env.UPSTASH_REDIS_REST_URL, token: process.env.UPSTASH_REDIS_REST_TOKEN }),
  "pkg-node",
);
serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, (info) => {
  console.log(`listening on http://127.0.0.1:${info.port}`);
});
