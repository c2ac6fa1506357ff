// When is `wrangler dev` really serving? wrangler prints "Ready" before the Worker answers, so readiness is
// a request that went THROUGH the Worker: its health endpoint, which is never rate-limited and so costs the
// user's first curl loop nothing.
const pollIntervalMs = 250;
const requestTimeoutMs = 5000;

/**
 * Polls until the Worker answers. Prefers `GET /__floodgate/health` (200 = serving); a Worker without that
 * route (404) counts as serving once `GET /` answers below 500.
 * @param {string} baseUrl e.g. http://127.0.0.1:8787
 * @param {number} timeoutMs
 * @param {() => boolean} cancelled stop polling (e.g. the stack is shutting down)
 * @returns {Promise<string | undefined>} a warning to show when health reports something other than "ok"
 */
export async function waitUntilServing(baseUrl, timeoutMs, cancelled) {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer yet";
  while (Date.now() < deadline && !cancelled()) {
    try {
      const health = await fetch(`${baseUrl}/__floodgate/health`, {
        signal: AbortSignal.timeout(requestTimeoutMs),
      });
      const text = await health.text();
      if (health.status === 200) return healthWarning(text);
      // Serving, but with a configuration it cannot run: no wait will change that.
      const invalid = invalidConfiguration(health.status, text);
      if (invalid) throw new InvalidConfigurationError(invalid);
      if (health.status === 404) {
        const home = await fetch(`${baseUrl}/`, { signal: AbortSignal.timeout(requestTimeoutMs) });
        await home.arrayBuffer();
        if (home.status < 500) return undefined;
        last = `GET / answered ${home.status}`;
      } else {
        last = `GET /__floodgate/health answered ${health.status}: ${text.slice(0, 300)}`;
      }
    } catch (error) {
      if (error instanceof InvalidConfigurationError) throw error;
      last = error instanceof Error ? error.message : String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, pollIntervalMs));
  }
  if (cancelled()) return undefined;
  throw new Error(`the Worker did not answer within ${timeoutMs / 1000} s (last: ${last})`);
}

/**
 * @param {string} body the health endpoint's JSON
 * @returns {string | undefined}
 */
function healthWarning(body) {
  try {
    const health = JSON.parse(body);
    if (health?.status === "ok") return undefined;
    return `the Worker is up but reports ${JSON.stringify(health)}`;
  } catch {
    return undefined;
  }
}

/** The Worker is up and answers every request with the 500 of an invalid configuration (src/worker.ts). */
export class InvalidConfigurationError extends Error {
  name = "InvalidConfigurationError";
}

/**
 * @param {number} status
 * @param {string} body
 * @returns {string | undefined} the problem's detail (it names the binding and field) when it is that 500
 */
function invalidConfiguration(status, body) {
  if (status !== 500) return undefined;
  try {
    const detail = JSON.parse(body)?.detail;
    return typeof detail === "string" && detail.startsWith("Invalid configuration") ? detail : undefined;
  } catch {
    return undefined;
  }
}
