/**
 * Dependencies point one way (docs/development.md): each layer imports only its own layer and the ones
 * before it. A cycle fails too, type-only imports included (`tsPreCompilationDeps`), so a
 * `import type` cannot smuggle an upward edge past the check. `npm run check` runs this on src/.
 */
const LAYERS = [
  ["util", "^src/util/"],
  ["engine", "^src/engine/"],
  ["resilience", "^src/(resilience|leases|regions)/"],
  ["config", "^src/(config/|env\\.ts$)"],
  ["identity/live", "^src/(identity|live|rules)/"],
  ["middleware", "^src/middleware/"],
  ["http/admin/observability", "^src/(http|admin|observability|dashboard)/"],
  ["worker", "^src/(worker|index|jwt)\\.ts$"],
];

const upward = LAYERS.slice(0, -1).map(([name, path], i) => ({
  name: `no-upward-from-${name.replace(/\//g, "-")}`,
  comment: `${name} may import only ${LAYERS.slice(0, i + 1)
    .map(([n]) => n)
    .join(", ")}`,
  severity: "error",
  from: { path },
  to: { path: LAYERS.slice(i + 1).map(([, p]) => p) },
}));

module.exports = {
  forbidden: [
    ...upward,
    {
      name: "no-cycle",
      comment: "A cycle, even through `import type`, means two modules cannot be read (or layered) apart.",
      severity: "error",
      from: { path: "^src/" },
      to: { circular: true },
    },
    {
      name: "no-admin-to-dashboard",
      comment:
        "The dashboard is a user interface over the admin API: it imports the admin API, never the reverse (the Worker hands it to createAdminApp).",
      severity: "error",
      from: { path: "^src/admin/" },
      to: { path: "^src/dashboard/" },
    },
    {
      name: "in-a-layer",
      comment: "Every source file belongs to a layer; add a new folder to LAYERS in .dependency-cruiser.cjs.",
      severity: "error",
      from: { path: "^src/", pathNot: [...LAYERS.map(([, p]) => p), "\\.d\\.ts$"] },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    exclude: { path: "\\.lua$" },
  },
};
