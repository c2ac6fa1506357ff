/**
 * A denied request's path as the dashboard lists it under "denied most" (metric-keys.ts, `paths:<rule>`): one
 * route counted once, and no client's id or token carried in it.
 */

/** The longest path kept, characters (a route, not a payload). */
const MAX_ROUTE_LENGTH = 120;
/**
 * A segment that may name a client rather than a route: one with a digit (an id, an IP address; a short
 * version such as `v2` excepted), an `@` or `:` (an email, an IPv6 address), a `%` escape (anything), long hex,
 * or a long run of token characters. A plain word (`users`, or a name such as `alice`) stays: the page then
 * shows it, so routes that carry client names should not be limited by path alone (docs/operating.md).
 */
const ID_SEGMENT = /^(?!v\d{1,2}$)(.*[\d@:%].*|[0-9a-f]{8,}|[A-Za-z0-9_~.=+-]{24,})$/i;

/**
 * A request's path as the dashboard lists it: no query string, and every segment that looks like an id
 * (`/users/8812/keys/3f9a…`) as `:id`, so that one route is counted once and a path carries no client's id or
 * token; at most 120 characters.
 */
export function routeOf(url: string): string {
  let path: string;
  try {
    path = new URL(url).pathname;
  } catch {
    return "?";
  }
  const route = path
    .split("/")
    .map((segment) => (ID_SEGMENT.test(segment) ? ":id" : segment))
    .join("/");
  return route.length > MAX_ROUTE_LENGTH ? `${route.slice(0, MAX_ROUTE_LENGTH)}…` : route;
}
