// Drive an MCP stdio server with an official TypeScript SDK client and report what happened.
//
//   node interop_client.cjs SDK_DIR v1|v2 legacy|auto -- CMD ARGS...
//
// SDK_DIR holds node_modules with @modelcontextprotocol/sdk (v1) or @modelcontextprotocol/client (v2).
// Prints one JSON line {"ok": bool, "version": ..., "checks": {...}, "error": ...}; exit code 0 if ok.
'use strict';
const path = require('node:path');
const { createRequire } = require('node:module');

const [sdkDir, major, mode] = process.argv.slice(2, 5);
const cmd = process.argv.slice(process.argv.indexOf('--') + 1);
const req = createRequire(path.join(path.resolve(sdkDir), 'package.json'));

let Client, StdioClientTransport;
if (major === 'v1') {
  ({ Client } = req('@modelcontextprotocol/sdk/client/index.js'));
  ({ StdioClientTransport } = req('@modelcontextprotocol/sdk/client/stdio.js'));
} else {
  ({ Client } = req('@modelcontextprotocol/client'));
  ({ StdioClientTransport } = req('@modelcontextprotocol/client/stdio'));
}

// v1: callTool(params, resultSchema, options); v2: callTool(params, options)
function callTool(client, params, options) {
  return major === 'v1' ? client.callTool(params, undefined, options) : client.callTool(params, options);
}

const checks = {};
function check(name, cond, detail) {
  checks[name] = cond ? true : (detail === undefined ? false : String(detail));
  if (!cond) throw new Error(`check failed: ${name}${detail === undefined ? '' : ': ' + detail}`);
}
const SECRETS = ['SECRET-TOKEN-42', '/etc/shadow', 'RuntimeError', 'Traceback'];

async function main() {
  const opts = { capabilities: {} };
  if (major === 'v2') opts.versionNegotiation = { mode: mode === 'auto' ? 'auto' : 'legacy' };
  const client = new Client({ name: `ts-${major}-${mode}`, version: '1.0.0' }, opts);
  const transport = new StdioClientTransport({ command: cmd[0], args: cmd.slice(1), stderr: 'pipe' });
  await client.connect(transport);
  let version;
  if (typeof client.getNegotiatedProtocolVersion === 'function') version = client.getNegotiatedProtocolVersion();
  const info = client.getServerVersion();
  check('server_info', info && info.name === 'sturdyrpc-demo', JSON.stringify(info));
  const modern = version === '2026-07-28';
  if (!modern) {
    const p = await client.ping();
    check('ping', p && typeof p === 'object');
  }
  const tools = (await client.listTools()).tools.map((t) => t.name);
  check('tools_list', ['echo', 'add', 'fail', 'slow'].every((n) => tools.includes(n)), tools.join(','));

  let r = await client.callTool({ name: 'echo', arguments: { text: 'héllo' } });
  check('echo', !r.isError && r.content[0].text === 'héllo', JSON.stringify(r));
  r = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } });
  check('add', !r.isError && r.content[0].text === '42' && r.structuredContent && r.structuredContent.result === 42, JSON.stringify(r));
  r = await client.callTool({ name: 'fail', arguments: {} });
  const text = JSON.stringify(r);
  check('fail_is_error', r.isError === true, text);
  check('fail_no_secret', !SECRETS.some((s) => text.includes(s)), text);

  const seen = [];
  r = await callTool(client, { name: 'slow', arguments: { seconds: 0.15, steps: 3 } }, {
    onprogress: (p) => seen.push(p.progress),
  });
  // All three are sent before the reply (the Python side checks the wire). The SDK's legacy
  // path runs notification handlers in a microtask but responses synchronously, so a progress
  // notification read in the same chunk as the reply is dropped: accept an increasing prefix.
  const increasing = seen.every((v, i) => v === i + 1);
  check('progress', !r.isError && seen.length >= 1 && increasing, seen.join(','));
  checks.progress_seen = seen;

  const t0 = Date.now();
  const many = await Promise.all(Array.from({ length: 8 }, () => client.callTool({ name: 'slow', arguments: { seconds: 0.4 } })));
  const took = Date.now() - t0;
  check('eight_in_flight', many.every((x) => !x.isError) && took < 2000, `${took} ms`);

  const ac = new AbortController();
  const pending = callTool(client, { name: 'slow', arguments: { seconds: 30 } }, { signal: ac.signal, timeout: 60000 });
  setTimeout(() => ac.abort('test cancels'), 300);
  let cancelled = false;
  try { await pending; } catch (e) { cancelled = true; }
  check('cancel', cancelled);
  r = await client.callTool({ name: 'echo', arguments: { text: 'still alive' } });
  check('after_cancel', r.content[0].text === 'still alive');

  await client.close();
  return { ok: true, version, checks };
}

const timer = setTimeout(() => {
  process.stdout.write(JSON.stringify({ ok: false, checks, error: 'timed out' }) + '\n');
  process.exit(1);
}, 40000);
main().then(
  (res) => { clearTimeout(timer); process.stdout.write(JSON.stringify(res) + '\n'); process.exit(0); },
  (err) => { clearTimeout(timer); process.stdout.write(JSON.stringify({ ok: false, checks, error: String(err && err.stack || err) }) + '\n'); process.exit(1); },
);
