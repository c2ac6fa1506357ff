/**
 * The path a rule's `match.path` and the admin prefix are tested against: the request's path as an origin may
 * read it, so that another spelling of the same path cannot slip past a rule (docs/configuration.md, "Rules"). An origin
 * decodes escapes before it routes (Hono all but `%2F`, nginx all) and nginx merges slashes: `/%64eny/x`,
 * `//deny/x` and `/deny%2Fx` may all reach a route for `/deny/x`, so a rule on `/deny/*` must see them as that.
 * A rule also matches the path as sent (./match.ts): the origin may read that instead.
 *
 * The URL parser has already resolved `.` and `..` segments and turned `\` into `/`. Left to do here: escapes
 * of ASCII characters are decoded once (`%64` → `d`, `%2F` → `/`; others keep their bytes, hex upper-cased),
 * then runs of `/` or `\` become one `/`, then the dot segments that decoding revealed are resolved. The origin
 * still receives the path exactly as the client sent it.
 */

/** The canonical form of a parsed URL's `pathname` (the same string when it has no escape and no `//`). */
export function canonicalPath(pathname: string): string {
  if (!pathname.includes("%") && !pathname.includes("//")) return pathname;
  return withoutDotSegments(decodedPath(pathname));
}

/**
 * A parsed URL's `pathname` with its ASCII escapes decoded once and its slashes merged, and the dot segments
 * decoding revealed left in place: `/__floodgate%2F..%2Fc` → `/__floodgate/../c`. An origin that resolves `..`
 * before it decodes (or never does) reads its first segment as sent, so the admin prefix is tested on this
 * form too (src/admin/prefix.ts). Without a `%` it equals the canonical form: the URL parser left no dot segment.
 */
export function decodedPath(pathname: string): string {
  const decoded = pathname.replace(/%([0-9A-Fa-f]{2})/g, (sequence, hex: string) => {
    const code = Number.parseInt(hex, 16);
    return code < 0x80 ? String.fromCharCode(code) : sequence.toUpperCase();
  });
  return decoded.replace(/[/\\]+/g, "/");
}

/** RFC 3986 §5.2.4 on an absolute path whose slashes are single: `/a/./b/../c` → `/a/c`. */
function withoutDotSegments(path: string): string {
  if (!path.includes("/.")) return path;
  const segments = path.split("/");
  const out: string[] = [];
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i] as string;
    const last = i === segments.length - 1;
    if (segment === "." || segment === "..") {
      if (segment === ".." && out.length > 1) out.pop();
      if (last) out.push(""); // `/a/b/..` is the directory `/a/`
      continue;
    }
    out.push(segment);
  }
  return out.join("/");
}
