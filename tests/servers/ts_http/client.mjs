// An MCP client on the official TypeScript SDK (1.x: @modelcontextprotocol/sdk, 2.x: @modelcontextprotocol/client)
// over Streamable HTTP. Usage: node client.mjs URL NODE_MODULES_DIR
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [url, modules] = process.argv.slice(2);
const v2 = existsSync(join(modules, "@modelcontextprotocol", "client"));
const load = (p) => import(pathToFileURL(join(modules, p)).href);

let Client, Transport;
if (v2) {
  const m = await load("@modelcontextprotocol/client/dist/index.mjs");
  Client = m.Client;
  Transport = m.StreamableHTTPClientTransport;
} else {
  Client = (await load("@modelcontextprotocol/sdk/dist/esm/client/index.js")).Client;
  Transport = (await load("@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js")).StreamableHTTPClientTransport;
}

const client = new Client({ name: "ts-interop", version: "1.0.0" }, { capabilities: {} });
const transport = new Transport(new URL(url));
await client.connect(transport);
const call = (params, onprogress) =>
  v2 ? client.callTool(params, onprogress ? { onprogress } : undefined)
     : client.callTool(params, undefined, onprogress ? { onprogress } : undefined);

const report = { sdk: v2 ? 2 : 1 };
const tools = await client.listTools();
report.tools = tools.tools.map((t) => t.name).filter((n) => ["echo", "add", "slow"].includes(n)).sort();
report.echo = (await call({ name: "echo", arguments: { text: "hi" } })).content[0].text;
report.add = (await call({ name: "add", arguments: { a: 2, b: 40 } })).content[0].text;
const fail = await call({ name: "fail", arguments: {} });
report.failHidden = fail.isError === true && !JSON.stringify(fail).includes("SECRET");
const progress = [];
await call({ name: "slow", arguments: { seconds: 0.1, steps: 2 } }, (p) => progress.push(p.progress));
report.progress = progress;
const many = await Promise.all([1, 2, 3, 4, 5].map((i) => call({ name: "add", arguments: { a: i, b: 1 } })));
report.concurrent = many.map((r) => r.content[0].text);
report.reconnection = (await call({ name: "test_reconnection", arguments: {} })).content[0].text;
await client.close();
console.log(JSON.stringify(report));
