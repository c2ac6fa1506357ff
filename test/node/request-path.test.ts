// The canonical path rules are matched against (src/rules/path.ts), and a request URL that cannot be parsed.
import { describe, expect, it } from "vitest";
import { createAdminApp } from "../../src/admin/app";
import { RequestFacts } from "../../src/identity/request";
import { canonicalPath } from "../../src/rules/path";
import { ProblemError } from "../../src/util/problem";

/** What a URL parser leaves of `path` (as `request.url` gives it), then its canonical form. */
const canonical = (path: string) => canonicalPath(new URL(`http://edge.test${path}`).pathname);

describe("canonicalPath", () => {
  it("decodes ASCII escapes once, merges slashes and resolves the dot segments decoding revealed", () => {
    expect(canonical("/%64eny/x")).toBe("/deny/x");
    expect(canonical("/deny%2Fx")).toBe("/deny/x");
    expect(canonical("//deny///x")).toBe("/deny/x");
    expect(canonical("/a/%2e%2e/deny/x")).toBe("/deny/x");
    expect(canonical("/a/%2E/b/%2e%2e")).toBe("/a/");
    expect(canonical("/%2e%2e/%2e%2e/x")).toBe("/x");
    expect(canonical("/%5Cdeny%5cx")).toBe("/deny/x");
    expect(canonical("/%2564eny")).toBe("/%64eny"); // once: an origin decodes once too
  });

  it("leaves a plain path as it is and keeps other escapes' bytes, hex upper-cased", () => {
    const plain = "/api/v1/items";
    expect(canonicalPath(plain)).toBe(plain);
    expect(canonical("/caf%c3%a9/x")).toBe("/caf%C3%A9/x");
    expect(canonical("/caf\u00e9/x")).toBe("/caf%C3%A9/x");
    expect(canonical("/50%/x")).toBe("/50%/x"); // not an escape
    expect(canonical("/a%3Fb%23c")).toBe("/a?b#c");
  });
});

describe("a request whose URL cannot be parsed", () => {
  it("is the client's 400 problem, not a 500", () => {
    // A runtime may pass on `Host: a b` (workerd serve does); Request's own constructor would refuse it.
    const request = { url: "http://a b/deny/x", headers: new Headers() } as unknown as Request;
    let thrown: unknown;
    try {
      new RequestFacts(request, { clientIpHeader: "cf-connecting-ip" });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ProblemError);
    expect(thrown).toMatchObject({ status: 400, title: "Bad Request" });
  });

  it("is the admin API's 400 too, before its sign-in check", async () => {
    const app = createAdminApp(() => {
      throw new Error("the admin context is never needed for such a request");
    });
    const request = {
      url: "http://a b/__floodgate/rules",
      method: "GET",
      headers: new Headers(),
    } as unknown as Request;
    const response = await app.fetch(request);
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ title: "Bad Request" });
  });
});
