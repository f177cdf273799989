// Drives the appliance's own MCP endpoint (/v1/mcp on the TLS control
// listener) with the official MCP TypeScript SDK as two principals, against
// the real appliance e2e/principals_test.go starts: AIRLOCK_MCP_URL, the
// tokens AIRLOCK_MCP_TOKEN_A (every scope but admin, quota one sandbox) and
// AIRLOCK_MCP_TOKEN_B (no sandbox:exec), AIRLOCK_MCP_IMAGE, and the
// appliance CA in NODE_EXTRA_CA_CERTS. Run: node --test mcp-listener.test.mjs
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const endpoint = process.env.AIRLOCK_MCP_URL;
const image = process.env.AIRLOCK_MCP_IMAGE;
const clients = [];
const sandboxes = [];

async function connect(token) {
  const c = new Client({ name: "airlock-mcp-listener-test", version: "1.0.0" });
  await c.connect(new StreamableHTTPClientTransport(new URL(endpoint),
    { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  clients.push(c);
  return c;
}

// tool returns a tool's structured result, or { error } with its text.
async function tool(c, name, args) {
  const r = await c.callTool({ name, arguments: args }, undefined, { timeout: 300_000 });
  if (r.isError) return { error: r.content.map((x) => x.text ?? "").join("") };
  return r.structuredContent;
}

after(async () => {
  for (const [c, id] of sandboxes) await tool(c, "destroy_sandbox", { sandbox_id: id });
  for (const c of clients) await c.close();
});

test("a wrong token gets no session", async () => {
  assert.ok(endpoint && image && process.env.AIRLOCK_MCP_TOKEN_A && process.env.AIRLOCK_MCP_TOKEN_B,
    "AIRLOCK_MCP_URL, AIRLOCK_MCP_IMAGE and the tokens must be set (run through go test ./e2e -run TestPrincipalsOnAppliance)");
  await assert.rejects(connect("not-a-token-0123456789abcdef"), /401|nauthorized/);
});

test("each principal's tool calls run as it: own sandboxes, its scopes, its quota", async () => {
  const a = await connect(process.env.AIRLOCK_MCP_TOKEN_A);
  const b = await connect(process.env.AIRLOCK_MCP_TOKEN_B);
  assert.equal((await a.listTools()).tools.length, 8);

  const sa = await tool(a, "create_sandbox", { image });
  assert.ok(sa.sandbox_id, `create_sandbox as A: ${JSON.stringify(sa)}`);
  sandboxes.push([a, sa.sandbox_id]);
  const r = await tool(a, "run_command", { sandbox_id: sa.sandbox_id, command: "echo hi" });
  assert.equal(r.stdout, "hi\n", JSON.stringify(r));
  const times = [];
  for (let i = 0; i < 20; i++) {
    const t0 = process.hrtime.bigint();
    assert.equal((await tool(a, "run_command", { sandbox_id: sa.sandbox_id, command: "echo hi" })).stdout, "hi\n");
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((x, y) => x - y);
  console.log(`mcp run_command("echo hi") p50 ${times[10].toFixed(1)} ms over the listener's /v1/mcp on TLS (n=20)`);
  const again = await tool(a, "create_sandbox", { image });
  assert.match(again.error ?? "", /quota_exceeded/, "A's second sandbox is over its quota of one");

  const sb = await tool(b, "create_sandbox", { image });
  assert.ok(sb.sandbox_id, `create_sandbox as B: ${JSON.stringify(sb)}`);
  sandboxes.push([b, sb.sandbox_id]);
  const run = await tool(b, "run_command", { sandbox_id: sb.sandbox_id, command: "id" });
  assert.match(run.error ?? "", /lacks the scope "sandbox:exec"/);
  const peek = await tool(b, "read_file", { sandbox_id: sa.sandbox_id, path: "/etc/hostname" });
  assert.match(peek.error ?? "", /no sandbox/, "B cannot read A's sandbox");
});
