// `npm publish` runs this first (`prepublishOnly`): the package may not go out without `repository`, `homepage`
// and `bugs`, which tell a user where its source is and where to report a problem. The repository's public URL
// is not known yet, and a guessed one would send users to someone else's project, so package.json has none: the
// release that publishes it adds them (package/README.md, "Install").
import { readFileSync } from "node:fs";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const url = (field) => (typeof field === "string" ? field : field?.url);
const missing = ["repository", "homepage", "bugs"].filter((name) => !url(manifest[name]));
if (missing.length > 0) {
  console.error(
    `hono-floodgate: not published: package.json has no ${missing.join(", ")}. Add the public repository's URLs first.`,
  );
  process.exit(1);
}
