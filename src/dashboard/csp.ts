/**
 * Headers on every dashboard response. The CSP allows scripts and styles from this origin only (the page's
 * script and stylesheet are files the Worker serves, so no `'unsafe-inline'`), fetches to this origin
 * only, and no framing (clickjacking); nothing else is loaded, so the page works offline.
 */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** The security headers of a dashboard response. */
export const DASHBOARD_HEADERS: Readonly<Record<string, string>> = {
  "Content-Security-Policy": CONTENT_SECURITY_POLICY,
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  // Not `no-referrer`: under it Chromium sends `Origin: null` with the page's own form posts.
  "Referrer-Policy": "same-origin",
  "Cache-Control": "no-store",
};
