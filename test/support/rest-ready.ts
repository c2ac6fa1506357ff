/** The part of a running REST server (redis-rest/) a readiness check needs. */
interface RestEndpoint {
  url: string;
  token: string;
}

/**
 * Waits until the REST server answers a PING through Redis again (what an operator would check after a
 * Redis restart), polling every 50 ms for up to 5 s.
 */
export async function waitUntilRestReachesRedis(rest: RestEndpoint): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const res = await fetch(rest.url, {
      method: "POST",
      headers: { authorization: `Bearer ${rest.token}` },
      body: JSON.stringify(["PING"]),
    }).catch(() => undefined);
    if (res?.status === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("the REST server never reached Redis again");
}
