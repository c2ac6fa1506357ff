/**
 * A cookie's value as a `cookie:<name>` key part reads it (docs/protect.md, "Keys from Cloudflare's request
 * facts"): from the request's `Cookie` header, names compared exactly (RFC 6265: they are case-sensitive).
 */

/**
 * The value of cookie `name`, or `undefined` when the request sends none, an empty one, or more than one
 * (two values are no one identity, as for a query parameter given twice: a client could pick either).
 * The value is taken as sent (no percent-decoding), without surrounding whitespace or double quotes.
 */
export function cookieValue(headers: Headers, name: string): string | undefined {
  const header = headers.get("cookie");
  if (header === null) return undefined;
  let found: string | undefined;
  for (const pair of header.split(";")) {
    const eq = pair.indexOf("=");
    if (eq < 0 || pair.slice(0, eq).trim() !== name) continue;
    if (found !== undefined) return undefined;
    found = unquote(pair.slice(eq + 1).trim());
  }
  return found === "" ? undefined : found;
}

/** `"abc"` → `abc` (RFC 6265's optional DQUOTEs around a cookie value). */
const unquote = (value: string): string =>
  value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;
