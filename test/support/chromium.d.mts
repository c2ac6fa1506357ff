import type { BrowserContext } from "playwright-core";

/** Where Debian's package puts the browser. */
export const CHROMIUM_PATH: string;

/** Launches headless Chromium (installing Debian's package on first use) with a fresh profile. */
export function launchChromium(): Promise<{ context: BrowserContext; close: () => Promise<void> }>;
