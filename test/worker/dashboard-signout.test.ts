// Signing out of the dashboard ends the session everywhere, not only in the browser that signed out: a copy
// of the cookie (stolen, or kept by a shared machine) stops working in every isolate within about a second.
// Two Worker instances on one prefix stand for two isolates; real Redis through the local REST server.
import { describe, expect, it } from "vitest";
import { ADMIN_TOKEN, baseEnv, call, makeEnv } from "./admin-harness";

const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "gcra", limit: 2, period: "1h" }];
const ORIGIN = "http://floodgate.test";

async function signIn(testEnv: Record<string, unknown>): Promise<string> {
  const response = await call(testEnv, "/__floodgate/login", {
    method: "POST",
    token: null,
    headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: ORIGIN },
    body: new URLSearchParams({ token: ADMIN_TOKEN }),
  });
  expect(response.status).toBe(303);
  return (response.headers.get("Set-Cookie") ?? "").split(";")[0] as string;
}

const withCookie = (testEnv: Record<string, unknown>, cookie: string) =>
  call(testEnv, "/__floodgate/dashboard.json", { token: null, headers: { Cookie: cookie } });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("signing out of the dashboard", () => {
  it("revokes the session's cookie in every isolate within about a second", async () => {
    const one = makeEnv(`t-signout-${crypto.randomUUID().slice(0, 8)}`, RULES, {
      ORIGIN_URL: baseEnv.ORIGIN_URL,
    });
    const two = { ...one }; // another bindings object: another app, as another isolate
    const cookie = await signIn(one);
    expect((await withCookie(one, cookie)).status).toBe(200);
    expect((await withCookie(two, cookie)).status).toBe(200);

    const out = await call(one, "/__floodgate/logout", {
      method: "POST",
      token: null,
      headers: { Cookie: cookie, Origin: ORIGIN },
    });
    expect(out.status).toBe(303);
    expect(out.headers.get("Set-Cookie")).toMatch(/^floodgate_session=; Max-Age=0/);
    const signedOutAt = Date.now();

    // The isolate that signed out refuses the cookie at once; the other within about a second.
    expect((await withCookie(one, cookie)).status).toBe(401);
    let revokedAfterMs: number | undefined;
    while (Date.now() - signedOutAt < 5000) {
      if ((await withCookie(two, cookie)).status === 401) {
        revokedAfterMs = Date.now() - signedOutAt;
        break;
      }
      await sleep(50);
    }
    expect(revokedAfterMs).toBeDefined();
    expect(revokedAfterMs).toBeLessThan(2000);
    // The page shows the sign-in form again, and a new sign-in works everywhere.
    const page = await call(two, "/__floodgate/", { token: null, headers: { Cookie: cookie } });
    expect(await page.text()).toMatch(/name="token"/);
    const again = await signIn(two);
    expect((await withCookie(one, again)).status).toBe(200);
    expect((await withCookie(two, again)).status).toBe(200);
    // The admin token itself is never revoked by a sign-out.
    expect((await call(two, "/__floodgate/dashboard.json")).status).toBe(200);
  });

  it("revokes it in an isolate that has been idle since long before the sign-out", async () => {
    const one = makeEnv(`t-signout-${crypto.randomUUID().slice(0, 8)}`, RULES, {
      ORIGIN_URL: baseEnv.ORIGIN_URL,
    });
    const idle = { ...one };
    const cookie = await signIn(one);
    expect((await withCookie(idle, cookie)).status).toBe(200);
    await sleep(1200); // the idle isolate's copy of the live state is now older than a refresh
    await call(one, "/__floodgate/logout", {
      method: "POST",
      token: null,
      headers: { Cookie: cookie, Origin: ORIGIN },
    });
    // Its very next request with the cookie is refused: a stale copy is read again before a cookie is trusted.
    expect((await withCookie(idle, cookie)).status).toBe(401);
  });
});
