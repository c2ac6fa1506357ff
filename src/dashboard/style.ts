/** The dashboard's stylesheet, served as `/__floodgate/dashboard.css` (the CSP allows no inline style). */
export const DASHBOARD_STYLE = `
:root { font-family: system-ui, sans-serif; color: #1a202c; background: #f7fafc; }
body { margin: 0 auto; max-width: 1200px; padding: 1rem; }
header { display: flex; align-items: baseline; gap: 1rem; }
header h1 { margin: 0; font-size: 1.4rem; }
header .updated { color: #718096; font-size: 0.85rem; flex: 1; }
button { cursor: pointer; }
#status { min-height: 1.4em; margin: 0.5rem 0; }
#status.ok { color: #22543d; }
#status.error, .error { color: #9b2c2c; }
dl { margin: 0; }
dt { color: #718096; font-size: 0.75rem; text-transform: uppercase; }
dd { margin: 0; font-weight: 600; }
.health { display: flex; flex-wrap: wrap; gap: 1.5rem; background: #fff; padding: 0.75rem; border-radius: 6px; }
.status-ok { color: #276749; }
.status-degraded { color: #9b2c2c; }
#rules { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 1rem; margin-top: 1rem; }
.rule { background: #fff; border-radius: 6px; padding: 0.75rem; box-shadow: 0 1px 2px #0002; }
.rule h2 { margin: 0 0 0.5rem; font-size: 1.1rem; font-family: ui-monospace, monospace; }
.facts { display: grid; grid-template-columns: 1fr 1fr; gap: 0.4rem; }
.counts { width: 100%; border-collapse: collapse; margin: 0.5rem 0; font-variant-numeric: tabular-nums; }
.counts th, .counts td { text-align: right; padding: 0.15rem 0.4rem; border-bottom: 1px solid #edf2f7; }
.counts thead th:nth-child(2) { color: #2f855a; }
.counts thead th:nth-child(3) { color: #c53030; }
.counts thead th:nth-child(4) { color: #b7791f; }
.chart { width: 100%; height: 60px; background: #f7fafc; }
.lists { display: grid; grid-template-columns: 1fr 1fr; gap: 0.5rem; font-size: 0.8rem; }
.lists h3 { font-size: 0.8rem; margin: 0.5rem 0 0.25rem; }
.lists ol { margin: 0; padding-left: 1.2rem; font-family: ui-monospace, monospace; word-break: break-all; }
.actions form { display: flex; flex-wrap: wrap; gap: 0.4rem; align-items: end; margin-top: 0.5rem; font-size: 0.8rem; }
.actions input { width: 9rem; }
.actions input[type="number"] { width: 4.5rem; }
.overrides { font-size: 0.75rem; font-family: ui-monospace, monospace; padding-left: 1.2rem; }
.overrides button { font: inherit; background: none; border: none; color: #2b6cb0; cursor: pointer; text-align: left; }
.signin { max-width: 22rem; margin: 10vh auto; background: #fff; padding: 1.5rem; border-radius: 6px; }
.signin form { display: grid; gap: 0.5rem; }
.hint { color: #718096; font-size: 0.8rem; }
`;
