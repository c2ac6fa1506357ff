#!/usr/bin/env node
/**
 * The benchmark origin: answers every request `200 ok` (2-byte body), like the baseline's Node origin.
 * Runs as its own process so its CPU is measured apart from everything else.
 * Usage: node bench/lib/origin.mjs <port>
 */
import { createServer } from "node:http";

const port = Number(process.argv[2]);
const server = createServer((request, response) => {
  request.resume();
  response.writeHead(200, { "content-type": "text/plain", "content-length": "2" });
  response.end("ok");
});
server.keepAliveTimeout = 60_000;
server.listen(port, "127.0.0.1", () => console.log(`origin listening on http://127.0.0.1:${port}`));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
