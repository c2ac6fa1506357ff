import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
const DEPCRUISE = join(ROOT, "node_modules/dependency-cruiser/bin/dependency-cruise.mjs");
const CONFIG = join(ROOT, ".dependency-cruiser.cjs");

/** Runs the project's dependency rules on `cwd`'s src/; resolves with the exit code and output. */
async function depcruise(cwd: string): Promise<{ code: number; output: string }> {
  try {
    const { stdout } = await run(process.execPath, [DEPCRUISE, "src", "--config", CONFIG], { cwd });
    return { code: 0, output: stdout };
  } catch (error) {
    const { code, stdout } = error as { code: number; stdout: string };
    return { code, output: stdout };
  }
}

async function tree(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "floodgate-layers-"));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  return dir;
}

describe("dependency rules (npm run check)", () => {
  const dirs: string[] = [];
  afterAll(async () => {
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it("pass on the repository's own src/", async () => {
    const { code, output } = await depcruise(ROOT);
    expect(output).toContain("no dependency violations found");
    expect(code).toBe(0);
  }, 60_000);

  it("fail on an upward import, even a type-only one, and name the rule", async () => {
    const dir = await tree({
      "src/middleware/limiter.ts": "export interface Limiter { n: number }\n",
      "src/engine/store.ts":
        'import type { Limiter } from "../middleware/limiter";\nexport const x: Limiter | undefined = undefined;\n',
    });
    dirs.push(dir);
    const { code, output } = await depcruise(dir);
    expect(code).not.toBe(0);
    expect(output).toMatch(/no-upward-from-engine: src\/engine\/store\.ts → src\/middleware\/limiter\.ts/);
  }, 60_000);

  it("fail on a cycle inside one layer", async () => {
    const dir = await tree({
      "src/admin/app.ts":
        'import { routes } from "./routes";\nexport type AdminEnv = { n: number };\nexport const app = routes;\n',
      "src/admin/routes.ts":
        'import type { AdminEnv } from "./app";\nexport const routes = (e: AdminEnv) => e;\n',
    });
    dirs.push(dir);
    const { code, output } = await depcruise(dir);
    expect(code).not.toBe(0);
    expect(output).toContain("no-cycle");
  }, 60_000);

  it("fail when the admin API imports the dashboard (the dashboard is a user interface over it)", async () => {
    const dir = await tree({
      "src/admin/app.ts": 'import { page } from "../dashboard/routes";\nexport const app = page;\n',
      "src/dashboard/routes.ts": "export const page = 1;\n",
    });
    dirs.push(dir);
    const { code, output } = await depcruise(dir);
    expect(code).not.toBe(0);
    expect(output).toContain("no-admin-to-dashboard: src/admin/app.ts → src/dashboard/routes.ts");
  }, 60_000);

  it("fail on a source folder that belongs to no layer", async () => {
    const dir = await tree({
      "src/misc/helper.ts": 'import { x } from "../util/x";\nexport const y = x;\n',
      "src/util/x.ts": "export const x = 1;\n",
    });
    dirs.push(dir);
    const { code, output } = await depcruise(dir);
    expect(code).not.toBe(0);
    expect(output).toContain("in-a-layer: src/misc/helper.ts");
  }, 60_000);
});
