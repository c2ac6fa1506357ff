/**
 * Several Redis databases (docs/scaling-out.md): `UPSTASH_REDIS_REST_URL` may list N endpoints separated by
 * commas, and `UPSTASH_REDIS_REST_TOKEN` then holds one token for all of them or N tokens in the same order,
 * each entry trimmed. One token is taken exactly as given (it may hold a comma). Messages name the binding and the position, and
 * show of a URL only its scheme and host (`shownUrl`), never a token.
 */
import * as v from "valibot";
import { REST_URL_SHAPE } from "../engine/redis";
import { ConfigError, shownUrl } from "./errors";

/** One Redis REST endpoint. */
export interface RedisEndpoint {
  url: string;
  token: string;
}

const URL_BINDING = "UPSTASH_REDIS_REST_URL";
const TOKEN_BINDING = "UPSTASH_REDIS_REST_TOKEN";

/** The URL binding split into its endpoints (one entry when it has no comma), each trimmed. */
const splitUrls = (value: string): string[] => value.split(",").map((u) => u.trim());

/** Why `url` cannot be a Redis REST endpoint, in a message naming `name`; `undefined` when it can. */
export function restUrlProblem(name: string, url: string): string | undefined {
  // The port refuses any other (src/engine/redis.ts): none may reach it.
  if (REST_URL_SHAPE.test(url.replace(/\/$/, ""))) return undefined;
  return `${name}: ${shownUrl(url)} is not an http(s) URL (the database's REST URL, e.g. https://<name>.upstash.io)`;
}

/** Which entry of a list, for messages: "" for a single value. */
const where = (i: number, count: number) => (count > 1 ? ` (endpoint ${i + 1} of ${count})` : "");

/** `UPSTASH_REDIS_REST_URL`: one URL or a comma-separated list of distinct URLs. */
export const restUrlsSchema = v.pipe(
  v.string(`${URL_BINDING}: required (the Redis REST endpoint, or several separated by commas)`),
  v.rawCheck(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    const urls = splitUrls(dataset.value);
    const seen = new Set<string>();
    urls.forEach((url, i) => {
      const problem = restUrlProblem(`${URL_BINDING}${where(i, urls.length)}`, url);
      if (problem !== undefined) {
        addIssue({ message: problem });
      } else if (seen.has(url)) {
        addIssue({ message: `${URL_BINDING}: ${shownUrl(url)} is listed twice` });
      }
      seen.add(url);
    });
  }),
);

/** HTTP whitespace at either end of a value, which fetch strips before sending it. */
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;
/** An RFC 9110 field-value in ASCII: visible characters, with spaces and tabs only between them. */
const FIELD_VALUE = /^[\x21-\x7E](?:[\t\x20-\x7E]*[\x21-\x7E])?$/;

/**
 * Why `token` cannot authenticate to a Redis REST endpoint, in a message naming `name` and never showing the
 * value; `undefined` when it can. It travels as `Authorization: Bearer <token>`: whitespace at either end is
 * fine (fetch strips it), but a control character, a line break inside or a non-ASCII character makes fetch
 * reject the header (or send another value) on every request, and every decision would fail.
 */
export function restTokenProblem(name: string, token: string): string | undefined {
  const sent = token.replace(EDGE_WHITESPACE, "");
  if (FIELD_VALUE.test(sent)) return undefined;
  if (sent === "") return `${name}: is empty`;
  return `${name}: cannot be sent as an HTTP header value (it holds a control character, a line break or a non-ASCII character; the value is not shown): copy the token again from the Upstash console`;
}

/**
 * The tokens of a list, each trimmed: a list may be written one token per line (a multi-line string in
 * wrangler.toml, a secret pasted so), and the whitespace around a comma is no part of a token.
 */
const splitTokens = (value: string): string[] => value.split(",").map((t) => t.trim());

/** The first of `tokens` that cannot be sent, as `restTokenProblem` words it; `undefined` when all can. */
const tokensProblem = (tokens: readonly string[]): string | undefined =>
  tokens.map((token) => restTokenProblem(TOKEN_BINDING, token)).find((problem) => problem !== undefined);

/** `UPSTASH_REDIS_REST_TOKEN`: a secret, so no message shows any part of it. */
export const restTokensSchema = v.pipe(
  v.string(`${TOKEN_BINDING}: required (a secret)`),
  v.minLength(1, `${TOKEN_BINDING}: is empty`),
  v.rawCheck(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    // With a comma it may be a list: each token is checked as `redisEndpoints` pairs it (an empty one is named
    // there, by its position). Whether it is one token after all only the URL binding tells: `redisEndpoints`
    // then checks it whole.
    const value = dataset.value;
    const problem = tokensProblem(value.includes(",") ? splitTokens(value).filter((t) => t !== "") : [value]);
    if (problem !== undefined) addIssue({ message: problem });
  }),
);

/**
 * Pairs the (already schema-checked) URL and token bindings into endpoints, in the URL binding's order.
 * @throws {ConfigError} naming the binding when the token count fits neither one nor one per URL, or a token is empty
 *   or (one endpoint's, taken whole) cannot be sent.
 */
export function redisEndpoints(urlBinding: string, tokenBinding: string): RedisEndpoint[] {
  const urls = splitUrls(urlBinding);
  if (urls.length === 1) {
    // One endpoint takes the binding whole, commas and all: a line break after a comma is inside its token.
    const problem = tokensProblem([tokenBinding]);
    if (problem !== undefined) throw new ConfigError(problem);
    return [{ url: urls[0] as string, token: tokenBinding }];
  }
  const tokens = tokenBinding.includes(",") ? splitTokens(tokenBinding) : [tokenBinding];
  if (tokens.length !== 1 && tokens.length !== urls.length) {
    throw new ConfigError(
      `${TOKEN_BINDING}: has ${tokens.length} comma-separated tokens for the ${urls.length} endpoints of ${URL_BINDING}: give one token for all, or one per endpoint in the same order`,
    );
  }
  const empty = tokens.indexOf("");
  if (empty >= 0) throw new ConfigError(`${TOKEN_BINDING}: token ${empty + 1} of ${tokens.length} is empty`);
  return urls.map((url, i) => ({
    url,
    token: tokens.length === 1 ? (tokens[0] as string) : (tokens[i] as string),
  }));
}
