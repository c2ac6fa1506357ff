/**
 * Another revision of Floodgate, to measure beside this checkout in the same run: its src/ and lua/ are
 * extracted under bench/.baseline/<revision>/ (git-ignored), so they bundle against this checkout's
 * node_modules.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** Extracts `revision`'s src/ and lua/; returns the directory holding them (absolute). */
export function extractBaseline(revision) {
  const dir = `${root}bench/.baseline/${revision.replace(/[^A-Za-z0-9._-]+/g, "_")}`;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const archive = execFileSync("git", ["archive", revision, "src", "lua"], { cwd: root, maxBuffer: 1 << 28 });
  execFileSync("tar", ["-x", "-C", dir], { input: archive });
  return dir;
}
