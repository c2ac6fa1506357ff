/**
 * Misconfiguration is an `Error` that names the binding and the field (a request-time outcome is a
 * `ProblemError` instead), e.g.
 * `RATE_LIMIT_RULES[2].period: "1 fortnight" is not a duration`. The Worker answers every request with
 * a 500 problem+json carrying this message, and `npm run check-config` prints it before deploy.
 */
import type * as v from "valibot";

/**
 * A configuration that cannot run: every problem found, each naming its field (`problems`; `message` joins
 * them with "; "). Safe to show: never a secret's value.
 */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly problems: readonly string[];

  constructor(problems: string | readonly string[]) {
    const list = typeof problems === "string" ? [problems] : problems;
    super(list.join("; "));
    this.problems = list;
  }
}

/**
 * Runs `parse`, adding the problems of a `ConfigError` it throws to `problems` (anything else is thrown on):
 * one run of check-config, or one failed `rateLimit()`, names everything wrong at once.
 */
export function collecting<T>(problems: string[], parse: () => T): T | undefined {
  try {
    return parse();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    problems.push(...error.problems);
    return undefined;
  }
}

/**
 * What a message may show of a URL-valued binding: its scheme and host, never credentials, path or query
 * (a pasted `redis://user:password@host` or an `?api_key=` carries a secret).
 */
export function shownUrl(value: string): string {
  if (!URL.canParse(value)) return "the value";
  const { protocol, host } = new URL(value);
  return JSON.stringify(`${protocol}//${host}`);
}

/** Turns valibot issues into one `ConfigError`, each line prefixed by the binding and field path. */
export function configErrorFrom(label: string, issues: readonly v.BaseIssue<unknown>[]): ConfigError {
  const lines = issues.map((issue) => {
    const where = `${label}${formatPath(issue)}`;
    return where ? `${where}: ${issue.message}` : issue.message;
  });
  return new ConfigError([...new Set(lines)]);
}

function formatPath(issue: v.BaseIssue<unknown>): string {
  let path = "";
  for (const item of issue.path ?? []) {
    const key = (item as { key?: unknown }).key;
    path += typeof key === "number" ? `[${key}]` : `.${String(key)}`;
  }
  return path;
}
