/* global module -- a CommonJS file: dependency-cruiser loads its config with require() */
// Import rules of src/ (docs/architecture.md, "Layers"), checked by scripts/test.sh:
//   npx depcruise src --config .dependency-cruiser.cjs
// Imports go one way, down: cli/client -> daemon -> api -> services ->
// (domain, store, reconcile) -> drivers. Skipping layers downward is fine;
// importing upward and cycles (type-only imports included) are errors.
// Unit tests beside the code (*.test.ts) and test helpers (testing.ts,
// testing/) are exempt from the layer rules, not from the cycle rule.

/** Layers from the top down; a module may import its own layer and those below. */
const LAYERS = [
  { name: 'cli', paths: ['^src/cli/', '^src/client/'] },
  {
    name: 'daemon',
    paths: ['^src/daemon\\.ts$', '^src/control-socket\\.ts$', '^src/controllers\\.ts$', '^src/drivers\\.ts$'],
  },
  { name: 'api', paths: ['^src/api/'] },
  { name: 'services', paths: ['^src/services/'] },
  { name: 'core', paths: ['^src/domain/', '^src/store/', '^src/reconcile/'] },
  {
    name: 'drivers',
    paths: ['^src/machines/', '^src/network/', '^src/volumes/', '^src/gateway/', '^src/certs/', '^src/images/'],
  },
];

/**
 * Modules every layer shares (error registry, configuration, clock, data-dir
 * paths, file modes, metrics registry): they may import only store types,
 * drivers and each other, never a layer that could import them back.
 */
const SHARED = [
  '^src/errors\\.ts$',
  '^src/config\\.ts$',
  '^src/file-modes\\.ts$',
  '^src/clock\\.ts$',
  '^src/paths\\.ts$',
  '^src/metrics\\.ts$',
];

const TESTS = ['\\.test\\.ts$', '(^|/)testing(\\.ts$|/)'];

const upward = LAYERS.slice(1).map((layer, i) => ({
  name: `no-upward-from-${layer.name}`,
  comment: `${layer.name} must not import ${LAYERS.slice(0, i + 1)
    .map((l) => l.name)
    .join(', ')} (imports go down only)`,
  severity: 'error',
  from: { path: layer.paths, pathNot: TESTS },
  to: { path: LAYERS.slice(0, i + 1).flatMap((l) => l.paths) },
}));

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'no import cycles, type-only imports included',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    ...upward,
    {
      name: 'no-upward-inside-core',
      comment: 'inside the middle layer: reconcile may use domain and store, domain may use store types, store neither',
      severity: 'error',
      from: { path: '^src/(store|domain)/', pathNot: TESTS },
      to: { path: '^src/reconcile/' },
    },
    {
      name: 'store-below-domain',
      comment: 'the store holds records; the rules over them (domain/) sit above it',
      severity: 'error',
      from: { path: '^src/store/', pathNot: TESTS },
      to: { path: '^src/domain/' },
    },
    {
      name: 'client-below-cli',
      comment: 'the API client is a library the CLI uses; it must not reach into the CLI',
      severity: 'error',
      from: { path: '^src/client/', pathNot: TESTS },
      to: { path: '^src/cli/' },
    },
    {
      name: 'shared-stays-low',
      comment: 'shared modules are imported by every layer, so they import only store types, drivers and each other',
      severity: 'error',
      from: { path: SHARED },
      to: { path: [...LAYERS.slice(0, 4).flatMap((l) => l.paths), '^src/domain/', '^src/reconcile/'] },
    },
  ],
  options: {
    // type-only imports count: a cycle of types is still a cycle to read through
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|dist)/' },
  },
};
