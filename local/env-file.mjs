// Reading `.dev.vars` and writing the env file handed to `wrangler dev --env-file`, so bindings (secrets
// included) reach the Worker without ever appearing on a command line.
import { existsSync, readFileSync } from "node:fs";
import { bindingsAmong } from "../scripts/bindings.mjs";

/**
 * Parses dotenv text the way wrangler's dotenv does for the common cases: `KEY=value`, optional `export`,
 * '…', "…" (with \n escapes) and `…` quotes (which may span lines), `#` comments.
 * @param {string} text
 * @returns {Record<string, string>}
 */
export function parseDotenv(text) {
  /** @type {Record<string, string>} */
  const vars = {};
  const line =
    /^\s*(?:export\s+)?([\w.-]+)\s*=\s*('(?:\\'|[^'])*'|"(?:\\"|[^"])*"|`(?:\\`|[^`])*`|[^#\r\n]*)?[^\S\r\n]*(?:#.*)?$/gm;
  for (const match of text.replace(/\r\n?/g, "\n").matchAll(line)) {
    const [, key = "", raw = ""] = match;
    let value = raw.trim();
    const quote = value[0];
    if ((quote === "'" || quote === '"' || quote === "`") && value.endsWith(quote) && value.length >= 2) {
      value = value.slice(1, -1);
      if (quote === '"') value = value.replace(/\\n/g, "\n").replace(/\\r/g, "\r");
    }
    vars[key] = value;
  }
  return vars;
}

/**
 * `.dev.vars` (all of it) overlaid with the bindings of the README's "Configuration" present in `env`.
 * @param {string} devVarsPath
 * @param {NodeJS.ProcessEnv} env
 * @returns {{ vars: Record<string, string>, from: Record<string, ".dev.vars" | "environment"> }}
 */
export function mergeBindings(devVarsPath, env) {
  const fileVars = existsSync(devVarsPath) ? parseDotenv(readFileSync(devVarsPath, "utf8")) : {};
  /** @type {Record<string, string>} */
  const vars = { ...fileVars };
  /** @type {Record<string, ".dev.vars" | "environment">} */
  const from = {};
  for (const key of Object.keys(fileVars)) from[key] = ".dev.vars";
  for (const key of bindingsAmong(Object.keys(env))) {
    const value = env[key];
    if (value !== undefined && value !== "") {
      vars[key] = value;
      from[key] = "environment";
    }
  }
  return { vars, from };
}

/**
 * Serializes bindings for wrangler's dotenv parser, which then runs dotenv-expand on every value whatever
 * its quotes: so each `$` is escaped as `\$` (expand turns it back into `$`), and the quote style is one
 * the value does not contain ('…' keeps everything literal, `…` when the value has a ').
 * @param {Record<string, string>} vars
 * @returns {string}
 */
export function formatEnvFile(vars) {
  return Object.entries(vars)
    .map(([key, value]) => {
      const escaped = value.replace(/\$/g, "\\$");
      if (!escaped.includes("'")) return `${key}='${escaped}'`;
      if (!escaped.includes("`")) return `${key}=\`${escaped}\``;
      throw new Error(`${key} contains both ' and \`, which a dotenv file cannot carry; remove one of them`);
    })
    .join("\n")
    .concat("\n");
}
