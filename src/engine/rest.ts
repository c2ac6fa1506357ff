/**
 * One Redis command over Upstash's REST API (`POST /` with the command as a JSON array), for the decision's
 * hot path. The @upstash/redis client does the same in ~10 % of the Worker's CPU per request (a client
 * built per decision for its deadline, header merging, options it then ignores); this is the one fetch.
 *
 * Failures are thrown exactly as @upstash/redis 1.39 throws them (same `name`, same message), so that one
 * classifier (`toStoreError`) serves both this path and the SDK client the admin API uses.
 */

/** Where and as whom to send commands: built once per store. */
export interface RestEndpoint {
  /** The REST URL, without a trailing `/` (as the SDK strips it). */
  readonly url: string;
  /** Request headers, shared by every command (fetch copies them; never mutated). */
  readonly headers: Readonly<Record<string, string>>;
}

/** The SDK's accepted URL shape (`UrlError` otherwise). */
const URL_SHAPE = /^https?:\/\/[^\s#$./?].\S*$/;

/** Validates and prepares an endpoint once. */
export function restEndpoint(url: string, token: string): RestEndpoint {
  const base = url.replace(/\/$/, "");
  if (!URL_SHAPE.test(base)) throw new Error(`Upstash Redis client was passed an invalid URL: ${base}`);
  return {
    url: base,
    headers: { "Content-Type": "application/json", authorization: `Bearer ${token}` },
  };
}

/** Named like the SDK's errors, because `toStoreError` classifies by name and message. */
class UpstashError extends Error {
  constructor(message: string, name = "UpstashError", options?: { cause?: unknown }) {
    super(message, options);
    this.name = name;
  }
}

function parseBody(text: string): { result?: unknown; error?: string } {
  try {
    return JSON.parse(text);
  } catch (cause) {
    const shown = text.length > 200 ? `${text.slice(0, 200)}...` : text;
    throw new UpstashError(`Unable to parse response body: ${shown}`, "UpstashJSONParseError", { cause });
  }
}

/**
 * Sends `command` once (never retried: a decision must never be counted twice) and returns its result.
 * An aborted `signal` rejects with the fetch's `AbortError` / `TimeoutError`.
 */
export async function restCommand(
  endpoint: RestEndpoint,
  command: readonly (string | number)[],
  signal: AbortSignal,
): Promise<unknown> {
  const response = await fetch(endpoint.url, {
    method: "POST",
    headers: endpoint.headers,
    body: JSON.stringify(command),
    signal,
  });
  const body = parseBody(await response.text());
  if (!response.ok) {
    // The status travels with the error: a 5xx is "Redis cannot answer" whatever its text (toStoreError).
    const error = new UpstashError(`${body.error}, command was: ${JSON.stringify(command)}`);
    throw Object.assign(error, { status: response.status });
  }
  if (body.error) throw new UpstashError(body.error);
  if (body.result === undefined) throw new TypeError("Request did not return a result");
  return body.result;
}
