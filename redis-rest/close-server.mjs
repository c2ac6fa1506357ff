// Closing an HTTP server for good. `server.close()` waits for every connection to end, and
// `closeAllConnections()` misses sockets the HTTP parser no longer tracks (a peer that half-closed mid-request
// sits in CLOSE-WAIT forever): a test run's teardown must not hang on one of those.

/**
 * Tracks the server's sockets from now on and returns a close function that destroys all of them.
 * @param {import("node:http").Server} server
 * @returns {() => Promise<void>}
 */
export function closable(server) {
  /** @type {Set<import("node:net").Socket>} */
  const sockets = new Set();
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  return () =>
    new Promise((resolve) => {
      server.close(() => resolve());
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
    });
}
