#!/usr/bin/env node
// Validates the Worker's configuration before deploy, with the very schema the Worker uses at runtime
// (src/config, bundled on the fly with esbuild). Usage: npm run check-config [-- --env <name>] [-- --config <path>]
// Bindings come from wrangler.toml's [vars] (or [env.<name>.vars]), overlaid by .dev.vars (.dev.vars.<name> when
// it exists, as wrangler reads them) and by the environment for the binding names of the README's
// "Configuration". A secret that is not set locally is assumed to be set with `wrangler secret put` (it is
// listed, never printed). A secret found in wrangler.toml's vars is warned about (named, never printed): the file is
// committed and deployed vars show in the dashboard.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { parse as parseToml } from "smol-toml";
import { parseDotenv } from "../local/env-file.mjs";
import { bindingsAmong, SECRETS } from "./bindings.mjs";

/** Shorter admin tokens are warned about: 32 hex characters are 128 random bits. */
const MIN_ADMIN_TOKEN_LENGTH = 32;

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const option = (name) => {
  const at = args.indexOf(`--${name}`);
  return at === -1 ? undefined : args[at + 1];
};
const envName = option("env");
const configPath = resolve(root, option("config") ?? "wrangler.toml");

function fail(message) {
  console.error(`check-config: ${message}`);
  process.exit(1);
}

if (!existsSync(configPath)) fail(`${configPath} not found`);
let toml;
try {
  toml = parseToml(readFileSync(configPath, "utf8"));
} catch (error) {
  fail(`${configPath}: not valid TOML (${error.message})`);
}
let vars = toml.vars ?? {};
const varSections = [["[vars]", vars]];
if (envName !== undefined) {
  const section = toml.env?.[envName];
  if (!section) fail(`${configPath}: no [env.${envName}] section`);
  vars = section.vars ?? {}; // wrangler: vars are not inherited by environments
  varSections.push([`[env.${envName}.vars]`, vars]);
}
for (const [name, section] of varSections) {
  for (const secret of SECRETS) {
    if (section[secret] === undefined || section[secret] === "") continue;
    console.warn(
      `check-config: warning: ${secret} is set in ${name} of ${configPath}, but it is a secret: remove it there and use \`wrangler secret put ${secret}\`${envName && name !== "[vars]" ? ` --env ${envName}` : ""} (.dev.vars for local runs)`,
    );
  }
}

/**
 * The local secrets wrangler would load: `.dev.vars.<env>` with --env when that file exists, else `.dev.vars`
 * (next to the config file), parsed as wrangler's dotenv parses them.
 */
function readDevVars() {
  const base = join(dirname(configPath), ".dev.vars");
  for (const path of envName ? [`${base}.${envName}`, base] : [base]) {
    if (existsSync(path)) return parseDotenv(readFileSync(path, "utf8"));
  }
  return {};
}
const devVars = readDevVars();

const env = {};
for (const name of bindingsAmong([
  ...Object.keys(process.env),
  ...Object.keys(devVars),
  ...Object.keys(vars),
])) {
  const value = process.env[name] ?? devVars[name] ?? vars[name];
  if (value !== undefined && value !== "") env[name] = value;
}
const assumed = [];
for (const name of ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN"]) {
  if (env[name] === undefined) {
    assumed.push(name);
    env[name] = name === "UPSTASH_REDIS_REST_URL" ? "https://assumed-secret.invalid" : "assumed-secret";
  }
}

const bundle = await build({
  entryPoints: [join(root, "src/config/index.ts")],
  bundle: true,
  format: "esm",
  platform: "neutral",
  mainFields: ["module", "main"],
  write: false,
  logLevel: "silent",
});
const { clientChosenSources, parseEnv, unreadRuleFields } = await import(
  `data:text/javascript;base64,${Buffer.from(bundle.outputFiles[0].text).toString("base64")}`
);

const where = envName ? `${configPath} [env.${envName}]` : configPath;
/** parseEnv, assuming RATE_LIMIT_JWT_SECRET is a deployed secret when jwt keys need it and it is not set here. */
function parseAssumingJwtSecret() {
  try {
    return parseEnv(env);
  } catch (error) {
    const needsJwt = error?.name === "ConfigError" && error.message.includes("needs RATE_LIMIT_JWT_SECRET");
    if (!needsJwt || env.RATE_LIMIT_JWT_SECRET !== undefined || env.RATE_LIMIT_JWKS_URL !== undefined)
      throw error;
    assumed.push("RATE_LIMIT_JWT_SECRET");
    env.RATE_LIMIT_JWT_SECRET = "assumed-secret";
    return parseEnv(env);
  }
}

try {
  const config = parseAssumingJwtSecret();
  console.log(
    `check-config: ${where}: OK, ${config.rules.length} rule(s): ${config.rules.map((r) => r.name).join(", ")}`,
  );
  if (config.actions.length > 0) {
    // Action rules (docs/lists.md), in the order they are walked among the others.
    console.log(
      `  ${config.actions.length} action rule(s): ${config.actions.map((a) => `${a.name} (${a.action})`).join(", ")}`,
    );
  }
  console.log(
    `  mode ${config.mode}, failure ${config.failure}, origin ${config.originUrl.origin}, prefix ${config.prefix}`,
  );
  for (const unread of unreadRuleFields(env)) console.warn(`check-config: warning: ${unread}`);
  for (const chosen of clientChosenSources(config.rules)) console.warn(`check-config: warning: ${chosen}`);
  if (assumed.length > 0) {
    console.log(
      `  not set here, assumed to be secrets (check \`wrangler secret list\`): ${assumed.join(", ")}`,
    );
  }
  // Wrong admin tokens are throttled per client and per isolate only (docs/security.md): the token's length
  // stands between the admin API and someone guessing it. Its length is named, never the token.
  if (config.adminToken !== undefined && config.adminToken.length < MIN_ADMIN_TOKEN_LENGTH) {
    console.warn(
      `check-config: warning: RATE_LIMIT_ADMIN_TOKEN is ${config.adminToken.length} characters long: wrong tokens are throttled only per client, so use at least ${MIN_ADMIN_TOKEN_LENGTH} random ones (\`openssl rand -hex 32\`)`,
    );
  }
} catch (error) {
  if (error?.name !== "ConfigError") throw error;
  console.error(`check-config: ${where}: invalid configuration`);
  for (const problem of error.problems) console.error(`  ${problem}`);
  process.exit(1);
}
