// The dashboard's sign-in and its defences, on the real Worker against real Redis: no session → sign-in
// form or 401; forged, expired or pre-rotation cookies → 401; cross-site changes refused; the CSP forbids
// inline scripts; no page carries a secret, a raw identity or a raw IP.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createSession, SESSION_TTL_MS } from "../../src/admin/session";
import worker from "../../src/worker";
import { ADMIN_TOKEN, baseEnv, call, makeEnv } from "./admin-harness";

const RULES = [
  { name: "api", key: "header:x-api-key", algorithm: "gcra", limit: 2, period: "1h" },
  { name: "per-ip", key: "ip", algorithm: "token-bucket", limit: 5, period: "1m", mode: "monitor" },
];
const PAGE = "/__floodgate/";
const ORIGIN = "http://floodgate.test";

const freshEnv = () =>
  makeEnv(`t-dash-${crypto.randomUUID().slice(0, 8)}`, RULES, { ORIGIN_URL: baseEnv.ORIGIN_URL });

/** Signs in through the form, as a browser would; returns the cookie pair `name=value`. */
async function signIn(testEnv: Record<string, unknown>, url = PAGE): Promise<string> {
  const response = await call(testEnv, "/__floodgate/login", {
    method: "POST",
    token: null,
    headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: new URL(url, ORIGIN).origin },
    body: new URLSearchParams({ token: ADMIN_TOKEN }),
  });
  expect(response.status).toBe(303);
  return (response.headers.get("Set-Cookie") ?? "").split(";")[0] as string;
}

/** The page, read with a cookie; with its CSRF token. */
async function page(testEnv: Record<string, unknown>, cookie?: string) {
  const response = await call(testEnv, PAGE, { token: null, headers: cookie ? { Cookie: cookie } : {} });
  const html = await response.text();
  const csrf = /<meta name="floodgate-csrf" content="([^"]+)">/.exec(html)?.[1];
  return { response, html, csrf };
}

const cspScriptSources = (response: Response) => {
  const csp = response.headers.get("Content-Security-Policy") ?? "";
  const directive =
    csp
      .split(";")
      .map((d) => d.trim())
      .find((d) => d.startsWith("script-src")) ??
    csp
      .split(";")
      .map((d) => d.trim())
      .find((d) => d.startsWith("default-src"));
  return directive;
};

describe("the dashboard's sign-in", () => {
  it("is 404 when RATE_LIMIT_ADMIN_TOKEN is not set", async () => {
    const { RATE_LIMIT_ADMIN_TOKEN: _, ...off } = freshEnv();
    expect((await call(off, PAGE, { token: null })).status).toBe(404);
    expect((await call(off, "/__floodgate/dashboard.js", { token: null })).status).toBe(404);
  });

  it("shows a sign-in form with a `token` field to a visitor without a session", async () => {
    const { response, html } = await page(freshEnv());
    expect(response.status).toBe(200);
    expect(response.headers.get("Content-Type")).toMatch(/^text\/html/);
    expect(html).toMatch(/<form method="post" action="\/__floodgate\/login">/);
    expect(html).toMatch(/<input[^>]*name="token"/);
    expect(html).not.toContain('data-rule="api"');
  });

  it("answers a right token with 303 and a 12-hour HttpOnly, SameSite=Strict cookie on /__floodgate", async () => {
    const response = await call(freshEnv(), "/__floodgate/login", {
      method: "POST",
      token: null,
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: ORIGIN },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    expect(response.status).toBe(303);
    expect(response.headers.get("Location")).toBe("/__floodgate/");
    const cookie = response.headers.get("Set-Cookie") ?? "";
    expect(cookie).toMatch(/^floodgate_session=[^;]+/);
    expect(cookie).toContain("HttpOnly");
    expect(cookie).toContain("SameSite=Strict");
    expect(cookie).toContain("Path=/__floodgate");
    expect(cookie).toContain(`Max-Age=${SESSION_TTL_MS / 1000}`);
    expect(cookie).not.toContain("Secure"); // plain http here
    expect(cookie).not.toContain(ADMIN_TOKEN);
  });

  it("marks the cookie Secure over https", async () => {
    const ctx = createExecutionContext();
    const response = await worker.fetch(
      new Request("https://floodgate.test/__floodgate/login", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "https://floodgate.test" },
        body: new URLSearchParams({ token: ADMIN_TOKEN }),
      }),
      freshEnv() as never,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    expect(response.status).toBe(303);
    expect(response.headers.get("Set-Cookie")).toMatch(/; Secure(;|$)/);
  });

  it("sets no cookie for a wrong or empty token", async () => {
    for (const token of ["wrong", `${ADMIN_TOKEN}x`, ""]) {
      const response = await call(freshEnv(), "/__floodgate/login", {
        method: "POST",
        token: null,
        headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: ORIGIN },
        body: new URLSearchParams({ token }),
      });
      expect(response.status).toBe(401);
      expect(response.headers.get("Set-Cookie")).toBeNull();
      expect(await response.text()).toMatch(/name="token"/);
    }
  });

  it("signs out: the cookie is cleared", async () => {
    const testEnv = freshEnv();
    const cookie = await signIn(testEnv);
    const response = await call(testEnv, "/__floodgate/logout", {
      method: "POST",
      token: null,
      headers: { Cookie: cookie, Origin: ORIGIN },
    });
    expect(response.status).toBe(303);
    expect(response.headers.get("Set-Cookie")).toMatch(/^floodgate_session=; Max-Age=0/);
  });
});

describe("the dashboard page", () => {
  it("lists every rule with its algorithm and current numbers in its first HTML response", async () => {
    const testEnv = freshEnv();
    for (let i = 0; i < 4; i++) {
      await call(testEnv, "/anything", {
        token: null,
        headers: { "x-api-key": "secret-key-4711" },
        ip: "203.0.113.77",
      });
    }
    const { response, html } = await page(testEnv, await signIn(testEnv));
    expect(response.status).toBe(200);
    for (const rule of RULES) {
      expect(html).toContain(`data-rule="${rule.name}"`);
      expect(html).toContain(`<dd data-field="algorithm">${rule.algorithm}</dd>`);
    }
    // 2 allowed and 2 denied by `api`; `per-ip` (monitor) allowed all 4.
    const card = html.slice(html.indexOf('data-rule="api"'), html.indexOf('data-rule="per-ip"'));
    expect(card).toContain('<td data-field="last5m.allowed">2</td>');
    expect(card).toContain('<td data-field="last5m.denied">2</td>');
    expect(card).toMatch(/<li><a href="\/__floodgate\/keys\/api\/hash%3A[A-Za-z0-9_-]{22}"/);
    expect(html).toContain('<span data-field="mode">monitor</span>');
  });

  it("never carries the admin token, the Upstash token, a raw identity or a raw IP", async () => {
    const testEnv = freshEnv();
    for (let i = 0; i < 3; i++) {
      await call(testEnv, "/x", {
        token: null,
        headers: { "x-api-key": "raw-key-31337" },
        ip: "198.51.100.23",
      });
    }
    const cookie = await signIn(testEnv);
    const { html } = await page(testEnv, cookie);
    const json = await (
      await call(testEnv, "/__floodgate/dashboard.json", { token: null, headers: { Cookie: cookie } })
    ).text();
    const script = await (await call(testEnv, "/__floodgate/dashboard.js", { token: null })).text();
    for (const text of [html, json, script]) {
      for (const secret of [
        ADMIN_TOKEN,
        baseEnv.UPSTASH_REDIS_REST_TOKEN,
        "raw-key-31337",
        "198.51.100.23",
      ]) {
        expect(text).not.toContain(secret);
      }
    }
    expect(json).toMatch(/"identity":"hash:[A-Za-z0-9_-]{22}"/);
  });

  it("sends a CSP without 'unsafe-inline' for scripts on every dashboard response", async () => {
    const testEnv = freshEnv();
    const cookie = await signIn(testEnv);
    const responses = [
      (await page(testEnv)).response,
      (await page(testEnv, cookie)).response,
      await call(testEnv, "/__floodgate/dashboard.js", { token: null }),
      await call(testEnv, "/__floodgate/dashboard.css", { token: null }),
      await call(testEnv, "/__floodgate/dashboard.json", { token: null, headers: { Cookie: cookie } }),
      await call(testEnv, "/__floodgate/login", { method: "POST", token: null, headers: { Origin: ORIGIN } }),
    ];
    for (const response of responses) {
      const scripts = cspScriptSources(response);
      expect(scripts).toBeDefined();
      expect(scripts).not.toContain("unsafe-inline");
      expect(scripts).not.toContain("*");
    }
    const { html } = await page(testEnv, cookie);
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script at all
  });
});

describe("admin actions with the dashboard's cookie", () => {
  const actions = [
    ["GET", "/__floodgate/dashboard.json", undefined],
    ["PUT", "/__floodgate/mode", { rule: "api", mode: "monitor" }],
    ["DELETE", "/__floodgate/keys/api/some-key", undefined],
    ["PUT", "/__floodgate/overrides/api/some-key", { limit: 10 }],
    ["DELETE", "/__floodgate/overrides/api/some-key", undefined],
  ] as const;

  const request = (
    testEnv: Record<string, unknown>,
    [method, path, body]: (typeof actions)[number],
    headers: Record<string, string>,
  ) =>
    call(testEnv, path, {
      method,
      token: null,
      headers: { "Content-Type": "application/json", ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  it("answers every action without a session, or with a forged, expired or pre-rotation cookie, with 401", async () => {
    const testEnv = freshEnv();
    const valid = (await signIn(testEnv)).split("=")[1] as string;
    const [expires, nonce] = valid.split(".");
    const cookies = [
      undefined,
      `floodgate_session=${expires}.${nonce}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA`, // forged signature
      `floodgate_session=${Number(expires) + 3_600_000}.${nonce}.${valid.split(".")[2]}`, // extended expiry
      `floodgate_session=${await createSession(ADMIN_TOKEN, Date.now() - SESSION_TTL_MS - 1000)}`, // expired
      `floodgate_session=${await createSession("the-token-before-rotation")}`,
    ];
    for (const [i, cookie] of cookies.entries()) {
      // Each bad cookie from its own client: more than 10 wrong ones from one are held up (admin-throttle.test.ts).
      const ip = `192.0.2.${100 + i}`;
      for (const action of actions) {
        const response = await request(
          testEnv,
          action,
          cookie ? { Cookie: cookie, Origin: ORIGIN, "CF-Connecting-IP": ip } : { Origin: ORIGIN },
        );
        expect(response.status, `${action[0]} ${action[1]} with ${cookie}`).toBe(401);
      }
      const { html } = await page(testEnv, cookie);
      expect(html).toMatch(/name="token"/);
      expect(html).not.toContain('data-rule="api"');
    }
  });

  it("refuses a change from another origin, or without the CSRF token, and accepts the dashboard's own", async () => {
    const testEnv = freshEnv();
    const cookie = await signIn(testEnv);
    const { csrf } = await page(testEnv, cookie);
    expect(csrf).toBeDefined();
    const change = actions[1];
    const refused: Record<string, string>[] = [
      { Cookie: cookie, Origin: "https://evil.example", "X-Floodgate-CSRF": csrf as string },
      { Cookie: cookie, "Sec-Fetch-Site": "cross-site", "X-Floodgate-CSRF": csrf as string },
      { Cookie: cookie, "X-Floodgate-CSRF": csrf as string }, // neither Origin nor Sec-Fetch-Site
      { Cookie: cookie, Origin: ORIGIN }, // same origin, no CSRF token
      { Cookie: cookie, Origin: ORIGIN, "X-Floodgate-CSRF": "forged" },
    ];
    for (const headers of refused) {
      const response = await request(testEnv, change, headers);
      expect([401, 403]).toContain(response.status);
    }
    const rules = await (await call(testEnv, "/__floodgate/rules")).json<{
      rules: Array<{ name: string; mode: { effective: string } }>;
    }>();
    expect(rules.rules.find((r) => r.name === "api")?.mode.effective).toBe("on");

    const accepted = await request(testEnv, change, {
      Cookie: cookie,
      Origin: ORIGIN,
      "X-Floodgate-CSRF": csrf as string,
    });
    expect(accepted.status).toBe(200);
    const after = await accepted.json<{ rules: Array<{ name: string; mode: { effective: string } }> }>();
    expect(after.rules.find((r) => r.name === "api")?.mode.effective).toBe("monitor");
  });

  it("refuses a cross-site sign-in form post", async () => {
    const response = await call(freshEnv(), "/__floodgate/login", {
      method: "POST",
      token: null,
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "https://evil.example" },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    expect(response.status).toBe(403);
    expect(response.headers.get("Set-Cookie")).toBeNull();
  });

  it("keeps Bearer access as it is", async () => {
    const testEnv = freshEnv();
    const response = await call(testEnv, "/__floodgate/dashboard.json");
    expect(response.status).toBe(200);
    const data = await response.json<{ rules: Array<{ name: string }> }>();
    expect(data.rules.map((r) => r.name)).toEqual(["api", "per-ip"]);
  });
});

describe("the same-origin check", () => {
  it("falls back to Sec-Fetch-Site when the browser sends `Origin: null`", async () => {
    const testEnv = freshEnv();
    const cookie = await signIn(testEnv);
    const { csrf } = await page(testEnv, cookie);
    const put = (headers: Record<string, string>) =>
      call(testEnv, "/__floodgate/mode", {
        method: "PUT",
        token: null,
        headers: {
          "Content-Type": "application/json",
          Cookie: cookie,
          "X-Floodgate-CSRF": csrf as string,
          ...headers,
        },
        body: JSON.stringify({ rule: "api", mode: "off" }),
      });
    expect((await put({ Origin: "null" })).status).toBe(403);
    expect((await put({ Origin: "null", "Sec-Fetch-Site": "cross-site" })).status).toBe(403);
    expect((await put({ Origin: "null", "Sec-Fetch-Site": "same-origin" })).status).toBe(200);
  });
});

describe("sign-in from a client that is not a browser", () => {
  it("signs in without Origin or Sec-Fetch-Site (curl), and refuses one a browser marks cross-site", async () => {
    const form = () => new URLSearchParams({ token: ADMIN_TOKEN });
    const plain = await call(freshEnv(), "/__floodgate/login", { method: "POST", token: null, body: form() });
    expect(plain.status).toBe(303);
    expect(plain.headers.get("Set-Cookie")).toMatch(/^floodgate_session=/);
    const browserCrossSite: Record<string, string>[] = [
      { "Sec-Fetch-Site": "cross-site" },
      { "Sec-Fetch-Site": "same-site" },
      { Origin: "null" },
    ];
    for (const headers of browserCrossSite) {
      const response = await call(freshEnv(), "/__floodgate/login", {
        method: "POST",
        token: null,
        headers,
        body: form(),
      });
      expect(response.status).toBe(403);
      expect(response.headers.get("Set-Cookie")).toBeNull();
    }
  });

  it("answers a cookie that is not even base64 with 401, not a server error", async () => {
    const testEnv = freshEnv();
    for (const value of ["1.2.A", "9999999999999.x.%%%", "garbage", "1.2.3.4"]) {
      const response = await call(testEnv, "/__floodgate/dashboard.json", {
        token: null,
        headers: { Cookie: `floodgate_session=${value}` },
      });
      expect(response.status).toBe(401);
    }
  });
});
