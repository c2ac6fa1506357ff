import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);

/** Runs `npm run check-config`'s script on a wrangler.toml (and `files` beside it) written for the test. */
async function checkConfig(
  toml: string,
  args: string[] = [],
  env: Record<string, string> = {},
  files: Record<string, string> = {},
) {
  const dir = mkdtempSync(join(tmpdir(), "floodgate-check-"));
  writeFileSync(join(dir, "wrangler.toml"), toml);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  // Without the test runner's own bindings, so only the file (and `env`) decide.
  const childEnv: Record<string, string> = { PATH: process.env.PATH ?? "", ...env };
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      ["scripts/check-config.mjs", "--config", join(dir, "wrangler.toml"), ...args],
      {
        env: childEnv,
      },
    );
    return { code: 0, out: stdout + stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, out: failed.stdout + failed.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const valid = `
[vars]
ORIGIN_URL = "https://origin.example.com"
RATE_LIMIT_TIMEOUT_MS = 200
[[vars.RATE_LIMIT_RULES]]
name = "per-ip"
key = "ip"
algorithm = "sliding-window"
limit = 10
period = "10s"
`;

describe("npm run check-config", () => {
  it("validates the lease settings, naming the binding and the rule field", async () => {
    const ok = await checkConfig(
      valid.replace("[vars]", '[vars]\nRATE_LIMIT_LEASES = "off"\nRATE_LIMIT_LEASE_MS = 500'),
    );
    expect(ok.code).toBe(0);
    const { code, out } = await checkConfig(
      `${valid.replace("[vars]", '[vars]\nRATE_LIMIT_LEASES = "sometimes"\nRATE_LIMIT_LEASE_MS = 60000')}lease = "no"\n`,
    );
    expect(code).not.toBe(0);
    expect(out).toContain('RATE_LIMIT_LEASES: "sometimes" is not one of on | off');
    expect(out).toContain("RATE_LIMIT_LEASE_MS: 60000 is not from 1 to 10000");
    expect(out).toMatch(/RATE_LIMIT_RULES\[0\]\.lease: "no" is not true or false/);
  });

  it("warns about a secret set in [vars], naming it and never printing its value, and still passes", async () => {
    const token = "AXsecretRestToken0123456789";
    const admin = "admin-secret-0123456789";
    const { code, out } = await checkConfig(
      valid.replace(
        "[vars]",
        `[vars]\nUPSTASH_REDIS_REST_URL = "https://eu1-cool-bee.upstash.io"\nUPSTASH_REDIS_REST_TOKEN = "${token}"\nRATE_LIMIT_ADMIN_TOKEN = "${admin}"`,
      ),
    );
    expect(code).toBe(0);
    expect(out).toContain("OK, 1 rule(s): per-ip");
    expect(out).toMatch(
      /warning: UPSTASH_REDIS_REST_TOKEN is set in \[vars\].*use `wrangler secret put UPSTASH_REDIS_REST_TOKEN`/,
    );
    expect(out).toMatch(/warning: RATE_LIMIT_ADMIN_TOKEN is set in \[vars\]/);
    expect(out).not.toContain(token);
    expect(out).not.toContain(admin);
    // A secret in an environment's vars is named with that environment's section.
    const staging = await checkConfig(
      `${valid}\n[env.staging.vars]\nORIGIN_URL = "https://origin.example.com"\nRATE_LIMIT_JWT_SECRET = "${token}"\nRATE_LIMIT_RULES = '[{"name":"per-user","key":"jwt:sub","algorithm":"gcra","limit":5,"period":"1s"}]'\n`,
      ["--env", "staging"],
    );
    expect(staging.code).toBe(0);
    expect(staging.out).toMatch(
      /warning: RATE_LIMIT_JWT_SECRET is set in \[env\.staging\.vars\].*`wrangler secret put RATE_LIMIT_JWT_SECRET` --env staging/,
    );
    expect(staging.out).not.toContain(token);
    // Without one, no warning.
    expect((await checkConfig(valid)).out).not.toContain("warning");
  });

  it("accepts a valid wrangler.toml and says which secrets it assumes", async () => {
    const { code, out } = await checkConfig(valid);
    expect(code).toBe(0);
    expect(out).toContain("OK, 1 rule(s): per-ip");
    expect(out).toContain("UPSTASH_REDIS_REST_TOKEN");
  });

  it("fails naming every wrong binding and field, as the Worker's 500 would", async () => {
    const { code, out } = await checkConfig(`${valid}
RATE_LIMIT_MODE = "enforce"
[[vars.RATE_LIMIT_RULES]]
name = "per-ip"
key = "ip"
algorithm = "gcra"
limit = 5
period = "1 fortnight"
`);
    expect(code).toBe(1);
    expect(out).toContain('RATE_LIMIT_RULES[1].period: "1 fortnight" is not a duration');
    expect(out).not.toContain("OK");
  });

  it("names every problem of every rule and binding in one run, one per line", async () => {
    const { code, out } = await checkConfig(valid.replace("https://origin", "https://user:pw@origin"), [], {
      RATE_LIMIT_RULES: JSON.stringify([
        { name: "j", key: "ip", algorithm: "fixed-window", limit: 10, period: "1s", delay: "2s" },
        { name: "j", key: "ip", algorithm: "gcra", limit: 10, period: "1s" },
        { name: "c", key: "ip", algorithm: "concurrency", limit: 2, delay: "1s" },
        { name: "j", key: "ip", algorithm: "gcra", limit: "many", period: "1s" },
      ]),
    });
    expect(code).toBe(1);
    const lines = out.split("\n").map((line) => line.trim());
    for (const problem of [
      "ORIGIN_URL: has a user name or password in it, which is never sent: remove it",
      "RATE_LIMIT_RULES[0].delay: only token-bucket and gcra rules can delay a request (this one is fixed-window)",
      'RATE_LIMIT_RULES[1].name: "j" is already used by RATE_LIMIT_RULES[0]',
      "RATE_LIMIT_RULES[2].delay: only token-bucket and gcra rules can delay a request (this one is concurrency)",
      'RATE_LIMIT_RULES[3].limit: "many" is not a whole number',
      'RATE_LIMIT_RULES[3].name: "j" is already used by RATE_LIMIT_RULES[0]',
    ]) {
      expect(lines).toContain(problem);
    }
    expect(out).not.toContain("user:pw");
    // A wrong binding hides neither a missing one nor the Redis endpoints' pairing.
    const bindings = await checkConfig(
      valid.replace('ORIGIN_URL = "https://origin.example.com"', 'RATE_LIMIT_MODE = "enforce"'),
      [],
      {
        UPSTASH_REDIS_REST_URL: "https://a.example.com,https://b.example.com",
        UPSTASH_REDIS_REST_TOKEN: "t1,t2,t3",
      },
    );
    expect(bindings.code).toBe(1);
    expect(bindings.out).toContain('RATE_LIMIT_MODE: "enforce" is not one of on | off | monitor');
    expect(bindings.out).toContain("ORIGIN_URL: required");
    expect(bindings.out).toContain(
      "UPSTASH_REDIS_REST_TOKEN: has 3 comma-separated tokens for the 2 endpoints",
    );
  });

  it("warns of fields a rule's algorithm never reads, and still passes", async () => {
    const { code, out } = await checkConfig(valid, [], {
      RATE_LIMIT_RULES: JSON.stringify([
        { name: "w", key: "ip", algorithm: "fixed-window", limit: 10, period: "1s", burst: 5 },
        { name: "c", key: "ip", algorithm: "concurrency", limit: 2, cost: "header:x-rows" },
        { name: "t", key: "ip", algorithm: "token-bucket", limit: 10, period: "1s", burst: 5 },
      ]),
    });
    expect(code).toBe(0);
    expect(out).toContain(
      "warning: RATE_LIMIT_RULES[0].burst: ignored, only token-bucket and gcra rules have a burst",
    );
    expect(out).toContain(
      "warning: RATE_LIMIT_RULES[1].cost: ignored, a concurrency rule holds one slot per request",
    );
    expect(out).not.toContain("RATE_LIMIT_RULES[2]");
  });

  it("refuses a match that could never apply, and warns of a match option with nothing to apply to", async () => {
    const toml = `${valid}
[[vars.RATE_LIMIT_RULES]]
name = "never"
match = { methods = [], path = "/search?q=*" }
key = "ip"
algorithm = "fixed-window"
limit = 1
period = "1m"
`;
    const { code, out } = await checkConfig(toml);
    expect(code).toBe(1);
    expect(out).toContain("RATE_LIMIT_RULES[1].match.methods: an empty list matches no request");
    expect(out).toContain('RATE_LIMIT_RULES[1].match.path: "/search?q=*" never matches: it contains "?"');
    const unread = await checkConfig(valid, [], {
      RATE_LIMIT_RULES: JSON.stringify([
        {
          name: "w",
          key: "ip",
          algorithm: "fixed-window",
          limit: 10,
          period: "1s",
          match: { strict_slash: true },
        },
        {
          name: "x",
          key: "ip",
          algorithm: "fixed-window",
          limit: 10,
          period: "1s",
          match: { path: "/Login", case_insensitive: true, method_override: false },
        },
      ]),
    });
    expect(unread.code).toBe(0);
    expect(unread.out).toContain(
      "warning: RATE_LIMIT_RULES[0].match.strict_slash: ignored, the rule has no path",
    );
    expect(unread.out).toContain(
      "warning: RATE_LIMIT_RULES[1].match.method_override: ignored, the rule names no methods",
    );
    expect(unread.out).not.toContain("case_insensitive");
  });

  it("checks one environment with --env (vars are not inherited)", async () => {
    const toml = `${valid}
[env.staging.vars]
ORIGIN_URL = "https://staging.example.com"
RATE_LIMIT_RULES = '[{"name":"s","key":"header:x-api-key","algorithm":"token-bucket","limit":"many","period":"1m"}]'
`;
    expect((await checkConfig(toml)).code).toBe(0);
    const staging = await checkConfig(toml, ["--env", "staging"]);
    expect(staging.code).toBe(1);
    expect(staging.out).toContain('RATE_LIMIT_RULES[0].limit: "many" is not a whole number');
    expect((await checkConfig(toml, ["--env", "production"])).out).toContain("no [env.production] section");
  });

  it("reports a delay on an algorithm that cannot hold requests, and a shed rule without classes", async () => {
    const { code, out } = await checkConfig(valid, [], {
      RATE_LIMIT_RULES: JSON.stringify([
        { name: "w", key: "ip", algorithm: "fixed-window", limit: 10, period: "1s", delay: "2s" },
      ]),
    });
    expect(code).toBe(1);
    expect(out).toContain("RATE_LIMIT_RULES[0].delay: only token-bucket and gcra rules can delay a request");
    const shed = await checkConfig(valid, [], {
      RATE_LIMIT_RULES: JSON.stringify([
        { name: "o", key: "global", algorithm: "shed", limit: 20, priority: "method" },
      ]),
    });
    expect(shed.out).toContain("RATE_LIMIT_RULES[0].priorities: required for shed");
  });

  it("reports settle on a rule that cannot settle, and a settle source of no known form, naming the field", async () => {
    const { code, out } = await checkConfig(valid, [], {
      RATE_LIMIT_RULES: JSON.stringify([
        { name: "c", key: "ip", algorithm: "concurrency", limit: 2, settle: "header:x-tokens" },
        { name: "f", key: "ip", algorithm: "fixed-window", limit: 9, period: "1m", settle: "body:usage" },
        { name: "g", key: "ip", algorithm: "gcra", limit: 9, period: "1m", settle: "sse:usage..total" },
        {
          name: "h",
          key: "ip",
          algorithm: "token-bucket",
          limit: 9,
          period: "1m",
          settle: "json:usage.total_tokens",
        },
      ]),
    });
    expect(code).toBe(1);
    expect(out).toContain(
      "RATE_LIMIT_RULES[0].settle: only fixed-window, sliding-window, token-bucket and gcra rules can settle a cost from the response (this one is concurrency)",
    );
    expect(out).toContain(
      'RATE_LIMIT_RULES[1].settle: "body:usage" is not a settle source (header:<name> | json:<dot.path> | sse:<dot.path>)',
    );
    expect(out).toContain('RATE_LIMIT_RULES[2].settle: "sse:usage..total" is not a settle source');
    expect(out).not.toContain("RATE_LIMIT_RULES[3]");
  });

  it("reads .dev.vars as wrangler does: quoted values over several lines, export, comments", async () => {
    const devVars = `# local secrets
export RATE_LIMIT_MODE=monitor # not part of the value
RATE_LIMIT_RULES='[
  {"name": "multi", "key": "ip", "algorithm": "gcra",
   "limit": 5, "period": "1s"}
]'
`;
    const { code, out } = await checkConfig(valid, [], {}, { ".dev.vars": devVars });
    expect(out).toContain("OK, 1 rule(s): multi");
    expect(out).toContain("mode monitor");
    expect(code).toBe(0);
  });

  it("falls back to .dev.vars with --env when .dev.vars.<env> is missing, as wrangler does", async () => {
    const toml = `${valid}
[env.staging.vars]
ORIGIN_URL = "https://staging.example.com"
`;
    const bad = {
      ".dev.vars":
        'RATE_LIMIT_RULES=\'[{"name":"d","key":"ip","algorithm":"gcra","limit":"many","period":"1m"}]\'\n',
    };
    const fallback = await checkConfig(toml, ["--env", "staging"], {}, bad);
    expect(fallback.code).toBe(1);
    expect(fallback.out).toContain('RATE_LIMIT_RULES[0].limit: "many" is not a whole number');
    const own = await checkConfig(
      toml,
      ["--env", "staging"],
      {},
      {
        ...bad,
        ".dev.vars.staging":
          'RATE_LIMIT_RULES=\'[{"name":"s","key":"ip","algorithm":"gcra","limit":3,"period":"1m"}]\'\n',
      },
    );
    expect(own.out).toContain("OK, 1 rule(s): s");
  });

  it("lets the environment override the file, like the Worker's secrets", async () => {
    const { code, out } = await checkConfig(valid, [], { RATE_LIMIT_FAILURE: "sideways" });
    expect(code).toBe(1);
    expect(out).toContain('RATE_LIMIT_FAILURE: "sideways" is not one of open | closed');
  });

  it("warns about a short admin token, naming its length and never printing it, and still passes", async () => {
    const short = await checkConfig(
      valid,
      [],
      {},
      { ".dev.vars": "RATE_LIMIT_ADMIN_TOKEN=hunter2-hunter2-7\n" },
    );
    expect(short.code).toBe(0);
    expect(short.out).toMatch(/warning: RATE_LIMIT_ADMIN_TOKEN is 17 characters long/);
    expect(short.out).not.toContain("hunter2");
    const long = await checkConfig(
      valid,
      [],
      {},
      { ".dev.vars": `RATE_LIMIT_ADMIN_TOKEN=${"a1".repeat(16)}\n` },
    );
    expect(long.out).not.toContain("warning");
  });

  it("refuses an admin token shorter than 16 characters, naming its length and never printing it", async () => {
    const { code, out } = await checkConfig(valid, [], {}, { ".dev.vars": "RATE_LIMIT_ADMIN_TOKEN=abc\n" });
    expect(code).toBe(1);
    expect(out).toMatch(/RATE_LIMIT_ADMIN_TOKEN: 3 characters, fewer than 16/);
    expect(out).not.toMatch(/\babc\b/);
  });

  it("warns when a tier or a shed priority is one the client sends itself, and still passes", async () => {
    const rules = `
[[vars.RATE_LIMIT_RULES]]
name = "api"
key = "header:x-api-key"
algorithm = "fixed-window"
limit = 2
period = "1m"
tier = "header:x-plan"
tiers = { pro = { limit = 1000 } }
[[vars.RATE_LIMIT_RULES]]
name = "budget"
key = "global"
algorithm = "shed"
limit = 100
priority = ["ip", "query:priority"]
priorities = { critical = 1.0, low = 0.5 }
[[vars.RATE_LIMIT_RULES]]
name = "verified"
key = "ip"
algorithm = "fixed-window"
limit = 2
period = "1m"
tier = "jwt:plan"
tiers = { pro = { limit = 1000 } }
`;
    const { code, out } = await checkConfig(
      `[vars]\nORIGIN_URL = "https://origin.example.com"\n${rules}`,
      [],
      { RATE_LIMIT_JWT_SECRET: "jwt-secret-for-the-test" },
    );
    expect(code).toBe(0);
    expect(out).toMatch(/warning: rule "api" takes its tier from "header:x-plan", which the client sends/);
    expect(out).toMatch(
      /warning: rule "budget" takes its priority from "query:priority", which the client sends/,
    );
    expect(out).not.toMatch(/rule "verified"/);
  });

  it("rejects a Redis token that cannot be sent as a header value, never printing it", async () => {
    const { code, out } = await checkConfig(valid, [], {
      UPSTASH_REDIS_REST_URL: "https://eu1-cool-bee.upstash.io",
      UPSTASH_REDIS_REST_TOKEN: "tok\x01en",
    });
    expect(code).not.toBe(0);
    expect(out).toContain("UPSTASH_REDIS_REST_TOKEN: cannot be sent as an HTTP header value");
    expect(out).not.toContain("tok\x01en");
  });
});
