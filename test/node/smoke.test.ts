import { expect, it, inject } from "vitest";
import script from "../../lua/floodgate.lua";
it("injects", () => { expect(inject("redisRestToken")).toBe("t"); expect(script.length).toBe(15); });
