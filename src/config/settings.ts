/**
 * How one setting is checked, shared by the Worker's bindings (src/config/index.ts) and `rateLimit()`'s
 * options (src/config/middleware.ts), so `RATE_LIMIT_TIMEOUT_MS` and `timeoutMs` accept the same values.
 * Each takes the name a message starts with: the binding's or the option's.
 */
import * as v from "valibot";
import { shownUrl } from "./errors";
import { HEADER_NAME, show } from "./fields";

/** The longest decision budget (`RATE_LIMIT_TIMEOUT_MS`, the middleware's `timeoutMs`), ms. */
export const MAX_TIMEOUT_MS = 60_000;

/** A string. */
export const text = (name: string) => v.string(`${name}: expected a string`);

/** Whole milliseconds from 1 to `max`, as a number or a string of digits (a binding arrives as text). */
export const wholeMs = (name: string, max: number) =>
  v.pipe(
    v.union(
      [v.number(), v.pipe(v.string(), v.regex(/^\s*\d+\s*$/), v.transform(Number))],
      (i) => `${name}: ${show(i.input)} is not a whole number of milliseconds`,
    ),
    v.check(
      (n) => Number.isInteger(n) && n >= 1 && n <= max,
      (i) => `${name}: ${show(i.input)} is not from 1 to ${max}`,
    ),
  );

/** An http(s) URL without credentials, query or fragment; a message shows only its scheme and host. */
export const httpUrl = (name: string) =>
  v.pipe(
    text(name),
    v.check(
      (value) => {
        try {
          const url = new URL(value);
          return (url.protocol === "https:" || url.protocol === "http:") && !url.search && !url.hash;
        } catch {
          return false;
        }
      },
      (i) => `${name}: ${shownUrl(String(i.input))} is not an http(s) URL without query or fragment`,
    ),
    // Dropped by the runtime's fetch without a word: a user who put them there expects them sent.
    v.check(
      (value) => !URL.canParse(value) || (new URL(value).username === "" && new URL(value).password === ""),
      `${name}: has a user name or password in it, which is never sent: remove it`,
    ),
  );

/** One of `options`, named `name` in the message. */
export const oneOf = <T extends string>(name: string, options: readonly [T, ...T[]]) =>
  v.picklist(options, (i) => `${name}: ${show(i.input)} is not one of ${options.join(" | ")}`);

/** A Redis key prefix. */
export const keyPrefix = (name: string) =>
  v.pipe(
    text(name),
    v.regex(/^[A-Za-z0-9_.:-]{1,64}$/, (i) => `${name}: ${show(i.input)} is not [A-Za-z0-9_.:-]{1,64}`),
  );

/** A header name (RFC 9110 `token`). */
export const headerName = (name: string) =>
  v.pipe(
    text(name),
    v.regex(HEADER_NAME, (i) => `${name}: ${show(i.input)} is not a header name`),
  );

/** The shortest admin token accepted: 16 random characters are beyond guessing at any throttled rate. */
export const MIN_SECRET_LENGTH = 16;

/**
 * A secret a client sends as `Authorization: Bearer <token>` (the admin token): visible ASCII without spaces,
 * the only tokens a Bearer header can carry whole, once the whitespace at its ends is trimmed (a secret piped
 * in with its newline), of at least `MIN_SECRET_LENGTH` characters. A message never shows the value.
 */
export const bearerSecret = (name: string) =>
  v.pipe(
    text(name),
    v.trim(),
    v.regex(
      /^[\x21-\x7E]*$/, // empty: no admin token, the admin API off
      `${name}: cannot be sent as \`Authorization: Bearer <token>\` (it holds a space, a control character, a line break or a non-ASCII character; its value is not shown): use visible ASCII only, e.g. \`openssl rand -base64 32\``,
    ),

    // Admin requests are throttled only per client (docs/security.md): a short token is guessed across many.
    v.check(
      (value) => value === "" || value.length >= MIN_SECRET_LENGTH,
      (i) =>
        `${name}: ${String(i.input).length} characters, fewer than ${MIN_SECRET_LENGTH} (its value is not shown): use a long random one, e.g. \`openssl rand -hex 32\``,
    ),
  );

/**
 * One or more values a JWT claim may take (`aud`, `iss`): a comma-separated string (a binding), or an array of
 * strings (TOML, or the middleware's options). Blank entries are dropped; none left = unset.
 */
export const claimValues = (name: string) =>
  v.pipe(
    v.union(
      [v.string(), v.array(v.string())],
      `${name}: expected a string or an array of strings (e.g. "api.example.com", or several comma-separated)`,
    ),
    v.transform((value) =>
      (typeof value === "string" ? value.split(",") : value).map((item) => item.trim()).filter(Boolean),
    ),
    v.transform((values) => (values.length === 0 ? undefined : values)),
  );

/** Messages already start with the setting's name; drop valibot's path so it is not repeated. */
export const stripPath = (issue: v.BaseIssue<unknown>): v.BaseIssue<unknown> => ({
  ...issue,
  path: undefined,
});
