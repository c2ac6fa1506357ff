import { makeApp } from "./app.mjs";

export default makeApp(
  (c) => ({ url: c.env.UPSTASH_REDIS_REST_URL, token: c.env.UPSTASH_REDIS_REST_TOKEN }),
  "pkg-worker",
);
