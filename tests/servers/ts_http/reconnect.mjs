// The official TypeScript SDK 1.x client keeping its standalone GET stream across a dropped connection.
// Usage: node reconnect.mjs URL NODE_MODULES_DIR
// Prints "ready" once connected, then one line per event: "error: ..." for transport errors and
// "notified: <method>" for each list_changed notification; exits after the second notification.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [url, modules] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(join(modules, p)).href);
const { Client } = await load("@modelcontextprotocol/sdk/dist/esm/client/index.js");
const { StreamableHTTPClientTransport } = await load("@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js");
const { ToolListChangedNotificationSchema } = await load("@modelcontextprotocol/sdk/dist/esm/types.js");

const client = new Client({ name: "ts-reconnect", version: "1.0.0" }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  reconnectionOptions: { initialReconnectionDelay: 200, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1.5, maxRetries: 3 },
});
let seen = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, async (n) => {
  seen += 1;
  console.log(`notified: ${n.method}`);
  if (seen >= 2) {
    await client.close();
    process.exit(0);
  }
});
await client.connect(transport);
transport.onerror = (e) => console.log(`error: ${e?.message ?? e}${e?.cause ? ` (${e.cause.message ?? e.cause})` : ""}`);
console.log("ready");
setTimeout(() => { console.log("error: timed out"); process.exit(1); }, 30000);
