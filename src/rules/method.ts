/**
 * The methods a request may be read as besides its own: many frameworks let a client tunnel a method through
 * a POST (Rack, Laravel, Symfony and Spring read `_method`; Rack, Express's method-override and Google's APIs
 * read `X-HTTP-Method-Override`; OData services `X-HTTP-Method`; others `X-Method-Override`). A rule that names methods counts a
 * request under each of them (docs/matching.md): counting a request the origin does not tunnel is the safe
 * error, letting a tunnelled `DELETE` past a spent `DELETE` rule is not.
 */

/** The request headers that carry a tunnelled method, lower-case. */
export const METHOD_OVERRIDE_HEADERS = [
  "x-http-method-override",
  "x-http-method",
  "x-method-override",
] as const;

/** The query parameter that carries a tunnelled method. */
export const METHOD_OVERRIDE_PARAMETER = "_method";

/**
 * Every method the request names besides its own, upper-case: each override header's values (a header sent
 * twice arrives joined by commas) and each `_method` query value. Empty for almost every request.
 */
export function methodOverrides(headers: Headers, url: URL): string[] {
  const found: string[] = [];
  for (const name of METHOD_OVERRIDE_HEADERS) {
    const value = headers.get(name);
    if (value !== null) found.push(...value.split(","));
  }
  // The name may be escaped (`%5Fmethod`), as the origin's query parser decodes it: parse the query when any.
  if (url.search.length > 1) found.push(...url.searchParams.getAll(METHOD_OVERRIDE_PARAMETER));
  return found.map((method) => method.trim().toUpperCase()).filter((method) => method !== "");
}
