// Headless Chromium for the browser tests: Debian's `chromium` (installed on first use the way redis-server is,
// scripts/debian-package.mjs) driven by playwright-core, which never downloads a browser of its own. Every
// launch gets a fresh profile directory, removed on close.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { ensureDebianCommand } from "../../scripts/debian-package.mjs";

/** Where Debian's package puts the browser. */
export const CHROMIUM_PATH = "/usr/bin/chromium";

/** No network but the page's own: no updates, sync, field trials or QUIC probes. */
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/**
 * Launches Chromium with a fresh profile.
 * @returns {Promise<{ context: import("playwright-core").BrowserContext, close: () => Promise<void> }>}
 */
export async function launchChromium() {
  ensureDebianCommand("chromium");
  const profile = mkdtempSync(join(tmpdir(), "floodgate-chromium-"));
  // A persistent context is how playwright takes a --user-data-dir of our choosing.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 900 },
  });
  return {
    context,
    close: async () => {
      await context.close().catch(() => undefined);
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
