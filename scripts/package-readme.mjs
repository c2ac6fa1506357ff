// The npm package's README is package/README.md, not the repository's README.md (the proxy's page). npm always
// packs the README.md at the package root and cannot rename a file, so `prepack` puts package/README.md there
// and `postpack` puts the repository's back:
//   node scripts/package-readme.mjs in    (prepack: README.md kept aside, package/README.md in its place)
//   node scripts/package-readme.mjs out   (postpack: the repository's README.md back)
// The repository's README.md waits in node_modules/.cache, outside the package and the work tree. A pack that
// died between the two leaves it there: the next `in` (or an `out` by hand) puts it back first.
import { copyFileSync, existsSync, mkdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const readme = join(root, "README.md");
const kept = join(root, "node_modules/.cache/hono-floodgate-pack/README.md");

/** Puts the repository's README.md back, if a pack set it aside. */
function restore() {
  if (existsSync(kept)) renameSync(kept, readme);
}

const step = process.argv[2];
if (step === "in") {
  restore();
  mkdirSync(join(kept, ".."), { recursive: true });
  renameSync(readme, kept);
  copyFileSync(join(root, "package/README.md"), readme);
} else if (step === "out") {
  restore();
} else {
  console.error("usage: node scripts/package-readme.mjs in|out");
  process.exit(2);
}
